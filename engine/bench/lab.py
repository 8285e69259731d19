"""``parley-cli bench --layouts SPEC INPUT...``: the same inputs through several layouts.

Answers "same device or separate devices?": each layout (see ``engine.bench.layouts``)
places the stages its own way; every layout is resolved before any model loads, then each
loads once (layouts share one ModelRegistry, so a model two layouts place alike loads
once; loading time is reported apart), runs one warm-up, and the measured runs interleave
(A B C A B C ...) over every input, ``--runs`` rounds.

Per layout: the bench figures (``engine.report.bench_summary``), the wait on the MLX lock
and on each model's own lock over its runs, the peak memory per device sampled during its
runs (memory is the process's: models of every layout stay loaded), and its voice-to-voice
p50 against the first layout's, with the spread of the per-round ratios.
"""

from __future__ import annotations

import argparse
import logging
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.bench.layouts import ResolvedLayout, parse_layouts, resolve_layouts
from engine.config import EngineConfig, config_from_flags, require_one_unit
from engine.bench.sampler import PeriodicSampler
from engine.errors import AudioInputError, ConfigError, NoSpeechError, ParleyError, run_command
from engine.measures import Figure
from engine.pipeline.critical_path import median_turn
from engine.report import bench_summary, format_budget, format_value, turn_dict
from engine.runtime.stats import percentile

if TYPE_CHECKING:
    from engine.engine import Engine

TABLE = (Figure.VOICE_TO_VOICE_S, Figure.STT_COMPUTE_S, Figure.LLM_FIRST_CHUNK_COMPUTE_S,
         Figure.TTS_FIRST_COMPUTE_S, Figure.LLM_TOKENS_PER_S, Figure.STT_RTF, Figure.TTS_RTF)


def build_parser(add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parley-cli bench --layouts",
        description="the same recordings through several device layouts, interleaved")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="recordings streamed at real time")
    parser.add_argument("--layouts", required=True, metavar="SPEC",
                        help="a TOML file, or layouts separated by ';', each STAGE=DEVICE[,...] "
                             "(all=X sets every stage), e.g. 'all=cpu;stt=mlx,llm=mlx'")
    parser.add_argument("--runs", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--plot", metavar="FILE.png", help="stacked stage latencies per layout")
    parser.add_argument("--weights", choices=("pretrained", "random"), default="pretrained",
                        help="random: Whisper large-v3-turbo and SmolLM2-360M built with random "
                             "weights (transformers backends; meaningless words, real timings)")
    parser.add_argument("--random-layers", type=int, metavar="N",
                        help="with --weights random: N layers per stack instead of the real count")
    if add_config_flags is not None:
        add_config_flags(parser)
    else:
        parser.add_argument("--config", metavar="FILE")
    return parser


def _config(args: argparse.Namespace) -> EngineConfig:
    return config_from_flags(args)


class MemorySampler(PeriodicSampler):
    """Samples ``sample_memory`` every ``interval`` s in a thread; keeps, per layout, the
    highest reading per device while that layout was the one running."""

    def __init__(self, devices: set[str], interval: float = 0.2) -> None:
        super().__init__(interval, "bench-memory")
        self.devices = devices
        self.current: str | None = None
        self.peaks: dict[str, dict[str, dict[str, int]]] = {}

    def sample(self) -> None:
        from engine.runtime.memory import sample_memory

        label = self.current
        if label is None:
            return
        for reading in sample_memory(self.devices):
            peak = self.peaks.setdefault(label, {}).setdefault(reading.device, {"used_bytes": 0})
            peak["used_bytes"] = max(peak["used_bytes"], reading.used_bytes)
            if "peak" in reading.extra:
                peak["peak_bytes"] = max(peak.get("peak_bytes", 0), reading.extra["peak"])


def _reset_peaks(devices: set[str]) -> None:
    """Restart the libraries' own peak counters (CUDA, MLX), so each run's peak is its own.
    Only libraries already imported are touched."""
    torch = sys.modules.get("torch")
    for device in devices:
        if device.startswith("cuda") and torch is not None and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats(int(device.partition(":")[2] or 0))
    mx = sys.modules.get("mlx.core")
    if "mlx" in devices and mx is not None and hasattr(mx, "reset_peak_memory"):
        mx.reset_peak_memory()


def _used(devices: set[str]) -> dict[str, int]:
    from engine.runtime.memory import sample_memory

    return {r.device: r.used_bytes for r in sample_memory(devices)}


def _lock_waits(engine: Engine) -> dict[str, float]:
    """Total wait so far on the MLX lock (if the engine uses MLX) and on each model's lock."""
    from engine.runtime.mlx_lock import get_mlx_lock

    waits: dict[str, float] = {}
    mlx_lock = get_mlx_lock() if engine.mlx_in_use else None
    if mlx_lock is not None:
        waits["mlx"] = mlx_lock.snapshot().wait_total
    for stage, model in engine.models.items():
        lock = model.lock
        if lock is not None and lock is not mlx_lock:  # an MLX model's lock is the MLX lock
            waits[f"{stage} model"] = lock.snapshot().wait_total
    return waits


def _v2v_p50(turns: list[dict]) -> float | None:
    values = [t["voice_to_voice_s"] for t in turns
              if t.get("voice_to_voice_s") is not None and not t.get("cancelled")]
    return percentile(values, 50) if values else None


def _ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 4) if value is not None and base else None


