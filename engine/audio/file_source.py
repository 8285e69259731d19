"""A recording as an audio source: paced like a microphone, or as fast as it is read.

Paced (``realtime=True``), block ``k`` holds the samples a microphone opened at ``t0``
would capture from ``t0 + k*B`` to ``t0 + (k+1)*B`` (``B`` = the block duration): it is
stamped ``t0 + k*B`` and, like a microphone's, becomes available only once its last
sample has been "captured", at ``t0 + (k+1)*B``. Due times are absolute, so the clock
never drifts however late the reader is. Unpaced, every block is available at once and
stamped with the time it was read.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource
from engine.audio.pcm import level
from engine.errors import AudioInputError, ConfigError


class FileSource(AudioSource):
    """A file (any format ``decode.load_audio`` reads) or a 16 kHz array, block by block."""

    sample_rate = PIPELINE_RATE

    def __init__(self, source: str | Path | np.ndarray, realtime: bool, block_ms: int = 32,
                 trailing_silence_s: float = 1.0, capture_buffer_s: float | None = None) -> None:
        """Decode ``source`` now, so a bad file fails before anything else starts.

        ``trailing_silence_s`` of zeros are appended so that the last turn can end.
        ``capture_buffer_s`` (paced only) mimics the microphone's drop-oldest buffer:
        blocks older than that when read are skipped and counted as overflows; None keeps
        every block however late the reader is.
        """
        if not isinstance(block_ms, int) or isinstance(block_ms, bool) or not 1 <= block_ms <= 1000:
            raise ConfigError(f"FileSource block_ms must be an integer from 1 to 1000; got {block_ms!r}")
        if not trailing_silence_s >= 0:
            raise ConfigError(f"FileSource trailing_silence_s must be >= 0; got {trailing_silence_s!r}")
        if capture_buffer_s is not None and not capture_buffer_s > 0:
            raise ConfigError(f"FileSource capture_buffer_s must be > 0 or None; got {capture_buffer_s!r}")
        self.name = "array" if isinstance(source, np.ndarray) else str(source)
        speech = _load(source)
        self.realtime = realtime
        self.block_samples = block_ms * PIPELINE_RATE // 1000
        self.speech_samples = speech.size
        total = speech.size + round(trailing_silence_s * PIPELINE_RATE)
        self.n_blocks = math.ceil(total / self.block_samples)
        # Zero-pad the final block: every block has the same size, like a microphone's.
        self._audio = np.zeros(self.n_blocks * self.block_samples, dtype=np.float32)
        self._audio[:speech.size] = speech
        self._max_lag_blocks = (None if capture_buffer_s is None
                                else max(1, math.ceil(capture_buffer_s * PIPELINE_RATE / self.block_samples)))
        self._next = 0
        self._t0: float | None = None
        self._closed = False
        self._overflows = 0
        self._level = 0.0

    @property
    def duration_s(self) -> float:
        """Length of what is delivered, trailing silence and padding included."""
        return self._audio.size / PIPELINE_RATE

    @property
    def t0(self) -> float | None:
        """perf_counter() at ``open``: the capture time of the first sample."""
        return self._t0

    def open(self) -> None:
        """Start the clock: the first sample counts as captured now."""
        if self._t0 is None:
            self._t0 = time.perf_counter()

    def close(self) -> None:
        """Stop delivering blocks. Idempotent."""
        self._closed = True

    def read(self, timeout: float) -> AudioBlock | None:
        """The next block, waiting until it is due (paced); None on timeout or at the end."""
        if self._t0 is None:
            raise RuntimeError("FileSource.read() called before open()")
        if self._closed or self._next >= self.n_blocks:
            return None
        duration = self.block_samples / PIPELINE_RATE
        if self.realtime:
            now = time.perf_counter()
            self._skip_stale(now, duration)
            due = self._t0 + (self._next + 1) * duration
            wait = due - now
            if wait > timeout:
                time.sleep(max(0.0, timeout))
                return None
            if wait > 0:
                time.sleep(wait)
                # sleep() may wake a hair early on some platforms; never deliver before due.
                while time.perf_counter() < due:
                    time.sleep(0.0005)
            t_start = self._t0 + self._next * duration
        else:
            t_start = time.perf_counter()
        k = self._next
        self._next += 1
        samples = self._audio[k * self.block_samples:(k + 1) * self.block_samples]
        self._level = level(samples)
        return AudioBlock(samples.copy(), t_start)

    def _skip_stale(self, now: float, duration: float) -> None:
        if self._max_lag_blocks is None or self._t0 is None:
            return
        captured = min(self.n_blocks, int((now - self._t0) / duration))  # blocks complete by now
        oldest_kept = captured - self._max_lag_blocks
        if self._next < oldest_kept:
            self._overflows += oldest_kept - self._next
            self._next = oldest_kept

    @property
    def finished(self) -> bool:
        """True once the last block (end of the trailing silence) has been delivered."""
        return self._next >= self.n_blocks

    @property
    def overflow_count(self) -> int:
        """Blocks skipped because the reader lagged more than ``capture_buffer_s``."""
        return self._overflows

    @property
    def level(self) -> float:
        """RMS of the latest block delivered."""
        return self._level


def _load(source: str | Path | np.ndarray) -> np.ndarray:
    if isinstance(source, np.ndarray):
        if source.ndim != 1:
            raise AudioInputError(
                f"FileSource takes 16 kHz mono audio as a 1-D array; got shape {source.shape}"
            )
        if source.size == 0:
            raise AudioInputError("FileSource was given an empty array (no audio samples)")
        if not np.issubdtype(source.dtype, np.floating):
            raise AudioInputError(
                f"FileSource takes float samples in -1..1; got an array of {source.dtype}"
            )
        return np.ascontiguousarray(source, dtype=np.float32)
    from engine.audio.decode import load_audio  # lazily: soundfile and soxr load here

    return load_audio(source, PIPELINE_RATE)
