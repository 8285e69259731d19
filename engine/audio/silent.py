"""An input with no microphone behind it, for a conversation that is only typed."""

from __future__ import annotations

import threading

from engine.audio.base import AudioBlock, AudioSource


class SilentInput(AudioSource):
    """No microphone: open and silent until closed, so the unit's source stage idles
    while every turn is typed."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def open(self) -> None:
        """Nothing to open."""

    def close(self) -> None:
        self._closed.set()

    def read(self, timeout: float) -> AudioBlock | None:
        self._closed.wait(timeout)
        return None

    @property
    def finished(self) -> bool:
        return self._closed.is_set()