def check_request(args: argparse.Namespace) -> None:
    """Argument errors that need nothing loaded or resolved."""
    if not args.inputs:
        raise AudioInputError("bench --layouts: no INPUT recording given")
    if args.runs < 1:
        raise ConfigError(f"--runs must be at least 1; got {args.runs}")
    if args.random_layers is not None and (args.weights != "random" or args.random_layers < 1):
        raise ConfigError("--random-layers N needs --weights random and N of at least 1")
    if args.plot:
        from engine.bench.plot import require_matplotlib

        if not args.plot.lower().endswith(".png"):
            raise ConfigError(f"--plot {args.plot}: the plot is written as PNG; name a .png file")
        require_matplotlib()


def plan(args: argparse.Namespace, hub=None) -> tuple[list[ResolvedLayout], list]:
    """Everything that can fail before a model loads: layouts, inputs, placements."""
    from engine.audio.decode import load_audio

    check_request(args)
    config = _config(args)
    require_one_unit(config)
    layouts = parse_layouts(args.layouts)
    audios = [load_audio(path) for path in args.inputs]
    if args.weights == "random":
        from engine.bench.random_weights import random_overrides

        config = config.with_overrides(random_overrides(args.random_layers, build=False))
    resolved = resolve_layouts(config, layouts, hub=hub)
    for layout in resolved:
        require_one_unit(layout.config)
    if args.weights == "random":
        from engine.bench.random_weights import WARNING, random_overrides

        _say(f"WARNING: {WARNING}")
        random_overrides(args.random_layers)  # built once, then reused from the cache
    return resolved, audios


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class BenchCancelled(ParleyError):
    """``should_stop`` said stop: raised between loads or runs, after nothing half-done."""


