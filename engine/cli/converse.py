"""``parley-cli converse`` and ``parley-cli bench``: recordings through the real pipeline.

The run itself is ``engine.recording`` (shared with ``parley --self-test``); this module
adds what a terminal user sees: the placements, load progress and the run's words on
stderr, the result on stdout. ``converse`` stores its turns in the history unless
``--private`` (or ``history.enabled`` is off), and asks on the terminal before a tool
with side effects (``--yes``: ``engine/cli/confirm.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.bench.variants import bench_variants
from engine.cli.confirm import TerminalConfirmer, history_source
from engine.cli.output import show_choices, show_progress, write_json
from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import AudioInputError, NoSpeechError, ParleyError
from engine.history.recorder import record_history
from engine.history.store import HistoryStore
from engine.pipeline.events import EngineError, Event, FinalTranscript, Notice, ReplyText
from engine.recording import load_engine, run_recording
from engine.pipeline.critical_path import median_turn
from engine.report import bench_summary, format_bench, format_budget, format_turn, turn_dict


def prepare_engine(config: EngineConfig, registry=None) -> Engine:
    """Resolve placements (errors before any model loads), show the choices, load."""
    started = time.perf_counter()

    def resolved(engine: Engine) -> None:
        nonlocal started
        show_choices(engine)
        started = time.perf_counter()

    engine = load_engine(config, registry, show_progress, resolved=resolved)
    print(f"models ready in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return engine


def _echo(echo: bool) -> Callable[[Event], None]:
    """The run's events on stderr: stage errors always, the words and replies if ``echo``."""

    def show(event: Event) -> None:
        if isinstance(event, EngineError):
            print(f"error in {event.stage}: {event.message}", file=sys.stderr)
        elif isinstance(event, Notice):
            print(f"note: {event.message}", file=sys.stderr)
        elif echo and isinstance(event, FinalTranscript):
            print(f"you:    {event.text}", file=sys.stderr)
        elif echo and isinstance(event, ReplyText):
            print(f"parley: {event.text}", file=sys.stderr)

    return show


def _load_input(path: str) -> np.ndarray:
    from engine.audio.decode import load_audio

    return load_audio(path)


def check_output(output: str | None) -> None:
    """AudioInputError when ``--output``'s folder does not exist (before any model loads)."""
    if output and not Path(output).resolve().parent.is_dir():
        raise AudioInputError(f"--output {output}: folder {Path(output).resolve().parent} does not exist")


def run_converse(args: argparse.Namespace, config: EngineConfig) -> int:
    audio = _load_input(args.input)
    check_output(args.output)
    if args.fast:  # without a real-time clock every turn would barge into the last reply
        config = config.with_overrides({"turns.barge_in": "off"})
    source = history_source(args, config, f"converse:{Path(args.input).resolve()}")
    store = None if source is None else HistoryStore()  # a broken history fails before loading
    if store is not None and store.notice:
        print(f"parley-cli: note: {store.notice}", file=sys.stderr)
    confirmer = TerminalConfirmer(allow_all=args.yes)
    try:
        engine = prepare_engine(config)
        recorder = record_history(engine, source, store) if store and source else None
        engine.set_tool_confirmer(confirmer)
        try:
            turns, errors = run_recording(engine, audio, args.output, not args.fast,
                                          _echo(not args.json))
            placements = engine.placement_dicts()
        finally:
            confirmer.close()  # a question still open is answered "no": the tools can end
            for problem in recorder.close() if recorder else ():
                print(f"parley-cli: warning: {problem}", file=sys.stderr)
            engine.close()
    finally:
        if store is not None:
            store.close()
    if not turns:
        raise NoSpeechError(f"no speech found in {args.input} ({audio.size / 16000:.1f} s of audio): "
                            "no turn was taken")
    if args.json:
        write_json({"input": args.input, "output": args.output, "realtime": not args.fast,
                    "placements": placements, "notes": list(engine.notes),
                    "turns": [turn_dict(t) for t in turns], "errors": errors})
    else:
        for record in turns:
            print(format_turn(record))
        if args.output:
            print(f"replies written to {args.output}")
    return 1 if errors else 0


def run_bench(args: argparse.Namespace, config: EngineConfig) -> int:
    audio = _load_input(args.input)
    variants = bench_variants(config, args.compare, args.variant)
    from engine.models.model_registry import ModelRegistry

    registry = ModelRegistry()  # variants that differ only at run time share models
    engines = []
    try:
        for label, cfg in variants:
            if label:
                print(f"variant {label}:", file=sys.stderr)
            engines.append(prepare_engine(cfg, registry))
        runs: dict[str, list[list[dict]]] = {label: [] for label, _ in variants}
        for run in range(args.runs):
            for (label, _cfg), engine in zip(variants, engines):  # interleaved: fair to both
                turns, errors = run_recording(engine, audio, None, realtime=True, on_event=_echo(False))
                if errors:
                    raise ParleyError(f"bench run {run + 1} failed: {'; '.join(errors)}")
                if not turns:
                    raise NoSpeechError(f"no speech found in {args.input}: nothing to measure")
                runs[label].append([turn_dict(t) for t in turns])
                v2v = [t["voice_to_voice_s"] for t in runs[label][-1] if t["voice_to_voice_s"] is not None]
                print(f"run {run + 1}/{args.runs}{' ' + label if label else ''}: {len(turns)} turn(s), "
                      "voice-to-voice " + ", ".join(f"{v * 1000:.0f} ms" for v in v2v), file=sys.stderr)
        placements = engines[0].placement_dicts()
    finally:
        for engine in engines:
            engine.close()
    summaries = {label: bench_summary([t for run in runs[label] for t in run]) for label in runs}
    flat = {label: [t for run in runs[label] for t in run] for label in runs}
    if args.json:
        write_json({"input": args.input, "runs": args.runs, "placements": placements,
                    "config": {k: (v.value if hasattr(v, "value") else v)
                               for k, v in config.flat().items()},
                    "variants": [{"variant": label, "summary": summaries[label],
                                  "budget": (median_turn(flat[label]) or {}).get("critical_path"),
                                  "turns": runs[label]}
                                 for label in runs]})
    else:
        for label, summary in summaries.items():
            if label:
                print(f"\n== {label}")
            print(format_bench(summary))
        print()
        print(format_budget(list(flat.items())))
    return 0
