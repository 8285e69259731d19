"""``parley-cli bench soak``: many turns through one long-running pipeline, watching for leaks.

One engine is loaded once, and one pipeline unit runs for the whole soak, fed from
recorded audio (by default the bundled ``jfk.flac`` and ``one_two_three_44k.wav``, taking
turns): each recording, then enough silence to end the turn, as fast as the pipeline reads
it (not at real time), and the next recording only once the previous turn was answered
(or ``--turn-timeout`` passed). Replies go to a sink that counts and discards them.

After every turn the process's RSS, thread count and open file descriptors are sampled;
a sampler thread reads ``Engine.snapshot()`` ten times a second for the stages' queue
depths. The report: those figures at a few turns and at the end, the RSS growth from turn
50 (or the first turn, for shorter soaks) to the end, the ranges of threads and open files
after the first turn, the deepest queue per stage, how many turns were answered (a
transcript, a reply, and reply audio played), and the time per turn. Exit status 1 when a
turn was not answered; 2 for bad arguments.

The soak's own settings (``SOAK_DEFAULTS``: short replies; no barge-in and no speculative
turns, see there) apply unless the engine flags say otherwise.

``--server`` soaks through a ``parley-cli serve`` process instead, with several clients,
barge-ins and disconnects (``engine.bench.server_soak``).

``engine.cli`` dispatches ``bench soak`` here before its own parser runs and hands over
``add_config_flags`` (this module never imports the command line back). It also runs
alone: ``python -m engine.bench.soak --turns 500`` (engine settings: ``--config FILE``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSink, AudioSource
from engine.config import EngineConfig, config_from_flags
from engine.errors import ConfigError, run_command
from engine.pipeline.control import CancelReason
from engine.pipeline.events import EngineError, Event, TurnCancelled, TurnFinished, UserSpeaking
from engine.bench.sampler import PeriodicSampler
from engine.runtime.stats import percentile

PROG = "parley-cli bench soak"
AUDIO_DIR = Path(__file__).resolve().parents[2] / "resources" / "audio"
DEFAULT_INPUTS = ("jfk.flac", "one_two_three_44k.wav")
# Short replies; no barge-in (unpaced input would interrupt every reply); no speculation
# (unpaced, every pause in jfk.flac would start a speculative turn that is redone, which
# doubles the STT work of a soak meant to find leaks; `--turns-speculative true` soaks it).
SOAK_DEFAULTS = {"llm.max_new_tokens": 24, "turns.barge_in": "off", "turns.speculative": "false"}
BASELINE_TURN = 50  # RSS growth is measured from this turn (the models and caches warm)
RSS_GROWTH_LIMIT = 0.05
SAMPLE_HZ = 10.0
MIB = 2**20


def _progress(text: str) -> None:
    print(f"[bench soak] {text}", file=sys.stderr, flush=True)


# -- the input and the output ----------------------------------------------------------

class SoakSource(AudioSource):
    """An AudioSource: recordings in turn, each followed by ``silence_s`` of silence,
    unpaced. Recording ``k`` starts only after ``release(k)``; ``delivered(k)`` is set once
    its last block (silence included) was read. Finished after the last one."""

    sample_rate = PIPELINE_RATE

    def __init__(self, recordings: list[np.ndarray], turns: int, silence_s: float,
                 block_samples: int = 512) -> None:
        self._recordings = recordings
        self._turns = turns
        self._silence = np.zeros(round(silence_s * PIPELINE_RATE), np.float32)
        self._block = block_samples
        self._lock = threading.Lock()
        self._released = 0  # recordings the driver allowed so far
        self._started = 0  # recordings begun
        self._audio: np.ndarray | None = None
        self._pos = 0
        self._wake = threading.Event()
        self._closed = False
        self._delivered: list[threading.Event] = [threading.Event() for _ in range(turns)]

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def release(self, k: int) -> None:
        """Let recording ``k`` (0-based) be read."""
        with self._lock:
            self._released = max(self._released, k + 1)
        self._wake.set()

    def delivered(self, k: int) -> threading.Event:
        return self._delivered[k]

    def read(self, timeout: float) -> AudioBlock | None:
        if self._closed:
            return None
        if self._audio is None:
            if self._started >= self._turns:
                # All given: wait like a silent microphone. Returning at once would make
                # the source stage spin, and its GIL share slowed the last turn's LLM 30x.
                self._wake.clear()
                if not self._closed:
                    self._wake.wait(timeout)
                return None
            with self._lock:
                ready = self._started < self._released
                if not ready:
                    self._wake.clear()
            if not ready:
                self._wake.wait(timeout)
                return None
            recording = self._recordings[self._started % len(self._recordings)]
            self._audio = np.concatenate([recording, self._silence])
            self._pos = 0
            self._started += 1
        block = self._audio[self._pos:self._pos + self._block]
        self._pos += self._block
        if self._pos >= self._audio.size:
            self._audio = None
            self._delivered[self._started - 1].set()
        return AudioBlock(np.array(block, dtype=np.float32), time.perf_counter())

    @property
    def finished(self) -> bool:
        """Only once closed: the pipeline (and its thread count) stays as it is to the end."""
        return self._closed


class DiscardSink(AudioSink):
    """An AudioSink that counts reply audio and throws it away (a soak must not keep it)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.chunks = 0

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        self.seconds += audio.size / sample_rate
        self.chunks += 1

    def flush(self) -> int:
        return 0

    def wait_idle(self, timeout: float) -> bool:
        return True

    @property
    def is_playing(self) -> bool:
        return False

    def first_heard(self, turn_id: int) -> float | None:
        return None