def run_layouts(args: argparse.Namespace, resolved: list[ResolvedLayout], audios: list,
                should_stop: Callable[[], bool] | None = None) -> dict:
    """Load every layout, warm each up, run the interleaved rounds; the JSON document.

    ``should_stop()`` (optional) is asked before each load and each run; when it returns
    True, BenchCancelled is raised and every engine loaded so far is closed."""
    from engine.engine import Engine
    from engine.models.model_registry import ModelRegistry
    from engine.recording import run_recording

    registry = ModelRegistry()
    engines: list[Engine] = []
    load_s: list[float] = []
    load_bytes: list[dict[str, int]] = []
    loaded: list[int] = []  # models really loaded per layout (the rest were shared)
    devices = {str(p.device) for layout in resolved for p in layout.placements.values()}
    labels = [layout.label for layout in resolved]
    rounds: dict[str, list[list[dict]]] = {label: [] for label in labels}
    waits: dict[str, dict[str, float]] = {label: {} for label in labels}
    sampler = MemorySampler(devices)

    def check_stop() -> None:
        if should_stop is not None and should_stop():
            raise BenchCancelled("the benchmark was cancelled")

    def one_run(index: int, audio, what: str) -> list[dict]:
        check_stop()
        engine, label = engines[index], labels[index]
        before = _lock_waits(engine)
        _reset_peaks(devices)
        sampler.current = label
        turns, errors = run_recording(engine, audio, None, realtime=True)
        sampler.sample()
        sampler.current = None
        after = _lock_waits(engine)
        if errors:
            raise ParleyError(f"layout {label!r}, {what} failed: {'; '.join(errors)}")
        if not turns:
            raise NoSpeechError(f"layout {label!r}, {what}: no speech found, nothing to measure")
        for key, total in after.items():
            waits[label][key] = waits[label].get(key, 0.0) + total - before.get(key, 0.0)
        return [turn_dict(t) for t in turns]

    try:
        for layout in resolved:
            check_stop()
            _say(f"layout {layout.label}:")
            for placement in layout.placements.values():
                _say(f"  [{placement.stage}] {placement.describe()}")
            before, loads = _used(devices), registry.load_count()
            started = time.perf_counter()
            engine = Engine(layout.config, registry=registry)
            engines.append(engine)
            engine.load(None)
            load_s.append(time.perf_counter() - started)
            load_bytes.append({d: n - before.get(d, 0) for d, n in _used(devices).items()})
            loaded.append(registry.load_count() - loads)
            _say(f"  models ready in {load_s[-1]:.1f} s ({loaded[-1]} loaded, "
                 f"{len(engine.models) - loaded[-1]} shared with an earlier layout)")
        with sampler:
            for index, label in enumerate(labels):
                one_run(index, audios[0], "warm-up")
                _say(f"warm-up {label}: done")
            for run in range(args.runs):
                for which, audio in enumerate(audios):
                    for index, label in enumerate(labels):  # interleaved: fair to every layout
                        turns = one_run(index, audio, f"run {run + 1} of {args.inputs[which]}")
                        rounds[label].append(turns)
                        v2v = [t["voice_to_voice_s"] for t in turns if t["voice_to_voice_s"] is not None]
                        _say(f"run {run + 1}/{args.runs} {args.inputs[which]} {label}: "
                             + ", ".join(f"{v * 1000:.0f} ms" for v in v2v))
        placements = [engine.placement_dicts() for engine in engines]
    finally:
        for engine in engines:
            engine.close()
    return _document(args, resolved, placements, load_s, load_bytes, loaded, rounds, waits,
                     sampler.peaks)


