"""The speaker: a sounddevice OutputStream pulling reply audio from a PlaybackQueue.

``play`` resamples on the caller's thread and queues; the callback only copies one
block out of the queue (zeros on underrun), counts itself, and notes, per turn, when its
first sample reaches the DAC (``outputBufferDacTime`` mapped onto ``perf_counter``).

The stream is watched where audio is queued or asked about (``play``, ``is_playing``,
``wait_idle``, ``poll_health``; never in the callback): a stream that stopped (unplugged,
or ended by the sound system) or one whose callbacks stopped for ``STALL_S`` is released
and reported as lost (``engine.audio.health``). While lost, replies are dropped (so
nothing waits for audio that cannot play), and a ``Reopener`` thread opens the device
again every ``RETRY_S`` until that works or the sink is closed.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioSink
from engine.audio.buffer import PlaybackQueue, TurnPlayback
from engine.audio.health import STALL_S
from engine.audio.reopening import DeviceStream, ReopeningDevice
from engine.audio.sd_devices import AudioDevice, DeviceKind


class _Output(DeviceStream):
    """One open output stream and the queue its callback drains."""

    __slots__ = ("queue", "latency")

    def __init__(self, device: AudioDevice, rate: int, channels: int, queue: PlaybackQueue) -> None:
        super().__init__(device, rate, channels)
        self.queue = queue
        self.latency = 0.0


class SpeakerSink(ReopeningDevice[_Output], AudioSink):
    """An output device as an AudioSink. Mono replies go to every channel of the card."""

    what = "speaker"
    kind = DeviceKind.OUTPUT
    tag = "speaker"
    while_lost = "replies are not heard"
    when_back = "replies are heard again"

    def __init__(self, device: str | int | None = "default", block_ms: int = 16,
                 sample_rate: int | None = None) -> None:
        """``sample_rate`` forces the card's rate; None uses its native rate (or a common one)."""
        super().__init__(device, block_ms, sample_rate)
        self._underflows = 0
        self._callbacks = 0  # a counter, the callback's only bookkeeping besides the queue
        self._seen_callbacks = 0
        self._t_callback = 0.0  # monotonic time a new callback was last seen
        self._dropped_samples = 0  # reply samples dropped because the device was lost

    @property
    def sample_rate(self) -> int | None:
        output = self._stream
        return None if output is None else output.rate

    @property
    def _queue(self) -> PlaybackQueue | None:
        output = self._stream
        return None if output is None else output.queue

    # ------------------------------------------------------------------ the stream
    def _formats(self, device: AudioDevice) -> tuple[list[int], list[int]]:
        native = round(device.default_rate)
        rates = [self.requested_rate] if self.requested_rate else [native, 48000, 44100, PIPELINE_RATE]
        return rates, [min(device.channels, 2), 1]

    def _start_stream(self, sd, device: AudioDevice, rate: int, channels: int,
                      previous: _Output | None) -> _Output:
        """A stream at ``rate``; the queue of ``previous`` is kept if it runs at that rate."""
        queue = previous.queue if previous is not None and previous.queue.sample_rate == rate \
            else PlaybackQueue(rate)
        output = _Output(device, rate, channels, queue)
        stream = sd.OutputStream(device=device.index, samplerate=rate, channels=channels,
                                 dtype="float32", blocksize=max(1, round(rate * self.block_ms / 1000)),
                                 callback=functools.partial(self._callback, output),
                                 finished_callback=output.on_finished)
        output.latency = float(stream.latency)  # one number: the stream has one direction
        output.stream = stream
        stream.start()
        return output

    def _on_reopened(self, old: _Output | None, new: _Output) -> None:
        self._seen_callbacks, self._t_callback = self._callbacks, time.monotonic()

    def _on_lost(self, stream: _Output) -> None:
        stream.queue.flush()  # nothing queued can play now: nobody may wait for it

    def _on_close(self, stream: _Output) -> None:
        stream.queue.flush()

    # ------------------------------------------------------------------ callback
    def _callback(self, output: _Output, outdata, frames, time_info, status) -> None:
        now = time.perf_counter()
        self._callbacks += 1
        if status.output_underflow:
            self._underflows += 1
        ahead = time_info.outputBufferDacTime - time_info.currentTime
        if time_info.outputBufferDacTime <= 0 or not 0.0 <= ahead < 2.0:
            ahead = output.latency  # the host gave no usable DAC time
        output.queue.fill(outdata[:, 0], now + ahead)
        if outdata.shape[1] > 1:
            outdata[:, 1:] = outdata[:, :1]

    # ------------------------------------------------------------------ health
    def watch(self) -> None:
        self._watch()

    def _watch(self) -> bool:
        """Notice a stream that stopped or stalled; True while the device is usable."""
        output = self._stream
        if output is None or not self._open:
            return output is not None
        if self._lost or not self.check_stream(output):
            return False
        now = time.monotonic()
        callbacks = self._callbacks
        if callbacks != self._seen_callbacks:
            self._seen_callbacks, self._t_callback = callbacks, now
        elif now - self._t_callback > STALL_S:
            self.lose(output, f"it took no audio for {now - self._t_callback:.0f} s")
            return False
        return True

    # ------------------------------------------------------------------ sink API
    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Queue float32 mono ``audio``; resampled here (caller's thread) to the card's rate.

        While the device is lost the audio is dropped (and counted).
        """
        queue = self._queue
        if queue is None:
            raise RuntimeError("SpeakerSink.play() called before open()")
        if not self._watch():
            self._dropped_samples += audio.size
            return
        from engine.audio.decode import resample

        samples = resample(audio, sample_rate, queue.sample_rate)
        if samples is audio:
            samples = samples.copy()  # the queue keeps it; the caller may reuse its array
        queue.put(samples, turn_id)

    def flush(self) -> int:
        """Barge-in: drop everything queued now; returns samples dropped (card rate).

        What the card already holds (one block plus its latency) still sounds.
        """
        queue = self._queue
        return 0 if queue is None else queue.flush()

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued has been heard (or timeout). True if idle.

        A lost device is idle: what it held was dropped.
        """
        deadline = time.perf_counter() + max(0.0, timeout)
        while True:
            queue = self._queue
            if queue is None or not self._watch():
                return True
            if queue.wait_idle(min(0.25, max(0.0, deadline - time.perf_counter()))):
                return True
            if time.perf_counter() >= deadline:
                return False

    @property
    def is_playing(self) -> bool:
        """True while queued or written audio remains to be heard (never while lost)."""
        queue = self._queue
        return queue is not None and queue.busy and self._watch()

    def first_heard(self, turn_id: int) -> float | None:
        """perf_counter() time when the first sample of ``turn_id`` was (or will be) heard."""
        queue = self._queue
        return None if queue is None else queue.first_heard(turn_id)

    def history(self) -> list[TurnPlayback]:
        """Per turn: first heard, samples played and flushed (at ``sample_rate``)."""
        queue = self._queue
        return [] if queue is None else queue.history()

    @property
    def dropped_samples(self) -> int:
        """Reply samples (at their own rate) dropped because the device was lost."""
        return self._dropped_samples

    @property
    def underflow_count(self) -> int:
        """Callbacks PortAudio flagged with output underflow (the card ran dry)."""
        return self._underflows

    @property
    def latency(self) -> float:
        """The stream's output latency in seconds, as PortAudio reports it."""
        output = self._stream
        return 0.0 if output is None else output.latency
