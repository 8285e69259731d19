"""A network client's audio as a pipeline unit's source and sink.

``StreamSource`` takes PCM16 at the client's rate (24 kHz) from the event loop thread,
resamples it to the pipeline's 16 kHz as it arrives and queues it for the VAD stage,
in order with the client's commit and clear requests (``InputMarker`` blocks). It never
blocks the loop: audio beyond the session's budget is refused, not waited for.

``StreamSink`` is the reverse: reply audio from the sink stage, resampled to 24 kHz
PCM16 and handed at once to a callback (which sends it), with a virtual playout clock
like a paced ``FileSink``: ``is_playing`` stays true until the audio sent would have been
heard at real time, which is what barge-in and ``first_heard`` (voice-to-voice) need.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSink, AudioSource, InputMarker
from engine.audio.pcm import from_pcm16, level, to_pcm16

CLIENT_RATE = 24000  # the Realtime API's audio/pcm rate, both directions


class StreamSource(AudioSource):
    """An ``AudioSource`` fed by a network client; see the module doc.

    ``push_pcm16``, ``commit`` and ``clear`` are called from one thread (the event loop);
    ``read`` from the VAD stage's thread. ``on_marker(marker)`` is called from the
    reading thread as a commit or clear block is read, after every block before it was
    processed: events the VAD emitted for earlier audio were all emitted by then.
    """

    sample_rate = PIPELINE_RATE

    def __init__(self, max_buffer_s: float = 15.0, max_blocks: int = 4096,
                 input_rate: int = CLIENT_RATE,
                 on_marker: Callable[[InputMarker], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.input_rate = input_rate
        self.max_buffer_s = max_buffer_s
        self.max_blocks = max_blocks
        self._on_marker = on_marker
        self._clock = clock
        self._cond = threading.Condition()
        self._blocks: deque[AudioBlock] = deque()
        self._buffered = 0  # pipeline-rate samples queued, not yet read
        self._resampler = self._new_resampler()
        self._closed = False
        self._refused = 0
        self._latest: np.ndarray | None = None
        self.received_s = 0.0  # client audio accepted, in seconds
        self.t_first: float | None = None  # capture time of the first sample queued

    def _new_resampler(self):
        import soxr

        return soxr.ResampleStream(self.input_rate, PIPELINE_RATE, 1, dtype="float32", quality="HQ")

    # ------------------------------------------------------------------ producer
    def push_pcm16(self, pcm: bytes) -> bool:
        """Queue client audio; False (and counted) if it would exceed the budget.

        Raises ValueError for an odd number of bytes. Never blocks.
        """
        samples = from_pcm16(pcm)
        if samples.size == 0:
            return True
        incoming = samples.size * PIPELINE_RATE / self.input_rate
        with self._cond:
            if (self._buffered + incoming > self.max_buffer_s * PIPELINE_RATE
                    or len(self._blocks) >= self.max_blocks):
                self._refused += 1
                return False
        self.received_s += samples.size / self.input_rate
        self._queue_audio(self._resampler.resample_chunk(samples))
        return True

    def commit(self) -> None:
        """End the user's turn after the audio sent so far (the resampler's tail too)."""
        self._queue_audio(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        self._resampler = self._new_resampler()
        self._queue_marker(InputMarker.COMMIT)

    def clear(self) -> None:
        """Forget the audio of the turn in progress, queued or already heard by the VAD.

        Audio still queued after the last commit is dropped here; the clear block tells
        the VAD to drop what it already took.
        """
        self._resampler = self._new_resampler()
        with self._cond:
            while self._blocks and self._blocks[-1].marker is None:
                self._buffered -= self._blocks.pop().samples.size
        self._queue_marker(InputMarker.CLEAR)

    def _queue_audio(self, out: np.ndarray) -> None:
        if out.size == 0:
            return
        out = np.ascontiguousarray(out, dtype=np.float32)
        # Arrival time minus duration: for a client streaming at real time, the capture
        # time of the block's first sample.
        block = AudioBlock(out, self._clock() - out.size / PIPELINE_RATE)
        if self.t_first is None:
            self.t_first = block.t_start
        with self._cond:
            if self._closed:
                return
            self._blocks.append(block)
            self._buffered += out.size
            self._latest = out
            self._cond.notify()

    def _queue_marker(self, marker: InputMarker) -> None:
        with self._cond:
            if self._closed:
                return
            self._blocks.append(AudioBlock(np.zeros(0, np.float32), self._clock(), marker))
            self._cond.notify()

    # ------------------------------------------------------------------ AudioSource
    def open(self) -> None:
        """Nothing to start: audio arrives when the client sends it."""

    def close(self) -> None:
        """Stop delivering blocks and wake the reader. Idempotent."""
        with self._cond:
            self._closed = True
            self._blocks.clear()
            self._buffered = 0
            self._cond.notify_all()

    def read(self, timeout: float) -> AudioBlock | None:
        """The next block, waiting up to ``timeout``; None if none came or once closed."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not self._blocks and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            if self._closed:
                return None
            block = self._blocks.popleft()
            self._buffered -= block.samples.size
        if block.marker is not None and self._on_marker is not None:
            self._on_marker(block.marker)
        return block

    @property
    def finished(self) -> bool:
        """True once closed: a client's stream has no end of its own."""
        return self._closed

    @property
    def overflow_count(self) -> int:
        """Appends refused because the session's buffer was full."""
        return self._refused

    @property
    def level(self) -> float:
        """RMS of the latest block queued, 0..1."""
        latest = self._latest
        return 0.0 if latest is None else level(latest)

    @property
    def buffered_s(self) -> float:
        """Seconds of audio queued and not yet read by the VAD."""
        return max(0, self._buffered) / PIPELINE_RATE

    @property
    def buffered_blocks(self) -> int:
        """Blocks (audio and markers) waiting for the VAD: the source stage's queue meter."""
        return len(self._blocks)

    @property
    def buffer_capacity(self) -> int:
        """The most blocks that may wait."""
        return self.max_blocks


