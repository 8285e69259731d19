"""Worker: engine work (discovery, construction, loading, start, stop) off the GUI thread.

Jobs run one at a time, in order, on one background thread, so an Apply queued behind a
load never races it. Each job's outcome comes back to the GUI thread as a queued signal
and is handed to the job's ``done`` or ``failed`` callback there.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from engine.errors import ParleyError

log = logging.getLogger("parley.app.worker")


@dataclass
class _Job:
    label: str
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
        self._current: str | None = None
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
    def current(self) -> str | None:
        """The label of the job running now, if any."""
        return self._current

    def submit(self, label: str, fn: Callable[[], Any], done: Callable[[Any], None] | None = None,
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
        self._jobs.put(_Job(label, fn, done, failed))

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
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._free.clear()
            self._current = job.label
            value, error = None, None
            try:
                value = job.fn()
            except ParleyError as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - a bug must reach the user, not kill the thread
                log.exception("background job %r failed", job.label)
                error = f"unexpected error while {job.label}: {type(exc).__name__}: {exc}"
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
                log.error("%s failed: %s", job.label, error)
        finally:
            if self._pending == 0:
                self.busy_changed.emit(False)
