"""The two buffers between the sound card's clock and the pipeline's threads.

``DropOldestBuffer`` is the only thing a capture callback touches: ``push`` copies the
block and returns at once; when the consumer falls behind the oldest block is dropped and
counted, so the newest audio is always what the pipeline hears next.

``PlaybackQueue`` is the other direction: reply chunks queued by ``play`` and pulled in
card-sized blocks by a playback clock (the speaker's callback, or the file sink's
thread), with a record per turn of when it was first heard and how much of it played.
Every operation holds the lock for O(1) work or one block's copy, never longer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from engine.audio.base import AudioBlock
from engine.audio.pcm import level

_KEEP_RECORDS = 256  # turns whose playback records a queue keeps (a long session stays small)
_PRUNE_EVERY = 64


class DropOldestBuffer:
    """A bounded FIFO of audio blocks that never blocks the producer.

    Blocks keep whatever rate and size the producer pushes (the microphone pushes the
    card's native rate and resamples after ``pop``).
    """

    def __init__(self, max_blocks: int) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
        self.max_blocks = max_blocks
        self._blocks: deque[AudioBlock] = deque(maxlen=max_blocks)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._overflows = 0
        self._pushed = 0
        self._latest: np.ndarray | None = None

    def push(self, samples: np.ndarray, t_start: float) -> None:
        """Copy ``samples`` (1-D, or frames x channels, down-mixed) in; drop the oldest if full."""
        if samples.ndim == 2:
            if samples.shape[1] == 1:
                block = samples[:, 0].astype(np.float32, copy=True)
            else:
                block = samples.mean(axis=1, dtype=np.float32)
        else:
            block = np.array(samples, dtype=np.float32, copy=True)
        item = AudioBlock(block, t_start)
        with self._lock:
            if len(self._blocks) == self.max_blocks:
                self._overflows += 1  # the deque's maxlen drops the oldest on append
            self._blocks.append(item)
            self._pushed += 1
            self._latest = block
        self._ready.set()

    def pop(self, timeout: float) -> AudioBlock | None:
        """The oldest block kept, waiting up to ``timeout`` seconds; None if none came."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                if self._blocks:
                    return self._blocks.popleft()
                # Cleared under the lock, so a push after this point sets it again.
                self._ready.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._ready.wait(remaining)

    def clear(self) -> int:
        """Drop every block kept (not counted as overflow). Returns how many."""
        with self._lock:
            count = len(self._blocks)
            self._blocks.clear()
            self._ready.clear()
        return count

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def overflow_count(self) -> int:
        """Blocks dropped because the buffer was full when a new one arrived."""
        return self._overflows

    @property
    def pushed_count(self) -> int:
        """Blocks pushed since creation, kept or dropped."""
        return self._pushed

    @property
    def level(self) -> float:
        """RMS of the latest block pushed, 0..1, 0 before any (computed here, not in push).

        Clamped to the scale: a block holding NaN reads 0, one of infinities or of values
        far beyond full scale reads 1 (the microphone reports such blocks separately).
        """
        latest = self._latest
        return 0.0 if latest is None else level(latest)


@dataclass(frozen=True, slots=True)
class TurnPlayback:
    """What a sink did with one turn's audio (samples at the sink's rate)."""

    turn_id: int
    t_first_heard: float | None  # perf_counter() of its first sample at the speaker
    samples_played: int
    samples_flushed: int
    sample_rate: int


class _Chunk:
    __slots__ = ("samples", "turn_id", "offset")

    def __init__(self, samples: np.ndarray, turn_id: int) -> None:
        self.samples = samples
        self.turn_id = turn_id
        self.offset = 0


class _Record:
    __slots__ = ("t_first", "played", "flushed")

    def __init__(self) -> None:
        self.t_first: float | None = None
        self.played = 0
        self.flushed = 0


class PlaybackQueue:
    """Queued reply audio at one rate, pulled block by block by a playback clock."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._lock = threading.Lock()
        self._chunks: deque[_Chunk] = deque()
        self._queued = 0
        self._records: dict[int, _Record] = {}
        self._t_heard_end = 0.0  # perf_counter() when the last sample written is heard

    def put(self, samples: np.ndarray, turn_id: int) -> None:
        """Queue float32 mono samples at ``sample_rate`` (taken as is, not copied)."""
        with self._lock:
            if turn_id not in self._records:
                self._records[turn_id] = _Record()
                if len(self._records) > _KEEP_RECORDS + _PRUNE_EVERY:
                    self._prune_records()
            if samples.size:
                self._chunks.append(_Chunk(samples, turn_id))
                self._queued += samples.size

    def _prune_records(self) -> None:
        """Forget the oldest turns' records (a long session), never one still queued."""
        queued = {chunk.turn_id for chunk in self._chunks}
        for turn_id in list(self._records)[:len(self._records) - _KEEP_RECORDS]:
            if turn_id not in queued:
                del self._records[turn_id]

    def fill(self, out: np.ndarray, t_heard: float) -> int:
        """Write the next ``len(out)`` samples into ``out`` (zeros past the queue's end).

        ``t_heard`` is when ``out[0]`` reaches the listener. Returns how many queued
        samples were written; they form the prefix ``out[:n]``. Safe in an audio callback:
        no allocation beyond a new turn's first timestamp.
        """
        frames = len(out)
        pos = 0
        rate = self.sample_rate
        with self._lock:
            while pos < frames and self._chunks:
                chunk = self._chunks[0]
                take = min(frames - pos, chunk.samples.size - chunk.offset)
                out[pos:pos + take] = chunk.samples[chunk.offset:chunk.offset + take]
                record = self._records[chunk.turn_id]
                if record.t_first is None:
                    record.t_first = t_heard + pos / rate
                record.played += take
                chunk.offset += take
                pos += take
                self._queued -= take
                if chunk.offset == chunk.samples.size:
                    self._chunks.popleft()
            if pos:
                self._t_heard_end = t_heard + pos / rate
        out[pos:] = 0.0
        return pos

    def flush(self) -> int:
        """Drop everything queued now; returns the samples dropped."""
        with self._lock:
            dropped = self._queued
            for chunk in self._chunks:
                self._records[chunk.turn_id].flushed += chunk.samples.size - chunk.offset
            self._chunks.clear()
            self._queued = 0
            self._t_heard_end = min(self._t_heard_end, time.perf_counter())
        return dropped

    @property
    def queued_samples(self) -> int:
        """Samples queued and not yet written to the card."""
        return self._queued

    @property
    def busy(self) -> bool:
        """True while samples are queued or written but not yet heard."""
        return self._queued > 0 or time.perf_counter() < self._t_heard_end

    def first_heard(self, turn_id: int) -> float | None:
        """When the first sample of ``turn_id`` was (or will be) heard; None if not yet."""
        record = self._records.get(turn_id)
        return None if record is None else record.t_first

    def history(self) -> list[TurnPlayback]:
        """One record per turn queued (the latest ``_KEEP_RECORDS`` or so), in the order
        the turns were first queued."""
        with self._lock:
            return [TurnPlayback(turn_id, r.t_first, r.played, r.flushed, self.sample_rate)
                    for turn_id, r in self._records.items()]

    def wait_idle(self, timeout: float, poll_s: float = 0.005) -> bool:
        """Block until nothing is queued or unheard (or timeout). True if idle."""
        deadline = time.perf_counter() + max(0.0, timeout)
        while self.busy:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return False
            time.sleep(min(poll_s, remaining))
        return True
