"""A recording through a loaded engine: what ``parley-cli converse``/``bench`` and
``parley --self-test`` share.

Nothing here prints. Load progress and the run's events go to optional callbacks, and the
errors the stages report are returned, so each caller decides what to show and where (the
CLI on stderr, the self-test in its JSON report, a test nowhere).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from engine.config import EngineConfig, require_one_unit
from engine.engine import Engine
from engine.measures import Mark
from engine.pipeline.events import EngineError, Event
from engine.runtime.hub import HubStatus
from engine.pipeline.metrics import TurnRecord
from engine.models.model_registry import ModelRegistry

ProgressFn = Callable[[str, float | None, str], None]  # (stage, fraction 0..1 or None, text)


def load_engine(config: EngineConfig, registry: ModelRegistry | None = None,
                progress: ProgressFn | None = None, *, hub: HubStatus | None = None,
                resolved: Callable[[Engine], None] | None = None) -> Engine:
    """Resolve every stage's placement, then load (or share) its model and warm it up.

    Placement errors (a device that is not there, a backend that is not installed) are
    raised before any model loads. ``resolved(engine)`` is called between the two steps,
    with placements and notes known and nothing loaded, so a caller can show the choices
    first. ``progress`` is passed to ``Engine.load``; ``registry`` lets several engines
    share models; ``hub`` overrides the hub probe (``HubStatus(offline=True)``).
    """
    require_one_unit(config)  # before anything loads
    engine = Engine(config, registry=registry, hub=hub)
    if resolved is not None:
        resolved(engine)
    engine.load(progress)
    return engine


def uses_bundled_stack(engine: Engine) -> bool:
    """Every model stage (the VAD always is) runs a model shipped inside a package."""
    return all(p.bundled for p in engine.placements.values() if p.stage != "vad")


def trailing_silence_s(config: EngineConfig) -> float:
    """Silence fed after a recording so its last turn ends and is committed."""
    return (config.vad.min_silence_ms + config.turns.reopen_grace_ms) / 1000 + 0.5


def run_recording(engine: Engine, audio: np.ndarray, output: str | None, realtime: bool,
                  on_event: Callable[[Event], None] | None = None,
                  on_open: Callable[[float], None] | None = None,
                  ) -> tuple[list[TurnRecord], list[str]]:
    """Stream ``audio`` (16 kHz mono) through a fresh pipeline unit; wait until every reply
    was played; return this run's turns and the errors stages reported.

    ``output``: a WAV file for the replies (None: keep them in memory only). ``realtime``:
    feed and play at the recording's pace, else as fast as the pipeline takes it.
    ``on_event`` sees every engine event of the run, on the thread that emits it.
    ``on_open(t0)`` is told the capture time of the recording's first sample (the clock of
    the turns' marks) once the source is open.
    The run ends when the pipeline drained, or with an error after the recording's length
    (x1.2 when paced) plus 600 s; threads that do not stop are reported as an error.
    """
    from engine.audio.file_sink import FileSink
    from engine.audio.file_source import FileSource

    source = FileSource(audio, realtime=realtime, trailing_silence_s=trailing_silence_s(engine.config))
    sink = FileSink(output, realtime=realtime)
    errors: list[str] = []

    def listen(event: Event) -> None:
        if isinstance(event, EngineError):
            errors.append(f"{event.stage}: {event.message}")
        if on_event is not None:
            on_event(event)

    unsubscribe = engine.subscribe(listen)
    t_run = time.perf_counter()
    engine.start([source], [sink])
    if on_open is not None and source.t0 is not None:
        on_open(source.t0)
    try:
        deadline = t_run + source.duration_s * (1.2 if realtime else 0) + 600
        while not engine.wait_drained(0.25):
            if time.perf_counter() > deadline:
                errors.append("the pipeline did not finish within its time limit")
                break
    finally:
        stuck = engine.stop()
        unsubscribe()
    if stuck:
        errors.append(f"threads did not stop: {', '.join(stuck)}")
    turns = [t for t in engine.metrics.turns() if t.marks.get(Mark.SPEECH_START, 0) >= t_run]
    return turns, errors
