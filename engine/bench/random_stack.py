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
first token and to first clause, TTS first chunk, hand-offs and waits), on the median
turns. Both stacks' own critical paths are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from engine.errors import ConfigError, NoSpeechError, ParleyError, run_command
from engine.pipeline.critical_path import Segment, median_turn

DESCRIPTION = (__doc__ or "").split("\n\n")[0]
PROG = "parley-cli bench --weights random"
#: The parts of a turn that are waiting for the user's turn to end, not work.
END_OF_TURN = (Segment.SILENCE_WAIT, Segment.END_OF_TURN, Segment.COMMIT_WAIT)
BACKENDS = {"stt": "faster-whisper", "llm": "onnx-genai"}


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


def chain(bundled: dict, random: dict) -> dict[str, float]:
    """Seconds per part of the reported chain: the bundled median turn's end-of-turn
    wait, the random median turn's work; ``voice_to_voice_s`` their sum."""
    bundled_path, random_path = bundled["critical_path"], random["critical_path"]
    out = {s.value: (bundled_path if s in END_OF_TURN else random_path).get(s.value, 0.0)
           for s in Segment}
    out["voice_to_voice_s"] = sum(out.values())
    return {k: round(v, 4) for k, v in out.items()}


def format_chain(parts: dict[str, float]) -> str:
    """The chain, one line per part, in milliseconds."""
    lines = ["chain of the median turns (ms): end-of-turn wait from the bundled models on the "
             "same recording; the rest from the random-weight stack"]
    for segment in Segment:
        source = "bundled" if segment in END_OF_TURN else "random"
        lines.append(f"  {segment.label:40} {parts[segment.value] * 1000:8.1f}  ({source})")
    lines.append(f"  {'= voice-to-voice':40} {parts['voice_to_voice_s'] * 1000:8.1f}")
    return "\n".join(lines)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None]) -> int:
    """Parse, build the random models, run both stacks; print the chain (or JSON)."""
    args = build_parser(add_config_flags).parse_args(argv)
    return run_command(lambda: _run(args), PROG)


def _run(args: argparse.Namespace) -> int:
    from engine.audio.decode import load_audio
    from engine.bench.random_weights import WARNING, native_overrides
    from engine.config import config_from_flags
    from engine.recording import load_engine, run_recording
    from engine.report import format_budget, turn_dict
    from engine.models.model_registry import ModelRegistry

    if args.runs < 1:
        raise ConfigError(f"--runs must be at least 1; got {args.runs}")
    if args.random_layers is not None and args.random_layers < 1:
        raise ConfigError(f"--random-layers must be at least 1; got {args.random_layers}")
    stt, llm = hub_config_name("stt", args.stt), hub_config_name("llm", args.llm)
    audio = load_audio(args.input)
    config = config_from_flags(args)
    print(f"WARNING: {WARNING}", file=sys.stderr, flush=True)
    overrides = native_overrides(stt, llm, args.random_layers, _root(args))
    stacks = {"bundled": config, "random": config.with_overrides(overrides)}
    registry = ModelRegistry()  # VAD and TTS are loaded once for both
    engines = {}
    runs: dict[str, list[dict]] = {label: [] for label in stacks}
    try:
        for label, cfg in stacks.items():
            print(f"loading the {label} stack...", file=sys.stderr, flush=True)
            engines[label] = load_engine(cfg, registry, _progress)
        for run in range(args.runs):
            for label, engine in engines.items():  # interleaved: the same load for both
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
    if medians["bundled"] is None or medians["random"] is None:
        raise ParleyError("no turn with a reply heard in one of the stacks: no chain to report")
    parts = chain(medians["bundled"], medians["random"])
    if args.json:
        json.dump({"input": args.input, "stt": args.stt, "llm": args.llm, "tts": "piper joe (bundled)",
                   "random_layers": args.random_layers, "runs": args.runs, "chain": parts,
                   "turns": runs}, sys.stdout, indent=1)
        print()
    else:
        print(format_budget(list(runs.items())))
        print()
        print(f"random stack: {args.stt} (faster-whisper int8) + {args.llm} (onnx-genai int4) "
              "+ Piper joe medium (bundled)")
        print(format_chain(parts))
    return 0


def _root(args: argparse.Namespace):
    from pathlib import Path

    return Path(args.root).expanduser() if args.root else None


def _progress(stage: str, fraction: float | None, text: str) -> None:
    print(f"  [{stage}] {text}", file=sys.stderr, flush=True)