# -- measuring -------------------------------------------------------------------------

@dataclass
class TurnSample:
    """The process after one soak turn."""

    turn: int  # 1-based
    t: float  # seconds since the soak started
    seconds: float  # this turn: release to answered (or timeout)
    answered: bool
    rss: int
    threads: int
    fds: int
    turn_ids: list[int] = field(default_factory=list)  # the pipeline's turns it made


def process_figures() -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors or handles) of this process."""
    import psutil

    proc = psutil.Process()
    if hasattr(proc, "num_fds"):
        fds = proc.num_fds()
    else:  # Windows (psutil's type stubs are those of the platform they are read on)
        fds = proc.num_handles()  # pyright: ignore[reportAttributeAccessIssue]
    return proc.memory_info().rss, proc.num_threads(), fds


class _QueueSampler(PeriodicSampler):
    """A thread reading the engine's snapshot at ``SAMPLE_HZ``: the deepest queue per stage."""

    def __init__(self, engine) -> None:
        super().__init__(1.0 / SAMPLE_HZ, "bench-soak-sampler")
        self.engine = engine
        self.max_depth: dict[str, tuple[int, int]] = {}
        self.samples = 0

    def sample(self) -> None:
        for stage in self.engine.snapshot().stages:
            old = self.max_depth.get(stage.name, (0, stage.queue_capacity))
            if stage.queue_depth > old[0] or stage.name not in self.max_depth:
                self.max_depth[stage.name] = (max(old[0], stage.queue_depth), stage.queue_capacity)
        self.samples += 1


