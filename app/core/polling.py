"""PollingLane: the background helper's periodic lane (``app.core.background``).

One thread per poller keeps the latest reading of one watched source (the engine's
snapshot, the realtime server's pool) in a slot; the GUI's timer reads that slot at its
own pace, which costs one lock held for a pointer copy, and never calls the source.
Which source is watched is said on the GUI thread only; a reading of a source that is no
longer watched is thrown away (the generation check). ``shutdown`` joins the thread, and
``background.shutdown_all`` does for every poller still alive when the app closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from app.core.background import register

log = logging.getLogger("parley.app.background")


class PollingLane:
    """A thread that keeps the latest ``read(source)`` of one watched source.

    It starts with the first source watched and sleeps while none is; a reading of a
    source that is no longer watched is thrown away (the generation check). ``read``
    returns None for "nothing new"; a reading with a ``t`` older than the one kept does
    not replace it. The GUI reads ``latest()`` at its own pace: one lock, a pointer copy.
    """

    def __init__(self, read: Callable[[Any], Any], what: str, interval_s: float,
                 name: str) -> None:
        self.interval_s = interval_s
        self.name = name
        self._read = read
        self._what = what  # for the log line of a failed reading
        self._lock = threading.Lock()
        self._source: Any = None
        self._epoch = 0  # bumped per watched source: later readings of an older one are dropped
        self._latest: Any = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.readings = 0
        register(self)

    @property
    def running(self) -> bool:
        """True while the polling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def watch(self, source: Any, first: Any = None) -> None:
        """Poll ``source`` from now on (None: nothing). ``first`` is a reading of it
        already taken (off the GUI thread), shown until the thread's first one arrives.

        The thread starts with the first source, so a window without one has none.
        """
        with self._lock:
            self._source = source
            self._epoch += 1
            self._latest = first if source is not None else None
        if source is not None and self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._wake.set()

    def offer(self, reading: Any) -> None:
        """A reading of the watched source taken elsewhere (the worker, right after an
        Apply): kept unless the thread already has a newer one."""
        if reading is None:
            return
        with self._lock:
            if self._source is not None and self._newer(reading):
                self._latest = reading

    def latest(self) -> Any:
        """The newest reading of the watched source, or None. Never blocks on the source."""
        with self._lock:
            return self._latest

    def shutdown(self, timeout: float = 2.0) -> bool:
        """End and join the thread; True if it ended within ``timeout`` (or never ran)."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _newer(self, reading: Any) -> bool:
        return self._latest is None or reading.t >= self._latest.t

    def _run(self) -> None:
        failed_epoch = -1
        while not self._stopping.is_set():
            with self._lock:
                source, epoch = self._source, self._epoch
            if source is not None:
                try:
                    reading = self._read(source)
                except Exception:  # logged: a failed poll must not end the polling
                    if failed_epoch != epoch:  # once per source, not ten times a second
                        log.exception("%s failed", self._what)
                        failed_epoch = epoch
                    reading = None
                if reading is not None:
                    self.readings += 1
                    with self._lock:
                        if epoch == self._epoch and self._newer(reading):
                            self._latest = reading
            # Nothing watched: sleep until a source is (or the poller stops).
            self._wake.wait(self.interval_s if source is not None else None)
            self._wake.clear()
