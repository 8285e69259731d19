"""``parley-cli bench turn-taking``: how each end-of-turn mode takes turns on real speech.

Every recording of the reference (``resources/audio/turns.json``: true ends of turns and
pauses inside and between sentences, see ``engine.bench.turn_scoring``) is streamed at
real time through the real engine (``engine.recording.run_recording``, as ``parley-cli
bench INPUT`` does), once per mode, the modes taking turns recording by recording and
round by round. Per mode: the commits that were right (and how many the learned decision
made early), the turns cut inside a sentence (early or by a long pause), the splits
between sentences, the missed ends, and the commit wait after the end of speech on the
finished turns. The default modes are ``turns.end_of_turn`` = silence and learned;
``--compare``/``--variant`` measure other settings the same way. ``--set held-out`` keeps
to the recordings the thresholds were not tuned on (the reference's ``set`` field).

``--signals`` also lists, per mode and recording place, what the learned decision saw at
each speculative revision (the audio model's and the text signal's probabilities) and what
became of it: the data a threshold is chosen from.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.bench.turn_scoring import Commit, Reference, Score, load_reference, nearest, score_commits
from engine.bench.variants import bench_variants
from engine.config import EngineConfig, config_from_flags
from engine.errors import ConfigError, ParleyError, run_command
from engine.measures import Figure, Mark
from engine.pipeline.metrics import TurnRecord
from engine.bench.report_flags import add_report_flags

if TYPE_CHECKING:
    from engine.engine import Engine

PROG = "parley-cli bench turn-taking"
AUDIO_DIR = Path(__file__).resolve().parents[2] / "resources" / "audio"
REFERENCE = AUDIO_DIR / "turns.json"
DEFAULT_COMPARE = "turns.end_of_turn=silence,learned"
#: ``--set`` choices and the reference's ``set`` values they select (None: every recording).
#: ``tuned``: the recordings the end-of-turn thresholds were chosen on; ``held_out``: the
#: ones added afterwards to judge those thresholds on ends they were not tuned on.
SETS = {"all": None, "tuned": "tuned", "held-out": "held_out"}


def recording_sets(path: Path) -> dict[str, str]:
    """Each recording's ``set`` in the reference at ``path`` (``tuned`` where it names
    none); ConfigError naming the recording and the value where it is not one of ``SETS``."""
    try:
        recordings = json.loads(path.read_text(encoding="utf-8"))["recordings"]
        entries = {name: entry.get("set", "tuned") for name, entry in recordings.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"cannot read the turn-taking reference {path}: {exc}") from None
    allowed = [value for value in SETS.values() if value is not None]
    for name, value in entries.items():
        if value not in allowed:
            raise ConfigError(f"{path}: recordings.{name}.set: {value!r}; allowed: "
                              f"{', '.join(allowed)}")
    return entries


class RevisionLog(logging.Handler):
    """Collects the end-of-turn records of ``parley.end_of_turn`` (one per speculative
    revision, ``VadStage._log_revision``) and passes every other record on as before."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict] = []
        self._logger = logging.getLogger("parley.end_of_turn")
        self._saved = (self._logger.level, self._logger.propagate)

    def __enter__(self) -> RevisionLog:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        self._logger.propagate = False  # the debug records stay here; others are passed on
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._saved[0])
        self._logger.propagate = self._saved[1]

    def emit(self, record: logging.LogRecord) -> None:
        data = getattr(record, "end_of_turn", None)
        if isinstance(data, dict):
            self.records.append(dict(data))
        elif record.levelno >= logging.INFO and self._logger.parent is not None:
            self._logger.parent.handle(record)

    def take(self) -> list[dict]:
        records, self.records = self.records, []
        return records


class OtherCpu:
    """The share of the machine's CPU time that other processes used since creation
    (Linux ``/proc/stat`` minus this process's own; None where it cannot be read)."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        ticks = [float(x) / os.sysconf("SC_CLK_TCK") for x in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)
        own = os.times()
        return sum(ticks), sum(ticks) - idle, own.user + own.system

    def share(self) -> float | None:
        end = self._read()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        total, busy, own = (e - s for e, s in zip(end, self._start))
        return max(0.0, busy - own) / total


def commits_of(turns: list[TurnRecord], t0: float) -> list[Commit]:
    """The committed turns of one run, timed from the recording's first sample."""
    return [Commit(t.marks[Mark.SPEECH_END] - t0, t.marks[Mark.COMMITTED] - t0,
                   t.figures.get(Figure.EOT_EARLY) == 1.0)
            for t in turns if Mark.COMMITTED in t.marks and Mark.SPEECH_END in t.marks]


#: What the LLM was asked per spoken turn (``LlmStage``: every request of the turn, its
#: dropped speculative revisions' included), as the mode's totals are keyed.
LLM_COSTS = {"requests": Figure.LLM_REQUESTS, "prompt_tokens": Figure.LLM_TURN_PROMPT_TOKENS,
             "completion_tokens": Figure.LLM_TURN_COMPLETION_TOKENS}