class _TurnWatch:
    """Engine events: the turns started since a mark, and how each ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._started: dict[int, int] = {}  # turn id -> sequence number of its start
        self.ended: dict[int, str] = {}  # turn id -> "finished" or a cancel reason
        self.errors: list[str] = []
        self.changed = threading.Event()

    def __call__(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, UserSpeaking) and event.started and event.turn_id not in self._started:
                self._started[event.turn_id] = self._seq
                self._seq += 1
            elif isinstance(event, TurnFinished):
                self.ended[event.record.turn_id] = "finished"
            elif isinstance(event, TurnCancelled) and event.reason != CancelReason.REOPENED:
                self.ended[event.turn_id] = event.reason
            elif isinstance(event, EngineError):
                self.errors.append(f"{event.stage}: {event.message}")
        self.changed.set()

    def mark(self) -> int:
        with self._lock:
            return self._seq

    def since(self, mark: int) -> list[int]:
        with self._lock:
            return [t for t, seq in self._started.items() if seq >= mark]

    def all_ended(self, turn_ids: list[int]) -> bool:
        with self._lock:
            return bool(turn_ids) and all(t in self.ended for t in turn_ids)

    def forget(self, turn_ids: list[int]) -> None:
        """Keep the record small over a long soak."""
        with self._lock:
            for t in turn_ids:
                self.ended.pop(t, None)
                self._started.pop(t, None)


def _answered(engine, unit: int, turn_ids: list[int], watch: _TurnWatch) -> bool:
    from engine.measures import Mark

    for turn_id in turn_ids:
        if watch.ended.get(turn_id) != "finished":
            return False
        record = engine.metrics.turn(unit, turn_id)
        if record is None or not record.transcript or not record.reply \
                or Mark.AUDIO_OUT_FIRST not in record.marks:
            return False
    return True


def run_soak(engine, recordings: list[np.ndarray], turns: int, turn_timeout: float,
             on_turn: Callable[[TurnSample], None] | None = None) -> dict:
    """Drive ``turns`` recordings through one pipeline unit of a loaded ``engine``; return
    the report (see ``format_report`` and the module docstring)."""
    from engine.recording import trailing_silence_s

    silence = trailing_silence_s(engine.config) + 0.3
    source, sink = SoakSource(recordings, turns, silence), DiscardSink()
    watch = _TurnWatch()
    unsubscribe = engine.subscribe(watch)
    samples: list[TurnSample] = []
    t0 = time.perf_counter()
    engine.start([source], [sink])
    unit = engine.units[0].unit
    stuck: list[str] = []
    try:
        with _QueueSampler(engine) as sampler:
            for k in range(turns):
                # The previous turn's reply was counted; its mark is where this one's start.
                mark = watch.mark()
                t_start = time.perf_counter()
                source.release(k)
                deadline = t_start + turn_timeout
                ids: list[int] = []
                while time.perf_counter() < deadline:
                    watch.changed.wait(0.05)
                    watch.changed.clear()
                    ids = watch.since(mark)
                    if source.delivered(k).is_set() and watch.all_ended(ids):
                        break
                answered = (source.delivered(k).is_set() and watch.all_ended(ids)
                            and _answered(engine, unit, ids, watch))
                rss, threads, fds = process_figures()
                sample = TurnSample(k + 1, time.perf_counter() - t0, time.perf_counter() - t_start,
                                    answered, rss, threads, fds, list(ids))
                samples.append(sample)
                watch.forget(ids)
                if on_turn is not None:
                    on_turn(sample)
            max_depth = dict(sampler.max_depth)
            snapshots = sampler.samples
    finally:
        stuck = engine.stop()
        unsubscribe()
    return _report(samples, max_depth, snapshots, watch.errors, stuck, time.perf_counter() - t0,
                   sink)


def _report(samples: list[TurnSample], max_depth: dict[str, tuple[int, int]], snapshots: int,
            errors: list[str], stuck: list[str], wall_s: float, sink: DiscardSink) -> dict:
    n = len(samples)
    base = samples[min(BASELINE_TURN, n) - 1] if n else None
    end = samples[-1] if n else None
    after_first = samples[1:] or samples
    growth = (end.rss - base.rss) / base.rss if base and end and base.rss else None
    seconds = [s.seconds for s in samples]
    return {
        "turns": n,
        "answered": sum(s.answered for s in samples),
        "unanswered": [s.turn for s in samples if not s.answered],
        "split_recordings": [s.turn for s in samples if len(s.turn_ids) > 1],
        "wall_s": round(wall_s, 1),
        "turn_s": {"p50": _r(percentile(seconds, 50)), "p95": _r(percentile(seconds, 95)),
                   "max": _r(max(seconds) if seconds else None)},
        "rss_mib": {"baseline_turn": base.turn if base else None,
                    "baseline": _mib(base.rss) if base else None, "end": _mib(end.rss) if end else None,
                    "growth": None if growth is None else round(growth, 4),
                    "limit": RSS_GROWTH_LIMIT,
                    "within_limit": None if growth is None else growth <= RSS_GROWTH_LIMIT},
        "threads": _range([s.threads for s in after_first]),
        "fds": _range([s.fds for s in after_first]),
        "max_queue_depth": {name: {"depth": d, "capacity": c} for name, (d, c) in max_depth.items()},
        "snapshots": snapshots,
        "reply_audio_s": round(sink.seconds, 1),
        "errors": errors[:50],
        "errors_total": len(errors),
        "threads_not_stopped": stuck,
        "samples": [{"turn": s.turn, "t": round(s.t, 2), "seconds": round(s.seconds, 3),
                     "answered": s.answered, "rss_mib": _mib(s.rss), "threads": s.threads,
                     "fds": s.fds} for s in samples],
    }


def _range(values: list[int]) -> dict:
    return {"min": min(values), "max": max(values), "flat": min(values) == max(values)} if values \
        else {"min": None, "max": None, "flat": None}


def _mib(n: int) -> float:
    return round(n / MIB, 1)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# -- the report ------------------------------------------------------------------------

def _rows(n: int) -> list[int]:
    """The turns the table shows: 1, 10, 50, every tenth of the soak, the last."""
    rows = {1, 10, BASELINE_TURN, n} | {max(1, round(n * i / 10)) for i in range(1, 11)}
    return sorted(r for r in rows if 1 <= r <= n)


def format_report(doc: dict) -> str:
    samples = {s["turn"]: s for s in doc["samples"]}
    lines = [f"{'turn':>6} {'elapsed':>9} {'RSS MiB':>9} {'threads':>8} {'open fds':>9} {'turn s':>7}"]
    for turn in _rows(doc["turns"]):
        s = samples[turn]
        lines.append(f"{turn:>6} {s['t']:>8.0f}s {s['rss_mib']:>9.1f} {s['threads']:>8} "
                     f"{s['fds']:>9} {s['seconds']:>7.2f}{'' if s['answered'] else '  NOT ANSWERED'}")
    rss, threads, fds = doc["rss_mib"], doc["threads"], doc["fds"]
    lines.append("")
    lines.append(f"turns answered: {doc['answered']} of {doc['turns']}"
                 + (f" (not answered: {', '.join(map(str, doc['unanswered'][:20]))})"
                    if doc["unanswered"] else ""))
    if rss["growth"] is not None:
        verdict = "within" if rss["within_limit"] else "OVER"
        lines.append(f"RSS: {rss['baseline']:.1f} MiB at turn {rss['baseline_turn']}, "
                     f"{rss['end']:.1f} MiB at the end ({rss['growth'] * 100:+.2f} %, {verdict} the "
                     f"{rss['limit'] * 100:.0f} % limit)")
    lines.append(f"threads after turn 1: {threads['min']}..{threads['max']}"
                 f"{' (flat)' if threads['flat'] else ''}; open fds: {fds['min']}..{fds['max']}"
                 f"{' (flat)' if fds['flat'] else ''}")
    depths = ", ".join(f"{name} {d['depth']}/{d['capacity']}"
                       for name, d in doc["max_queue_depth"].items())
    lines.append(f"deepest queues ({doc['snapshots']} snapshots): {depths}")
    turn_s = doc["turn_s"]
    lines.append(f"wall {doc['wall_s']:.0f} s; per turn p50 {turn_s['p50']:.2f} s, p95 "
                 f"{turn_s['p95']:.2f} s, max {turn_s['max']:.2f} s")
    if doc["errors_total"]:
        lines.append(f"engine errors: {doc['errors_total']} (first: {doc['errors'][0]})")
    if doc["threads_not_stopped"]:
        lines.append(f"threads that did not stop: {', '.join(doc['threads_not_stopped'])}")
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------

def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Soak the pipeline: many turns of recorded audio through one "
        "long-running pipeline unit, sampling RSS, threads, open files and queue depths.")
    group = parser.add_argument_group("benchmark")
    group.add_argument("--turns", type=int, default=500, metavar="N",
                       help="recordings to answer, one turn each (default 500)")
    group.add_argument("--input", action="append", default=[], metavar="AUDIO",
                       help="a recording to use (repeat for several; they take turns). "
                            f"Default: {' and '.join(DEFAULT_INPUTS)} from resources/audio")
    group.add_argument("--turn-timeout", type=float, default=120.0, metavar="S",
                       help="seconds a turn may take before it counts as not answered (default 120)")
    group.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    group.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    group.add_argument("--server", action="store_true",
                       help="soak through a parley-cli serve process instead: several clients, "
                            "barge-ins, disconnects (see `bench soak --server --help`)")
    if add_config_flags is not None:
        add_config_flags(parser)
    else:
        parser.add_argument("--config", metavar="FILE", help="TOML engine config")
    return parser


def soak_config(args: argparse.Namespace) -> EngineConfig:
    """The engine config: the file, the soak's defaults, then the flags given."""
    return config_from_flags(args, {k: str(v) for k, v in SOAK_DEFAULTS.items()})


