"""A background thread that calls ``sample()`` at a fixed interval while in a ``with``."""

from __future__ import annotations

import threading


class PeriodicSampler:
    """Override ``sample``; ``with sampler:`` runs it every ``interval`` s on its own
    thread, which is stopped and joined on exit."""

    def __init__(self, interval: float, name: str) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def sample(self) -> None:
        """One reading (on the sampler's thread)."""
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