def llm_costs(turns: list[TurnRecord]) -> dict[str, float]:
    """The sums of ``LLM_COSTS`` over the turns that asked the LLM, and their count."""
    asked = [t for t in turns if Figure.LLM_REQUESTS in t.figures]
    return {"turns": len(asked), **{key: sum(t.figures.get(figure, 0.0) for t in asked)
                                    for key, figure in LLM_COSTS.items()}}


def per_turn(costs: dict[str, float]) -> dict[str, float | None]:
    """``llm_costs`` totals as means per turn (None with no turn)."""
    n = costs["turns"]
    return {key: (round(costs[key] / n, 2) if n else None) for key in LLM_COSTS}


def signals_of(reference: Reference, records: list[dict], t0: float) -> list[dict]:
    """Each speculative revision's signals, with the reference place it stopped at."""
    rows = []
    for record in records:
        end = record["t_speech_end"]
        place = nearest(reference, end - t0)
        # When each signal was posted and the revision decided, after the end of speech.
        after = {f"{key}_after_s": None if record.get(f"{key}_at") is None
                 else round(record[f"{key}_at"] - end, 3) for key in ("audio", "text", "decided")}
        rows.append({"recording": reference.name, "at_s": round(end - t0, 2),
                     "kind": place.kind if place else "?", "words": place.text if place else "",
                     "audio": record["audio"], "text": record["text"], **after,
                     "outcome": record["outcome"]})
    return rows


def measure(engines: list[tuple[str, Engine]], references: dict[str, Reference], runs: int,
            say: Callable[[str], None]) -> dict:
    """Every recording through every engine ``runs`` times, interleaved; the scores."""
    from engine.audio.decode import load_audio
    from engine.recording import run_recording

    audio = {name: load_audio(str(AUDIO_DIR / name)) for name in references}
    scores = {label: Score() for label, _ in engines}
    per_recording = {label: {name: Score() for name in references} for label, _ in engines}
    signals: dict[str, list[dict]] = {label: [] for label, _ in engines}
    costs = {label: dict.fromkeys(("turns", *LLM_COSTS), 0.0) for label, _ in engines}
    with RevisionLog() as revisions:
        for run in range(runs):
            for name, reference in references.items():
                for label, engine in engines:
                    opened: list[float] = []
                    turns, errors = run_recording(engine, audio[name], None, True,
                                                  on_open=opened.append)
                    if errors:
                        raise ParleyError(f"{label}, {name}: {'; '.join(errors)}")
                    t0 = opened[0]
                    score = score_commits(reference, commits_of(turns, t0))
                    scores[label].add(score)
                    per_recording[label][name].add(score)
                    signals[label] += signals_of(reference, revisions.take(), t0)
                    for key, value in llm_costs(turns).items():
                        costs[label][key] += value
                    wait = f"{score.mean_wait_s:.2f} s" if score.waits else "-"
                    say(f"run {run + 1}/{runs} {label} {name}: {score.right}/{score.ends} ends "
                        f"({score.right_early} early), {score.cut} cut inside a sentence, "
                        f"mean wait {wait}")
    return {"runs": runs,
            "modes": [{"mode": label, **scores[label].as_dict(),
                       "recordings": {n: s.as_dict() for n, s in per_recording[label].items()},
                       "signals": signals[label], "llm_per_turn": per_turn(costs[label])}
                      for label, _ in engines]}


