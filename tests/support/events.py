"""Engine events as a test sees them."""

from __future__ import annotations

import time


class EventRecorder:
    """Collects engine events with their arrival time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, object]] = []

    def __call__(self, event) -> None:
        self.events.append((time.perf_counter(), event))

    def of(self, kind):
        return [(t, e) for t, e in self.events if isinstance(e, kind)]
