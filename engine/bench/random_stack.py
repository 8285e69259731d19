"""``parley-cli bench INPUT --weights random``: the stack a machine would get, timed without it.

The named ladder rungs (``--stt``, ``--llm``; default the CPU's online default, Whisper
large-v3-turbo and SmolLM2-360M) are built from their hub configs with random weights on
the runtimes a CPU runs them on: CTranslate2 int8 through faster-whisper, onnxruntime-genai
int4 (``engine.bench.random_weights.native_overrides``). TTS is the bundled Piper joe
voice (medium, the same architecture and size class as the lessac medium voice the online
default downloads). The recording then goes through two engines, interleaved run by
run: the bundled offline stack (real weights) and the random one.

Random weights say random words, and a learned end of turn reads the words: so the
chain reported is the end-of-turn wait (silence wait, text signal, commit wait) of the
bundled models on the same recording, plus the random stack's work after it (STT, LLM to
first token, hand-offs and waits), on the median turns. Two parts are of real words: the
LLM's first clause is the real model's clause length in tokens at the random model's
decode rate, and the TTS first chunk is the bundled voice's (the voice both stacks use)
on the real first clause, since a random reply's first "words" are runs of glued tokens
that take seconds to speak. Both stacks' own critical paths are printed beside it.

A random Whisper never stops and is never sure of its words, so on its own it would go
to the 30 s window on every turn; here its fitted-window decodes are kept, each
``random_weights.STT_TOKENS`` tokens long (``FittedWhisper.timing_random_weights``): the
window a real model uses on most turns. ``--stt-window full`` times the 30 s window.

``--compare stt=A,B`` (or ``llm=``; both, of the same length, pair up) times several
random stacks in one run, interleaved with the bundled one, e.g. the stack ``auto``
picks against today's online default.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.errors import ConfigError, NoSpeechError, ParleyError, run_command
from engine.pipeline.critical_path import Segment, median_turn

if TYPE_CHECKING:
    from engine.models.model_registry import ModelRegistry

DESCRIPTION = (__doc__ or "").split("\n\n")[0]
PROG = "parley-cli bench --weights random"
#: The parts of a turn that are waiting for the user's turn to end, not work.
END_OF_TURN = (Segment.SILENCE_WAIT, Segment.END_OF_TURN, Segment.COMMIT_WAIT)
#: Taken from the bundled stack: the end-of-turn wait (it reads the words), and the TTS
#: first chunk: both stacks speak with the bundled Piper voice, and a random reply's first
#: "clause" is a run of glued tokens hundreds of characters long (seconds of speech).
FROM_BUNDLED = (*END_OF_TURN, Segment.TTS_FIRST_CHUNK)
SOURCES = {s: "bundled" if s in FROM_BUNDLED else "random" for s in Segment} | {
    Segment.LLM_FIRST_CLAUSE: "random rate, the real clause's tokens"}
BACKENDS = {"stt": "faster-whisper", "llm": "onnx-genai"}
STAGES = ("stt", "llm")


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("input", help="recording streamed at real time")
    parser.add_argument("--weights", choices=("random",), required=True,
                        help="random: the named rungs built with random weights")
    parser.add_argument("--stt", default="whisper-large-v3-turbo", metavar="RUNG",
                        help="STT rung of resources/ladder.toml (default whisper-large-v3-turbo)")
    parser.add_argument("--llm", default="smollm2-360m-instruct", metavar="RUNG",
                        help="LLM rung (default smollm2-360m-instruct)")
    parser.add_argument("--random-layers", type=int, metavar="N",
                        help="N layers per stack instead of the real count (for tests)")
    parser.add_argument("--root", metavar="DIR", help="where the random models are built once "
                        "(default ~/.cache/parley/random)")
    parser.add_argument("--runs", type=int, default=3, help="number of runs (default 3)")
    parser.add_argument("--compare", action="append", default=[], metavar="STAGE=A,B",
                        help="random stacks side by side in one run: stt=RUNG,RUNG or "
                             "llm=RUNG,RUNG (the other stage from --stt/--llm); give both, "
                             "of the same length, to pair them up, e.g. --compare "
                             "stt=whisper-base.en,whisper-large-v3-turbo --compare "
                             "llm=qwen2.5-0.5b-instruct,smollm2-360m-instruct")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_config_flags(parser)
    return parser


def hub_config_name(stage: str, rung_id: str) -> str:
    """The hub config folder of ``rung_id``; ConfigError when it is not a CPU ``stage``
    rung on the runtime this bench builds (faster-whisper, onnx-genai)."""
    from engine.backends.ladder import load_ladder

    ladder = load_ladder()
    allowed = [r.id for r in ladder.rungs_for(stage, "cpu")
               if (build := r.build("cpu")) is not None and build.backend == BACKENDS[stage]]
    if rung_id not in allowed:
        raise ConfigError(f"--{stage} {rung_id!r} is not a {stage} rung that runs on "
                          f"{BACKENDS[stage]} on a CPU; allowed: {', '.join(allowed)}")
    config = ladder.get(rung_id).hub_config
    assert config is not None  # the ladder requires one for every stt and llm rung
    return config.parent.name


def stacks_to_time(stt: str, llm: str, compare: list[str]) -> list[tuple[str, str]]:
    """The (stt rung, llm rung) pairs to time: ``--stt``/``--llm`` alone, or what the
    ``--compare`` flags list (each ``stt=A,B`` or ``llm=A,B``). ConfigError naming the
    flag for a bad one. Rung names are checked later (``hub_config_name``)."""
    lists: dict[str, list[str]] = {}
    for text in compare:
        key, sep, values = text.partition("=")
        key = key.strip()
        if not sep or key not in STAGES:
            raise ConfigError(f"--compare {text!r}: expected stt=RUNG,RUNG or llm=RUNG,RUNG")
        if key in lists:
            raise ConfigError(f"--compare {key}= is given twice; list every {key} rung in one flag")
        names = [v.strip() for v in values.split(",") if v.strip()]
        if len(names) < 2:
            raise ConfigError(f"--compare {text!r}: name at least two {key} rungs, comma-separated")
        lists[key] = names
    if not lists:
        return [(stt, llm)]
    if len(lists) == 2 and len(lists["stt"]) != len(lists["llm"]):
        raise ConfigError(f"--compare: stt= lists {len(lists['stt'])} rungs and llm= "
                          f"{len(lists['llm'])}; to pair them up, list as many of each")
    count = max(len(v) for v in lists.values())
    pairs = list(zip(lists.get("stt", [stt] * count), lists.get("llm", [llm] * count), strict=True))
    if len(set(pairs)) != len(pairs):
        raise ConfigError(f"--compare: the stack {pairs[0][0]} + {pairs[0][1]} is listed twice")
    return pairs


def stack_label(stt: str, llm: str, *, alone: bool) -> str:
    """``random`` when one random stack is timed, else ``random STT+LLM``."""
    return "random" if alone else f"random {stt}+{llm}"


def chain(bundled: dict, random: dict) -> dict[str, float]:
    """Seconds per part of the reported chain (``SOURCES`` says where each comes from):
    the bundled median turn's end-of-turn wait and TTS first chunk, the random median
    turn's work, its first clause scaled to the real one's length (``first_clause_s``);
    ``voice_to_voice_s`` their sum."""
    bundled_path, random_path = bundled["critical_path"], random["critical_path"]
    out = {s.value: (bundled_path if s in FROM_BUNDLED else random_path).get(s.value, 0.0)
           for s in Segment}
    out[Segment.LLM_FIRST_CLAUSE.value] = first_clause_s(bundled, random)
    out["voice_to_voice_s"] = sum(out.values())
    return {k: round(v, 4) for k, v in out.items()}


def first_clause_s(bundled: dict, random: dict) -> float:
    """The random LLM's first token to first clause, for the first clause the real model
    gave on the same recording: a random reply's first words are runs of glued tokens, far
    longer than a real clause, so its own span times tokens no reply has. The bundled
    clause's tokens (its span times its decode rate) at the random model's decode rate;
    the random span itself where a rate is missing."""
    key = Segment.LLM_FIRST_CLAUSE.value
    own = random["critical_path"].get(key, 0.0)
    real_rate, random_rate = bundled.get("llm_tokens_per_s"), random.get("llm_tokens_per_s")
    if not real_rate or not random_rate:
        return own
    return bundled["critical_path"].get(key, 0.0) * real_rate / random_rate


def format_chain(parts: dict[str, float]) -> str:
    """The chain, one line per part, in milliseconds, each with its source."""
    lines = ["chain of the median turns (ms): the end-of-turn wait and the TTS first chunk "
             "(the same Piper voice, on a real first clause) from the bundled models on the "
             "same recording; the rest from the random-weight stack"]
    for segment in Segment:
        lines.append(f"  {segment.label:40} {parts[segment.value] * 1000:8.1f}  ({SOURCES[segment]})")
    lines.append(f"  {'= voice-to-voice':40} {parts['voice_to_voice_s'] * 1000:8.1f}")
    return "\n".join(lines)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None]) -> int:
    """Parse, build the random models, run both stacks; print the chain (or JSON)."""
    args = build_parser(add_config_flags).parse_args(argv)
    return run_command(lambda: _run(args), PROG)


def _run(args: argparse.Namespace) -> int:
    from engine.audio.decode import load_audio
    from engine.bench.random_weights import STT_TOKENS, WARNING, native_overrides
    from engine.config import SttWindow, config_from_flags
    from engine.models.model_registry import ModelRegistry
    from engine.recording import load_engine, run_recording
    from engine.report import format_budget, turn_dict

    if args.runs < 1:
        raise ConfigError(f"--runs must be at least 1; got {args.runs}")
    if args.random_layers is not None and args.random_layers < 1:
        raise ConfigError(f"--random-layers must be at least 1; got {args.random_layers}")
    pairs = stacks_to_time(args.stt, args.llm, args.compare)
    names = [(hub_config_name("stt", stt), hub_config_name("llm", llm)) for stt, llm in pairs]
    audio = load_audio(args.input)
    config = config_from_flags(args)
    print(f"WARNING: {WARNING}", file=sys.stderr, flush=True)
    stacks = {"bundled": config}
    random_stt: dict[str, str] = {}  # label -> the random Whisper's folder
    for (stt, llm), (stt_name, llm_name) in zip(pairs, names, strict=True):
        overrides = native_overrides(stt_name, llm_name, args.random_layers, _root(args))
        label = stack_label(stt, llm, alone=len(pairs) == 1)
        stacks[label] = config.with_overrides(overrides)
        random_stt[label] = overrides["stt.model"]
    registry = ModelRegistry()  # VAD and TTS are loaded once for every stack
    engines = {}
    runs: dict[str, list[dict]] = {label: [] for label in stacks}
    try:
        for label, cfg in stacks.items():
            print(f"loading the {label} stack...", file=sys.stderr, flush=True)
            engines[label] = load_engine(cfg, registry, _progress)
        _keep_fitted_decodes(registry, set(random_stt.values()), STT_TOKENS)
        for run in range(args.runs):
            for label, engine in engines.items():  # interleaved: the same load for all
                turns, errors = run_recording(engine, audio, None, realtime=True)
                if errors:
                    raise ParleyError(f"{label} stack, run {run + 1}: {'; '.join(errors)}")
                if not turns:
                    raise NoSpeechError(f"no speech found in {args.input}: nothing to measure")
                runs[label] += [turn_dict(t) for t in turns]
                print(f"run {run + 1}/{args.runs} {label}: {len(turns)} turn(s)", file=sys.stderr,
                      flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    medians = {label: median_turn(turns) for label, turns in runs.items()}
    bundled = medians["bundled"]
    if bundled is None or any(m is None for m in medians.values()):
        raise ParleyError("no turn with a reply heard in one of the stacks: no chain to report")
    chains = {label: chain(bundled, median) for label, median in medians.items()
              if label != "bundled" and median is not None}
    window = ("30 s window (--stt-window full)" if config.stt.window is SttWindow.FULL else
              f"fitted window, each random transcript {STT_TOKENS} tokens (a random Whisper "
              "never stops or is sure of itself, so its fallback to the 30 s window is off "
              "here; a real model takes it on a few turns in a hundred)")
    stack_rows = [{"label": label, "stt": stt, "llm": llm, "chain": chains[label]}
                  for label, (stt, llm) in zip(chains, pairs, strict=True)]
    if args.json:
        first = stack_rows[0]
        json.dump({"input": args.input, "stt": first["stt"], "llm": first["llm"],
                   "tts": "piper joe (bundled)", "stt_window": window,
                   "random_layers": args.random_layers, "runs": args.runs,
                   "chain": first["chain"], "stacks": stack_rows, "turns": runs},
                  sys.stdout, indent=1)
        print()
    else:
        print(format_budget(list(runs.items())))
        for row in stack_rows:
            print()
            print(f"{row['label']}: {row['stt']} (faster-whisper int8) + {row['llm']} "
                  "(onnx-genai int4) + Piper joe medium (bundled)")
            print(f"STT timed at the {window}")
            print(format_chain(row["chain"]))
        if len(stack_rows) > 1:
            print()
            print("voice-to-voice of the chains (ms): " + ", ".join(
                f"{r['stt']}+{r['llm']} {r['chain']['voice_to_voice_s'] * 1000:.0f}"
                for r in stack_rows))
    return 0


def _keep_fitted_decodes(registry: ModelRegistry, folders: set[str], tokens: int) -> None:
    """Give each random Whisper (loaded from one of ``folders``) the bench's fitted decode
    (``FittedWhisper.timing_random_weights``); the bundled real Whisper keeps its own."""
    from engine.backends.stt.faster_whisper import FasterWhisperStt

    for loaded in registry.loaded():
        model = loaded.model
        if isinstance(model, FasterWhisperStt) and loaded.key.model in folders:
            model.fitted = model.fitted.timing_random_weights(tokens)


def _root(args: argparse.Namespace):
    from pathlib import Path

    return Path(args.root).expanduser() if args.root else None


def _progress(stage: str, fraction: float | None, text: str) -> None:
    print(f"  [{stage}] {text}", file=sys.stderr, flush=True)