def format_table(doc: dict, show_signals: bool = False) -> str:
    """The per-mode table (and per recording below it), as the README quotes it."""
    def secs(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    head = (f"{'mode':<34} {'ends':>5} {'right':>6} {'early ok':>9} {'early cut':>10} "
            f"{'cut':>4} {'split':>6} {'missed':>7} {'wait mean':>10} {'p50':>5} {'max':>5}")
    lines = [head, "-" * len(head)]
    if doc.get("set", "all") != "all":
        lines.insert(0, f"recordings: --set {doc['set']} ({len(doc['modes'][0]['recordings'])})")
    for mode in doc["modes"]:
        lines.append(f"{mode['mode']:<34} {mode['ends']:>5} {mode['right']:>6} "
                     f"{mode['right_early']:>9} {mode['cut_early']:>10} "
                     f"{mode['cut_inside_sentence']:>4} {mode['split_between_sentences']:>6} "
                     f"{mode['missed_ends']:>7} {secs(mode['mean_wait_s']):>10} "
                     f"{secs(mode['median_wait_s']):>5} {secs(mode['max_wait_s']):>5}")
    lines.append("")
    lines.append("LLM per spoken turn (every request, dropped speculative ones included; "
                 "tokens as the model reported them):")
    for mode in doc["modes"]:
        cost = mode.get("llm_per_turn") or {}
        cells = ", ".join(f"{key.replace('_', ' ')} {'-' if cost.get(key) is None else cost[key]}"
                          for key in LLM_COSTS)
        lines.append(f"  {mode['mode']}: {cells}")
    if doc.get("other_processes_cpu") is not None:
        lines.append(f"other processes used {doc['other_processes_cpu']:.0%} of the cores "
                     "meanwhile (timings on a busy machine are slower)")
    lines.append("")
    lines.append("per recording (right/ends, cut inside a sentence, mean wait s):")
    for mode in doc["modes"]:
        cells = [f"{name.rsplit('.', 1)[0]} {r['right']}/{r['ends']} cut {r['cut_inside_sentence']} "
                 f"wait {secs(r['mean_wait_s'])}" for name, r in mode["recordings"].items()]
        lines.append(f"  {mode['mode']}: " + "; ".join(cells))
        lines += [f"    cut: {cut}" for cut in mode["cuts"]]
    if show_signals:
        for mode in doc["modes"]:
            lines.append(f"\nsignals, {mode['mode']} (kind, at_s, audio p, text p, each "
                         "posted and the revision decided s after the end of speech, outcome):")
            for row in mode["signals"]:
                audio = "-" if row["audio"] is None else f"{row['audio']:.3f}"
                text = "-" if row["text"] is None else f"{row['text']:.3f}"
                times = " ".join("    -" if row.get(key) is None else f"{row[key]:5.2f}"
                                 for key in ("audio_after_s", "text_after_s", "decided_after_s"))
                lines.append(f"  {row['recording']:<30} {row['kind']:<8} {row['at_s']:>6.2f} "
                             f"{audio:>6} {text:>6} {times}  {row['outcome']}  "
                             f"({row['words'][-40:]})")
    return "\n".join(lines)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="end-of-turn modes on the reference recordings "
        "(resources/audio/turns.json), streamed at real time through the engine")
    parser.add_argument("recordings", nargs="*", metavar="NAME",
                        help="file names of the reference to stream (default: all of them)")
    parser.add_argument("--runs", type=int, default=1, help="rounds over every recording (default 1)")
    parser.add_argument("--set", choices=list(SETS), default="all", dest="recording_set",
                        help="which recordings of the reference: those the thresholds were "
                        "tuned on, the held-out ones, or all (default all)")
    parser.add_argument("--reference", metavar="FILE", default=str(REFERENCE),
                        help="the reference (default: resources/audio/turns.json)")
    parser.add_argument("--compare", metavar="KEY=A,B", action="append", default=[],
                        help=f"settings measured side by side (default: --compare {DEFAULT_COMPARE})")
    parser.add_argument("--variant", metavar="KEY=V[,KEY=V]", action="append", default=[],
                        help="a named set of settings measured beside the others")
    parser.add_argument("--signals", action="store_true",
                        help="also list each speculative revision's end-of-turn signals")
    add_report_flags(parser, add_config_flags)
    return parser


def _config(args: argparse.Namespace) -> EngineConfig:
    return config_from_flags(args)


def _say(text: str) -> None:
    print(f"[{PROG}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench turn-taking ARGS``; the exit status (0 measured, 2 an error; bad
    arguments, settings and references are found before anything loads)."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def run() -> int:
        if args.runs < 1:
            raise ConfigError(f"--runs must be at least 1; got {args.runs}")
        references = load_reference(Path(args.reference))
        unknown = [name for name in args.recordings if name not in references]
        if unknown:
            raise ConfigError(f"not in {args.reference}: {', '.join(unknown)}; "
                              f"known: {', '.join(references)}")
        if args.recordings:
            references = {name: references[name] for name in args.recordings}
        wanted = SETS[args.recording_set]
        if wanted is not None:
            sets = recording_sets(Path(args.reference))
            references = {name: ref for name, ref in references.items() if sets[name] == wanted}
            if not references:
                raise ConfigError(f"--set {args.recording_set}: no recording of "
                                  f"{args.reference} is in that set")
        missing = [name for name in references if not (AUDIO_DIR / name).is_file()]
        if missing:
            raise ConfigError(f"recordings of the reference missing from {AUDIO_DIR}: "
                              f"{', '.join(missing)}")
        compare = args.compare or ([] if args.variant else [DEFAULT_COMPARE])
        variants = bench_variants(_config(args), compare, args.variant)
        from engine.recording import load_engine
        from engine.models.model_registry import ModelRegistry

        registry = ModelRegistry()  # the modes differ at run time only: one set of models
        engines: list[tuple[str, Engine]] = []
        try:
            started = time.perf_counter()
            for label, config in variants:
                engine = load_engine(config, registry)
                engines.append((label, engine))
                for note in engine.notes:
                    if note.startswith("end of turn"):
                        _say(f"{label}: {note}")
            _say(f"models ready in {time.perf_counter() - started:.1f} s")
            others = OtherCpu()
            doc = measure(engines, references, args.runs, _say)
            # Timings on a shared machine: whether other processes competed for the cores.
            doc["other_processes_cpu"] = others.share()
        finally:
            for _label, engine in engines:
                engine.close()
        doc["reference"] = args.reference
        doc["set"] = args.recording_set
        doc["config"] = {label: {k: (v.value if hasattr(v, "value") else v)
                                 for k, v in cfg.flat().items() if k.startswith(("turns.", "vad."))}
                         for label, cfg in variants}
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json
              else format_table(doc, args.signals))
        return 0

    return run_command(run, PROG)
