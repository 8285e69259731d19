"""SnapshotPoller: the engine's snapshot, taken on its own thread, ready for the GUI to draw.

``Engine.snapshot()`` samples memory (psutil, torch.cuda) and copies the turn records; at
10 Hz that is too much for the GUI thread, whose event loop must never wait. The poller
takes a snapshot about every ``interval_s`` on a background thread and keeps only the
latest in a slot; the window's 10 Hz timer reads that slot, which costs one lock held for
a pointer copy. Snapshots are immutable (frozen dataclasses of tuples), so the GUI draws
them as they are.

The GUI thread is the only one that says which engine is watched (``watch``); a
snapshot of an engine that is no longer watched is thrown away, so after a new engine
the window never draws the old one's figures.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("parley.app.snapshots")

POLL_S = 0.1  # 10 Hz, the window's redraw rate


class SnapshotPoller:
    """A background thread that keeps the latest ``engine.snapshot()`` of one engine."""

    def __init__(self, interval_s: float = POLL_S, name: str = "parley-snapshots") -> None:
        self.interval_s = interval_s
        self.name = name
        self._lock = threading.Lock()
        self._engine: Any = None
        self._epoch = 0  # bumped per watched engine: later snapshots of an older one are dropped
        self._latest: Any = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshots_taken = 0

    @property
    def running(self) -> bool:
        """True while the polling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def watch(self, engine: Any, first: Any = None) -> None:
        """Poll ``engine`` from now on (None: nothing). ``first`` is a snapshot of it
        already taken (off the GUI thread), shown until the thread's first one arrives.

        The thread starts with the first engine, so a window without one has none.
        """
        with self._lock:
            self._engine = engine
            self._epoch += 1
            self._latest = first if engine is not None else None
        if engine is not None and self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._wake.set()

    def offer(self, snapshot: Any) -> None:
        """A snapshot of the watched engine taken elsewhere (the worker, right after an
        Apply): kept unless the thread already has a newer one."""
        if snapshot is None:
            return
        with self._lock:
            if self._engine is not None and (self._latest is None or snapshot.t >= self._latest.t):
                self._latest = snapshot

    def latest(self) -> Any:
        """The newest snapshot of the watched engine, or None. Never blocks on the engine."""
        with self._lock:
            return self._latest

    def stop(self, timeout: float = 2.0) -> bool:
        """End and join the thread; True if it ended within ``timeout`` (or never ran)."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        failed_epoch = -1
        while not self._stopping.is_set():
            with self._lock:
                engine, epoch = self._engine, self._epoch
            if engine is not None:
                try:
                    snapshot = engine.snapshot()
                except Exception:  # logged: a failed poll must not end the polling
                    if failed_epoch != epoch:  # once per engine, not ten times a second
                        log.exception("engine snapshot failed")
                        failed_epoch = epoch
                    snapshot = None
                if snapshot is not None:
                    self.snapshots_taken += 1
                    with self._lock:
                        if epoch == self._epoch and (self._latest is None or snapshot.t >= self._latest.t):
                            self._latest = snapshot
            self._wake.wait(self.interval_s)
            self._wake.clear()
