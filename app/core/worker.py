"""Worker: engine work (discovery, construction, loading, Apply, start, stop) off the GUI thread.

Jobs run one at a time, in order, on one background thread, so an Apply queued behind a
load never races it. Each job's outcome comes back to the GUI thread as a queued signal
and is handed to the job's ``done`` or ``failed`` callback there. A job only returns
values: whatever it produced is assigned to GUI-owned state by its ``done`` callback, on
the GUI thread, never by the job itself.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from engine.errors import ParleyError

log = logging.getLogger("parley.app.worker")


class JobFailure(str):
    """The words of a failed job, carrying the ParleyError they came from (``error``), so
    a front end can act on the failure (after a ModelLoadError: offer another device)."""

    error: ParleyError | None

    def __new__(cls, text: str, error: ParleyError | None = None) -> JobFailure:
        failure = super().__new__(cls, text)
        failure.error = error
        return failure


class JobKind(enum.Enum):
    """What a background job does; the value words it for messages ("while loading models")."""

    DISCOVER = "discovering devices"
    LOAD = "loading models"
    APPLY = "applying settings"
    SWITCH_ENGINE = "switching to the new engine"
    START = "starting the pipeline"
    STOP = "stopping the pipeline"
    SWITCH_INPUT = "switching the input device"
    SWITCH_OUTPUT = "switching the output device"
    NEW_CONVERSATION = "starting a new conversation"
    VOICES = "listing the voices"
    PREVIEW = "previewing the voice"

    @property
    def label(self) -> str:
        """The job in words."""
        return self.value


@dataclass
class _Job:
    kind: JobKind
    fn: Callable[[], Any]
    done: Callable[[Any], None] | None
    failed: Callable[[str], None] | None


class Worker(QObject):
    """A serial background job runner whose results arrive on the GUI thread."""

    busy_changed = Signal(bool)
    _outcome = Signal(object, object, object)  # job, value, error text

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._pending = 0
        self._current: JobKind | None = None
        self._free = threading.Event()  # set while the thread runs no job
        self._free.set()
        self._closed = False
        self._outcome.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        self._thread = threading.Thread(target=self._run, name="parley-gui-worker", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while a job runs or waits."""
        return self._pending > 0

    @property
    def current(self) -> JobKind | None:
        """The kind of the job running now, if any."""
        return self._current

    def submit(self, kind: JobKind, fn: Callable[[], Any], done: Callable[[Any], None] | None = None,
               failed: Callable[[str], None] | None = None) -> None:
        """Run ``fn()`` in the background; then ``done(value)`` or ``failed(message)`` here.

        A ParleyError's message is passed as is; any other exception is logged with its
        traceback and reported as an unexpected error naming the job.
        """
        if self._closed:
            return
        self._pending += 1
        if self._pending == 1:
            self.busy_changed.emit(True)
        self._jobs.put(_Job(kind, fn, done, failed))

    def wait_current(self, timeout: float) -> bool:
        """Block until the running job (if any) has returned; True if none runs now.

        Only for the final close: the outcome is delivered later, by the event loop.
        """
        return self._free.wait(timeout)

    def shutdown(self, timeout: float = 0.0) -> bool:
        """Drop waiting jobs, end the thread after the running one; True if it ended in time."""
        self._closed = True
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self._jobs.put(None)
        return self.join(timeout)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread to end (after ``shutdown``); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._free.clear()
            self._current = job.kind
            value, error = None, None
            try:
                value = job.fn()
            except ParleyError as exc:
                error = JobFailure(str(exc), exc)
            except Exception as exc:  # a bug must reach the user, not kill the thread
                log.exception("background job %r failed", job.kind.label)
                error = f"unexpected error while {job.kind.label}: {type(exc).__name__}: {exc}"
            self._current = None
            self._free.set()
            try:
                self._outcome.emit(job, value, error)
            except RuntimeError:
                return  # the window is gone; nobody is waiting for the outcome

    def _deliver(self, job: _Job, value: Any, error: str | None) -> None:
        self._pending -= 1
        try:
            if error is None:
                if job.done is not None:
                    job.done(value)
            elif job.failed is not None:
                job.failed(error)
            else:
                log.error("%s failed: %s", job.kind.label, error)
        finally:
            if self._pending == 0:
                self.busy_changed.emit(False)
