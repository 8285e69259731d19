"""What the pipeline needs from an audio source and an audio sink.

Sources deliver 16 kHz mono float32 blocks stamped with the wall-clock time
(``time.perf_counter()``) at which their first sample was captured; a file source paced
at real time stamps and delivers blocks exactly as a microphone would. Sinks take whole
reply chunks without blocking and play them on their own clock.

``AudioSource`` and ``AudioSink`` are base classes: what every source or sink must do is
abstract, and what only some can tell (a device's health, whether it is lost, what its
buffer holds) has a default that means "nothing to report", so the pipeline asks every
source the same questions without looking for members. A wrapper delegates to the
source it wraps (``SourceWrapper``).
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field

import numpy as np

from engine.audio.health import HealthReport

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


class AudioSource(abc.ABC):
    """Microphone, file or network client. ``read`` is called from one stage thread only."""

    sample_rate: int = PIPELINE_RATE  # what every source delivers

    @abc.abstractmethod
    def open(self) -> None:
        """Start capturing (open the sound card, start the file clock)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop capturing and release the device. Idempotent."""

    @abc.abstractmethod
    def read(self, timeout: float) -> AudioBlock | None:
        """The next block, or None if none arrived within ``timeout`` seconds."""

    @property
    def finished(self) -> bool:
        """True once a finite source (a file) has delivered its last block."""
        return False

    @property
    def overflow_count(self) -> int:
        """Blocks dropped because the consumer was too slow (never blocks instead)."""
        return 0

    @property
    def level(self) -> float:
        """RMS of the latest block, 0..1, for the microphone meter."""
        return 0.0

    @property
    def lost(self) -> bool:
        """True while the device is gone (unplugged) and being reopened."""
        return False

    @property
    def buffered_blocks(self) -> int:
        """Blocks captured and waiting for ``read`` (the source stage's queue meter)."""
        return 0

    @property
    def buffer_capacity(self) -> int:
        """The most blocks that may wait before the oldest are dropped (0: not bounded)."""
        return 0

    @property
    def device_name(self) -> str | None:
        """The sound device's own name once it is open; None for files and streams."""
        return None

    def poll_health(self) -> list[HealthReport]:
        """Check the device now; its reports since the last call (one reader, the VAD stage)."""
        return []


class SourceWrapper(AudioSource):
    """A source that passes ``inner``'s audio on, changed (``read`` is what a subclass
    overrides); everything else is ``inner``'s."""

    def __init__(self, inner: AudioSource) -> None:
        self.inner = inner

    def open(self) -> None:
        """Open the wrapped source."""
        self.inner.open()

    def close(self) -> None:
        """Close the wrapped source. Idempotent."""
        self.inner.close()

    def read(self, timeout: float) -> AudioBlock | None:
        return self.inner.read(timeout)

    @property
    def finished(self) -> bool:
        return self.inner.finished

    @property
    def overflow_count(self) -> int:
        return self.inner.overflow_count

    @property
    def level(self) -> float:
        return self.inner.level

    @property
    def lost(self) -> bool:
        return self.inner.lost

    @property
    def buffered_blocks(self) -> int:
        return self.inner.buffered_blocks

    @property
    def buffer_capacity(self) -> int:
        return self.inner.buffer_capacity

    @property
    def device_name(self) -> str | None:
        return self.inner.device_name

    def poll_health(self) -> list[HealthReport]:
        return self.inner.poll_health()


class AudioSink(abc.ABC):
    """Speaker, file or network client. ``play`` never blocks; playback runs on the
    sink's own clock."""

    @abc.abstractmethod
    def open(self) -> None:
        """Ready to play (open the sound card)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop playback, release the device, join the sink's threads. Idempotent."""

    @abc.abstractmethod
    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Queue float32 mono audio for playback; resamples to the device rate."""

    @abc.abstractmethod
    def flush(self) -> int:
        """Barge-in: drop all queued and playing audio now. Returns samples dropped."""

    @abc.abstractmethod
    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued has been played (or timeout). True if idle."""

    @property
    @abc.abstractmethod
    def is_playing(self) -> bool:
        """True while queued audio remains to be heard."""

    @abc.abstractmethod
    def first_heard(self, turn_id: int) -> float | None:
        """perf_counter() time when the first sample of ``turn_id`` was (or will be) heard."""

    @property
    def latency(self) -> float:
        """Seconds from queuing audio on an idle sink to hearing it, as far as known."""
        return 0.0

    @property
    def lost(self) -> bool:
        """True while the device is gone (replies are dropped) and being reopened."""
        return False

    @property
    def device_name(self) -> str | None:
        """The sound device's own name once it is open; None for files and streams."""
        return None

    def poll_health(self) -> list[HealthReport]:
        """Check the device now; its reports since the last call (one reader, the VAD stage)."""
        return []