def check_args(args: argparse.Namespace) -> None:
    if args.turns < 1:
        raise ConfigError(f"--turns must be at least 1; got {args.turns}")
    if not args.turn_timeout > 0:
        raise ConfigError(f"--turn-timeout must be > 0; got {args.turn_timeout}")


def load_recordings(paths: list[str]) -> list[np.ndarray]:
    from engine.audio.decode import load_audio

    chosen = paths or [str(AUDIO_DIR / name) for name in DEFAULT_INPUTS]
    return [load_audio(p) for p in chosen]


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
         ) -> int:
    """``parley-cli bench soak ARGS``; returns the exit status (2: bad arguments, 1: a turn
    was not answered, 0: every turn answered). With ``--server``: ``engine.bench.server_soak``."""
    if "--server" in argv:
        from engine.bench.server_soak import main as server_soak

        return server_soak(argv, add_config_flags)
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def soak() -> int:
        check_args(args)
        config = soak_config(args)
        recordings = load_recordings(args.input)
        from engine.recording import load_engine

        started = time.perf_counter()
        engine = load_engine(config, progress=None)
        _progress(f"models ready in {time.perf_counter() - started:.1f} s: "
                  + "; ".join(p.describe() for p in engine.placements.values()))

        def show(sample: TurnSample) -> None:
            if sample.turn in _rows(args.turns) or not sample.answered:
                _progress(f"turn {sample.turn}/{args.turns}: {sample.seconds:.2f} s, RSS "
                          f"{sample.rss / MIB:.1f} MiB, {sample.threads} threads, {sample.fds} fds"
                          f"{'' if sample.answered else ', NOT ANSWERED'}")

        try:
            doc = run_soak(engine, recordings, args.turns, args.turn_timeout, show)
        finally:
            engine.close()
        doc["settings"] = {k: str(v) for k, v in SOAK_DEFAULTS.items()}
        doc["models"] = [p.describe() for p in engine.placements.values()]
        print(json.dumps(doc, indent=2, ensure_ascii=False) if args.json else format_report(doc))
        return 0 if not doc["unanswered"] and doc["turns"] == args.turns else 1

    return run_command(soak)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
