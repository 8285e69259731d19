"""A sink that records what is played, and writes it to a WAV file on close.

Paced (``realtime=True``) it behaves like a sound card: a clock thread consumes the
queue in 10 ms blocks on absolute deadlines, so ``is_playing``, ``flush`` (barge-in) and
``first_heard`` mean what they mean for a speaker, and the file holds only what was
"heard" before a flush. Unpaced, ``play`` records at once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from engine.audio.base import AudioSink
from engine.audio.buffer import PlaybackQueue, TurnPlayback
from engine.audio.pcm import to_int16
from engine.errors import ConfigError

_BLOCK_S = 0.010
_RESYNC_S = 0.25  # a clock this late (a stalled machine) restarts instead of racing to catch up


class FileSink(AudioSink):
    """Records reply audio (mono float32) at one rate; optionally paced like a speaker."""

    def __init__(self, path: str | Path | None, realtime: bool, sample_rate: int | None = None) -> None:
        """``sample_rate`` None takes the rate of the first chunk played."""
        if sample_rate is not None and sample_rate <= 0:
            raise ConfigError(f"FileSink sample_rate must be positive; got {sample_rate}")
        self.path = None if path is None else Path(path)
        self.realtime = realtime
        self.sample_rate = sample_rate
        self._lock = threading.Lock()
        self._queue: PlaybackQueue | None = None
        self._recorded: list[np.ndarray] = []
        self._n_recorded = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._opened = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Ready to play (the clock thread starts with the first chunk's rate known)."""
        if self.path is not None and not self.path.parent.is_dir():
            raise ConfigError(f"cannot write {self.path}: folder {self.path.parent} does not exist")
        self._opened = True
        if self.sample_rate is not None:
            self._start(self.sample_rate)

    def _start(self, rate: int) -> PlaybackQueue:
        """The queue (made at ``rate``, and its clock started, on the first call)."""
        with self._lock:
            if self._queue is not None:
                return self._queue
            self.sample_rate = rate
            queue = self._queue = PlaybackQueue(rate)
            if self.realtime:
                self._thread = threading.Thread(target=self._clock, args=(queue,),
                                                name="parley-filesink-clock", daemon=True)
                self._thread.start()
            return queue

    def close(self) -> None:
        """Stop the clock (dropping what is unplayed), join it, write the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._queue is not None:
            self._queue.flush()
        if self.path is not None:
            self._write()

    def _write(self) -> None:
        import soundfile as sf

        try:
            # int16 samples are written as they are: the scale rule is engine.audio.pcm's.
            sf.write(str(self.path), to_int16(self.audio), self.sample_rate or 16000, subtype="PCM_16")
        except (OSError, sf.LibsndfileError) as exc:
            raise ConfigError(f"cannot write the reply audio to {self.path}: {exc}") from None

    # ------------------------------------------------------------------ the clock
    def _clock(self, queue: PlaybackQueue) -> None:
        frames = max(1, round(queue.sample_rate * _BLOCK_S))
        block_s = frames / queue.sample_rate
        out = np.zeros(frames, dtype=np.float32)
        t0 = time.perf_counter()
        k = 0
        while not self._stop.is_set():
            due = t0 + k * block_s
            wait = due - time.perf_counter()
            if wait > 0:
                if self._stop.wait(wait):
                    break
            elif -wait > _RESYNC_S:
                t0, k, due = time.perf_counter(), 0, time.perf_counter()
            # The block [due, due + block_s) is what the listener hears from ``due`` on.
            n = queue.fill(out, due)
            if n:
                self._record(out[:n].copy())
            k += 1

    def _record(self, samples: np.ndarray) -> None:
        with self._lock:
            self._recorded.append(samples)
            self._n_recorded += samples.size

    # ------------------------------------------------------------------ sink API
    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Queue (paced) or record (unpaced) mono ``audio``, resampled to the sink's rate."""
        if not self._opened or self._closed:
            raise RuntimeError("FileSink.play() called while the sink is not open")
        from engine.audio.decode import resample

        queue = self._start(self.sample_rate or sample_rate)
        samples = resample(audio, sample_rate, queue.sample_rate)
        if samples is audio:
            samples = samples.copy()
        queue.put(samples, turn_id)
        if not self.realtime:  # unpaced: "heard" the moment it is played, all of it
            scratch = np.empty(samples.size, dtype=np.float32)
            queue.fill(scratch, time.perf_counter())
            self._record(scratch)

    def flush(self) -> int:
        """Barge-in: drop what has not been played yet; returns samples dropped."""
        return 0 if self._queue is None else self._queue.flush()

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued has been played (or timeout). True if idle."""
        if not self.realtime or self._queue is None:
            return True
        return self._queue.wait_idle(timeout)

    @property
    def is_playing(self) -> bool:
        """True while queued audio remains to be heard (always False unpaced)."""
        return self.realtime and self._queue is not None and self._queue.busy

    def first_heard(self, turn_id: int) -> float | None:
        """perf_counter() when the first sample of ``turn_id`` was heard (unpaced: played)."""
        return None if self._queue is None else self._queue.first_heard(turn_id)

    def history(self) -> list[TurnPlayback]:
        """Per turn: first heard, samples played and flushed (at ``sample_rate``)."""
        return [] if self._queue is None else self._queue.history()

    @property
    def audio(self) -> np.ndarray:
        """Everything played so far, concatenated (float32 mono at ``sample_rate``)."""
        with self._lock:
            if not self._recorded:
                return np.zeros(0, dtype=np.float32)
            return np.concatenate(self._recorded)

    @property
    def seconds_played(self) -> float:
        """Seconds of audio played (recorded) so far."""
        return self._n_recorded / self.sample_rate if self.sample_rate else 0.0
