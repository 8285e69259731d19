"""BenchController: the Benchmark tab's handle on ``engine.bench.lab`` (layouts compared).

A run resolves the layouts, decodes the input, loads each layout's engine (one
ModelRegistry for the run, so layouts placed alike share their models), warms each up and
runs the interleaved rounds, all on this controller's own serial lane
(``app.core.background``), never on the GUI thread and never queued behind the desktop
engine's commands. Progress (one step per load and per
run) and the finished document come back as queued signals. Cancel asks ``run_layouts``
to stop before its next load or run; the job then closes what it loaded and ends.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.core.background import Failure, Job, JobKind, SerialLane, Task
from engine.bench.layouts import Layout
from engine.config import EngineConfig

CANCELLED = "the benchmark was cancelled"


class BenchController(QObject):
    """Runs one layout benchmark at a time; signals progress, the result, or why not."""

    running_changed = Signal(bool)
    progress = Signal(int, int, str)  # step, steps, what runs now
    finished = Signal(object)  # the bench_lab JSON document (a dict)
    failed = Signal(str)  # nothing measured; the message says why (CANCELLED if cancelled)

    def __init__(self, config: Callable[[], EngineConfig], parent: QObject | None = None,
                 blocked: Callable[[], str | None] | None = None) -> None:
        """``config()``: the desktop's EngineConfig when Run is pressed; layouts override it.
        ``blocked()``: why a run cannot start now (the desktop engine loading models: two
        loads at once in one process are not safe for every backend), or None."""
        super().__init__(parent)
        self._config = config
        self._blocked = blocked
        self.worker = SerialLane(self)
        self.running = False
        self.doc: dict | None = None
        self._stop = threading.Event()
        self._closing = False

    def start(self, layouts: list[Layout], inputs: list[str], runs: int) -> None:
        """Benchmark ``layouts`` on ``inputs``, ``runs`` interleaved rounds."""
        if self.running or self._closing:
            return
        reason = self._blocked() if self._blocked is not None else None
        if reason:
            self.failed.emit(f"not now: {reason}; run it once that is done")
            return
        self._stop.clear()
        base = self._config().with_overrides({"units": 1})
        count = len(layouts)
        steps = 2 * count + runs * len(inputs) * count
        step = [0]
        stop = self._stop

        def describe(k: int) -> str:
            if k <= count:
                return f"loading {layouts[k - 1].label}"
            if k <= 2 * count:
                return f"warm-up of {layouts[k - count - 1].label}"
            i = k - 2 * count - 1
            return (f"run {i // (count * len(inputs)) + 1} of {runs}: "
                    f"{layouts[i % count].label}")

        def job(task: Task) -> dict:
            from engine.audio.decode import load_audio
            from engine.bench.lab import run_layouts
            from engine.bench.layouts import resolve_layouts
            from engine.config import require_one_unit

            resolved = resolve_layouts(base, layouts)  # an impossible layout fails here
            for layout in resolved:
                require_one_unit(layout.config)
            audios = [load_audio(path) for path in inputs]
            args = argparse.Namespace(runs=runs, inputs=list(inputs), weights="pretrained")

            def should_stop() -> bool:  # on the lane's thread, before each load and run
                if stop.is_set():
                    return True
                step[0] += 1
                return not task.report(step[0], steps, describe(step[0]))  # False: the window is gone

            return run_layouts(args, resolved, audios, should_stop=should_stop)

        self.doc = None
        self._set_running(True)
        self.worker.submit(Job(JobKind.LOAD, job, self._done, self._failed, progress=self.progress.emit))

    def cancel(self) -> None:
        """Stop before the next load or run; ``failed(CANCELLED)`` follows once it ended."""
        self._stop.set()

    def _done(self, doc: dict) -> None:
        self.doc = doc
        self._set_running(False)
        self.finished.emit(doc)

    def _failed(self, failure: Failure) -> None:
        message = failure.message
        self._set_running(False)
        self.failed.emit(CANCELLED if self._stop.is_set() and CANCELLED in message else message)

    def _set_running(self, running: bool) -> None:
        if running != self.running:
            self.running = running
            self.running_changed.emit(running)

    def shutdown(self, wait_s: float = 30.0) -> list[str]:
        """Final close: cancel a run, wait for it to close its engines, end the thread.
        Returns the names of threads that did not end."""
        self._closing = True
        self._stop.set()
        self.worker.shutdown(0)
        idle = self.worker.wait_idle(wait_s)
        ended = self.worker.join(2.0)
        return [] if idle and ended else ["parley-gui-worker (benchmark)"]
