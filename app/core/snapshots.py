"""SnapshotPoller: the engine's snapshot, taken on its own thread, ready for the GUI to draw.

``Engine.snapshot()`` samples memory (psutil, torch.cuda) and copies the turn records; at
10 Hz that is too much for the GUI thread, whose event loop must never wait. The poller
(a ``PollingLane``, ``app.core.polling``) takes a snapshot about every
``interval_s`` on a background thread and keeps only the latest in a slot; the window's
10 Hz timer reads that slot, which costs one lock held for a pointer copy. Snapshots are
immutable (frozen dataclasses of tuples), so the GUI draws them as they are.

The GUI thread is the only one that says which engine is watched (``watch``); a
snapshot of an engine that is no longer watched is thrown away, so after a new engine
the window never draws the old one's figures.
"""

from __future__ import annotations

from app.core.polling import PollingLane

POLL_S = 0.1  # 10 Hz, the window's redraw rate


class SnapshotPoller(PollingLane):
    """The latest ``engine.snapshot()`` of the watched engine, about ten times a second."""

    def __init__(self, interval_s: float = POLL_S, name: str = "parley-snapshots") -> None:
        super().__init__(lambda engine: engine.snapshot(), "engine snapshot", interval_s, name)

    @property
    def snapshots_taken(self) -> int:
        """How many snapshots the thread took so far."""
        return self.readings
