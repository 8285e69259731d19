"""Audio sources for tests that drive a pipeline without speech."""

from __future__ import annotations

import threading

from engine.audio.base import AudioSource


class Quiet(AudioSource):
    """A source that stays open and silent until closed (a user or client that only types)."""

    sample_rate = 16000
    overflow_count = 0
    level = 0.0

    def __init__(self) -> None:
        self._closed = threading.Event()

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._closed.set()

    def read(self, timeout):
        self._closed.wait(timeout)
        return None

    @property
    def finished(self) -> bool:
        return self._closed.is_set()
