"""Blocks in the card's sizes -> frames of the size a VAD model takes, with their times."""

from __future__ import annotations

import numpy as np

from engine.audio.base import PIPELINE_RATE


class Framer:
    """Cuts consecutive blocks into frames of ``size`` samples, each stamped with the
    capture time of its first sample; what is short of a frame waits for the next block."""

    def __init__(self, size: int, rate: int = PIPELINE_RATE) -> None:
        if size < 1:
            raise ValueError(f"a frame must hold at least one sample; got {size}")
        self.size = size
        self.rate = rate
        self._pending = np.zeros(0, np.float32)
        self._t = 0.0  # capture time of _pending[0]

    def push(self, samples: np.ndarray, t_start: float) -> list[tuple[np.ndarray, float]]:
        """The whole frames that ``samples`` (captured from ``t_start`` on) complete."""
        if self._pending.size == 0:
            self._t = t_start
        pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        count = pending.size // self.size
        step = self.size / self.rate
        frames = [(pending[k * self.size:(k + 1) * self.size], self._t + k * step) for k in range(count)]
        self._pending = pending[count * self.size:]
        self._t += count * step
        return frames

    def reset(self) -> None:
        """Drop what waits (the next block starts afresh)."""
        self._pending = np.zeros(0, np.float32)
