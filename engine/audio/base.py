"""What the pipeline needs from an audio source and an audio sink.

Sources deliver 16 kHz mono float32 blocks stamped with the wall-clock time
(``time.perf_counter()``) at which their first sample was captured; a file source paced
at real time stamps and delivers blocks exactly as a microphone would. Sinks take whole
reply chunks without blocking and play them on their own clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

PIPELINE_RATE = 16000


class InputMarker(enum.Enum):
    """A request that travels in order with the captured audio (network clients)."""

    COMMIT = "commit"  # end the user's turn now, whatever the silence
    CLEAR = "clear"  # forget the audio of the turn in progress


@dataclass(frozen=True, slots=True)
class AudioBlock:
    """A block of captured audio: 16 kHz mono float32.

    A block with a ``marker`` carries a request instead of (or after) its samples; it
    reaches the source stage in order with the audio around it.
    """

    samples: np.ndarray = field(repr=False)
    t_start: float  # perf_counter() time of the first sample
    marker: InputMarker | None = None


class AudioSource(Protocol):
    """Microphone or file. ``read`` is called from one stage thread only."""

    sample_rate: int  # always PIPELINE_RATE

    def open(self) -> None:
        """Start capturing (open the sound card, start the file clock)."""

    def close(self) -> None:
        """Stop capturing and release the device. Idempotent."""

    def read(self, timeout: float) -> AudioBlock | None:
        """The next block, or None if none arrived within ``timeout`` seconds."""

    @property
    def finished(self) -> bool:
        """True once a finite source (a file) has delivered its last block."""

    @property
    def overflow_count(self) -> int:
        """Blocks dropped because the consumer was too slow (never blocks instead)."""

    @property
    def level(self) -> float:
        """RMS of the latest block, 0..1, for the microphone meter."""


class AudioSink(Protocol):
    """Speaker or file. ``play`` never blocks; playback runs on the sink's own clock."""

    def open(self) -> None: ...

    def close(self) -> None:
        """Stop playback, release the device, join the sink's threads. Idempotent."""

    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Queue float32 mono audio for playback; resamples to the device rate."""

    def flush(self) -> int:
        """Barge-in: drop all queued and playing audio now. Returns samples dropped."""

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued has been played (or timeout). True if idle."""

    @property
    def is_playing(self) -> bool:
        """True while queued audio remains to be heard."""

    def first_heard(self, turn_id: int) -> float | None:
        """perf_counter() time when the first sample of ``turn_id`` was (or will be) heard."""