class StreamSink(AudioSink):
    """An ``AudioSink`` that sends reply audio as PCM16 at ``rate``; see the module doc.

    ``on_audio(turn_id, pcm)`` is called from the sink stage's thread, inside ``play``:
    it must return at once (queue the bytes for the event loop). Replies longer than
    ``max_piece_s`` are sent in pieces of that length.
    """

    def __init__(self, on_audio: Callable[[int, bytes], None], rate: int = CLIENT_RATE,
                 max_piece_s: float = 0.5, clock: Callable[[], float] = time.perf_counter) -> None:
        self.on_audio = on_audio
        self.rate = rate
        self._piece = max(1, round(max_piece_s * rate))
        self._clock = clock
        self._lock = threading.Lock()
        self._t_end = 0.0  # clock time at which the last sample sent has been heard
        self._first: dict[int, float] = {}
        self._closed = False
        self.samples_sent = 0

    def open(self) -> None:
        """Nothing to open: the client's connection is the speaker."""

    def close(self) -> None:
        """Send nothing more. Idempotent."""
        self._closed = True

    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Resample to ``rate``, send it as PCM16 now, and advance the playout clock."""
        if self._closed:
            return  # the unit is stopping: its client is gone
        from engine.audio.decode import resample

        samples = resample(audio, sample_rate, self.rate)
        if samples.size == 0:
            return
        with self._lock:
            now = self._clock()
            start = max(now, self._t_end)
            self._t_end = start + samples.size / self.rate
            self._first.setdefault(turn_id, start)
            if len(self._first) > 64:  # turns only grow: keep the latest ones
                for old in sorted(self._first)[:-32]:
                    del self._first[old]
            self.samples_sent += samples.size
        for at in range(0, samples.size, self._piece):
            self.on_audio(turn_id, to_pcm16(samples[at:at + self._piece]))

    def flush(self) -> int:
        """Barge-in: the client should stop playing; returns the samples it had not heard."""
        with self._lock:
            now = self._clock()
            unheard = max(0.0, self._t_end - now)
            self._t_end = min(self._t_end, now)
        return round(unheard * self.rate)

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything sent would have been heard (or timeout). True if idle."""
        deadline = self._clock() + max(0.0, timeout)
        while self.is_playing:
            left = deadline - self._clock()
            if left <= 0:
                return False
            time.sleep(min(0.01, left))
        return True

    @property
    def is_playing(self) -> bool:
        """True until the audio sent would have finished playing at real time."""
        return self._clock() < self._t_end

    def first_heard(self, turn_id: int) -> float | None:
        """Clock time at which the first sample of ``turn_id`` starts playing."""
        with self._lock:
            return self._first.get(turn_id)