def _document(args, resolved, placements, load_s, load_bytes, loaded, rounds, waits, peaks) -> dict:
    base_label = resolved[0].label
    base_rounds = rounds[base_label]
    base_all = _v2v_p50([t for run in base_rounds for t in run])
    rows = []
    for layout, where, seconds, grew, count in zip(resolved, placements, load_s, load_bytes, loaded):
        runs = rounds[layout.label]
        turns = [t for run in runs for t in run]
        per_round = [_ratio(_v2v_p50(mine), _v2v_p50(base)) for mine, base in zip(runs, base_rounds)]
        per_round = [r for r in per_round if r is not None]
        rows.append({
            "layout": layout.label, "settings": dict(layout.layout.overrides), "placements": where,
            "load_s": round(seconds, 3), "models_loaded": count,
            "load_memory_bytes": grew, "summary": bench_summary(turns),
            "budget": (median_turn(turns) or {}).get("critical_path"),
            "lock_wait_s": {k: round(v, 6) for k, v in waits[layout.label].items()},
            "memory_peak": peaks.get(layout.label, {}),
            "vs_first": {"ratio": _ratio(_v2v_p50(turns), base_all),
                         "min": min(per_round) if per_round else None,
                         "max": max(per_round) if per_round else None},
            "turns": runs})
    warning = None
    if args.weights == "random":
        from engine.bench.random_weights import WARNING as warning
    return {"inputs": list(args.inputs), "runs": args.runs, "baseline": base_label,
            "weights": args.weights, "warning": warning,
            "note": "memory is the whole process's: every layout's models stay loaded",
            "layouts": rows}


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def format_layouts(doc: dict) -> str:
    """The layouts side by side: p50 per figure, lock waits, memory, ratio to the first."""
    width = max(12, *(len(r["layout"]) for r in doc["layouts"])) + 2
    head = f"{'figure (p50)':30}" + "".join(f"{r['layout']:>{width}}" for r in doc["layouts"])
    lines = [head]

    def row(name: str, cells: list[str]) -> None:
        lines.append(f"{name:30}" + "".join(f"{c:>{width}}" for c in cells))

    rows = doc["layouts"]
    row("models load (new models)", [f"{r['load_s']:.1f} s ({r['models_loaded']})" for r in rows])
    for figure in TABLE:
        row(figure.label, [format_value(figure, r["summary"][figure.value]["p50"]) for r in rows])
    v2v = Figure.VOICE_TO_VOICE_S.value
    row("voice-to-voice p95", [format_value(Figure.VOICE_TO_VOICE_S, r["summary"][v2v]["p95"])
                               for r in rows])

    def ratio(r: dict) -> str:
        vs = r["vs_first"]
        if vs["ratio"] is None:
            return "-"
        spread = f" ({vs['min']:.2f}-{vs['max']:.2f})" if vs["min"] is not None else ""
        return f"{vs['ratio']:.2f}{spread}"

    row(f"v2v p50 vs {doc['baseline']}", [ratio(r) for r in rows])
    keys = sorted({k for r in rows for k in r["lock_wait_s"]})
    for key in keys:
        row(f"{key} lock wait", [f"{r['lock_wait_s'][key] * 1000:.1f} ms" if key in r["lock_wait_s"]
                                 else "-" for r in rows])
    devices = sorted({d for r in rows for d in r["memory_peak"]})
    for device in devices:
        row(f"peak memory {device}", [_gib(r["memory_peak"][device]["used_bytes"])
                                      if device in r["memory_peak"] else "-" for r in rows])
    lines.append(f"({doc['note']}; {doc['runs']} round(s) of {len(doc['inputs'])} input(s))")
    lines.append("")
    lines.append(format_budget([(r["layout"], [t for run in r["turns"] for t in run]) for r in rows]))
    if doc.get("warning"):
        lines.append(f"WARNING: {doc['warning']}")
    return "\n".join(lines)


def main(argv: list[str], add_config_flags: Callable[[argparse.ArgumentParser], None] | None = None,
         ) -> int:
    """``parley-cli bench --layouts SPEC INPUT...``; returns the exit status (0: measured;
    2: an error, and bad arguments, inputs and layouts are found before anything loads)."""
    args = build_parser(add_config_flags).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)

    def measure() -> int:
        resolved, audios = plan(args)
        doc = run_layouts(args, resolved, audios)
        if args.plot:
            from engine.bench.plot import plot_layouts

            plot_layouts(doc, args.plot)
            _say(f"plot written to {args.plot}")
        if args.json:  # the one JSON document on stdout; progress went to stderr
            print(json.dumps(doc, indent=2, ensure_ascii=False))
        else:
            print(format_layouts(doc))
        if doc.get("warning"):
            _say(f"WARNING: {doc['warning']}")
        return 0

    return run_command(measure)
