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
import threading
import time

import numpy as np

from engine.audio.base import PIPELINE_RATE
from engine.audio.buffer import PlaybackQueue, TurnPlayback
from engine.audio.health import (RETRY_S, STALL_S, STREAMS, DeviceState, HealthLog, HealthReport,
                                 Reopener, release_stream, stream_closed, stream_opened)
from engine.audio.sd_devices import (AudioDevice, describe_devices, import_sounddevice,
                                     list_audio_devices, resolve_device)
from engine.errors import AudioDeviceError


class _Output:
    """One open output stream and the queue its callback drains."""

    __slots__ = ("stream", "device", "rate", "channels", "queue", "latency", "ended")

    def __init__(self, device: AudioDevice, rate: int, channels: int, queue: PlaybackQueue) -> None:
        self.stream = None
        self.device = device
        self.rate = rate
        self.channels = channels
        self.queue = queue
        self.latency = 0.0
        self.ended = False  # PortAudio's finished callback ran: this stream stopped

    def on_finished(self) -> None:
        self.ended = True


class SpeakerSink:
    """An output device as an AudioSink. Mono replies go to every channel of the card."""

    def __init__(self, device: str | int | None = "default", block_ms: int = 16,
                 sample_rate: int | None = None) -> None:
        """``sample_rate`` forces the card's rate; None uses its native rate (or a common one)."""
        self.device_setting = device
        self.block_ms = block_ms
        self.requested_rate = sample_rate
        self.health = HealthLog("speaker")
        self._lock = threading.Lock()
        self._output: _Output | None = None
        self._open = False
        self._lost = False
        self._reopener: Reopener | None = None
        self._underflows = 0
        self._callbacks = 0  # a counter, the callback's only bookkeeping besides the queue
        self._seen_callbacks = 0
        self._t_callback = 0.0  # monotonic time a new callback was last seen
        self._dropped_samples = 0  # reply samples dropped because the device was lost

    # ------------------------------------------------------------------ lifecycle
    @property
    def device(self) -> AudioDevice | None:
        output = self._output
        return None if output is None else output.device

    @property
    def sample_rate(self) -> int | None:
        output = self._output
        return None if output is None else output.rate

    @property
    def channels(self) -> int | None:
        output = self._output
        return None if output is None else output.channels

    @property
    def _queue(self) -> PlaybackQueue | None:
        output = self._output
        return None if output is None else output.queue

    def open(self) -> None:
        """Open and start the output stream; AudioDeviceError names it and lists outputs."""
        if self._open:
            return
        with STREAMS.lock:
            output = self._start_output(None)
        with self._lock:
            self._output, self._open, self._lost = output, True, False
            self._seen_callbacks, self._t_callback = self._callbacks, time.monotonic()

    def close(self) -> None:
        """Drop what is queued, stop and release the stream (and stop reopening a lost
        one). Idempotent."""
        with self._lock:
            was_open, self._open = self._open, False
            reopener, self._reopener = self._reopener, None
            lost = self._lost
        if reopener is not None:
            reopener.stop()
        output = self._output
        if not was_open or output is None or lost:
            return  # a lost stream was released when it was lost
        output.queue.flush()
        try:
            output.stream.stop()
        finally:
            output.stream.close()
            stream_closed()

    def _start_output(self, queue: PlaybackQueue | None) -> _Output:
        """Open and start a stream on the device the setting names now; ``queue`` is kept
        if the new stream runs at its rate."""
        sd = import_sounddevice()
        device = resolve_device(self.device_setting, "output")
        rate, channels = self._choose_format(sd, device)
        if queue is None or queue.sample_rate != rate:
            queue = PlaybackQueue(rate)
        output = _Output(device, rate, channels, queue)
        try:
            stream = sd.OutputStream(device=device.index, samplerate=rate, channels=channels,
                                     dtype="float32", blocksize=max(1, round(rate * self.block_ms / 1000)),
                                     callback=functools.partial(self._callback, output),
                                     finished_callback=output.on_finished)
            output.latency = float(stream.latency)
            stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(
                f"cannot open speaker {device.label} at {rate} Hz, {channels} ch: {exc}; "
                f"{describe_devices(list_audio_devices()[1], 'output')}"
            ) from None
        output.stream = stream
        stream_opened()
        return output

    def _choose_format(self, sd, device: AudioDevice) -> tuple[int, int]:
        native = round(device.default_rate)
        rates = [self.requested_rate] if self.requested_rate else [native, 48000, 44100, PIPELINE_RATE]
        errors = []
        for rate in dict.fromkeys(rates):
            for channels in dict.fromkeys((min(device.channels, 2), 1)):
                try:
                    sd.check_output_settings(device=device.index, channels=channels,
                                             dtype="float32", samplerate=rate)
                    return rate, channels
                except (sd.PortAudioError, ValueError) as exc:
                    errors.append(f"{rate} Hz x {channels} ch: {exc}")
        raise AudioDeviceError(
            f"speaker {device.label} supports none of the formats tried ({'; '.join(errors)}); "
            f"{describe_devices(list_audio_devices()[1], 'output')}"
        )

    def _name(self) -> str:
        device = self.device
        return f'speaker "{device.name}"' if device is not None else f"speaker {self.device_setting!r}"

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
    def _watch(self) -> bool:
        """Notice a stream that stopped or stalled; True while the device is usable."""
        output = self._output
        if output is None or not self._open:
            return output is not None
        if self._lost:
            return False
        if output.ended or not output.stream.active:
            self._lose(output, "its stream stopped: the device was unplugged, or the sound "
                               "system ended the stream")
            return False
        now = time.monotonic()
        callbacks = self._callbacks
        if callbacks != self._seen_callbacks:
            self._seen_callbacks, self._t_callback = callbacks, now
        elif now - self._t_callback > STALL_S:
            self._lose(output, f"it took no audio for {now - self._t_callback:.0f} s")
            return False
        return True

    def _lose(self, output: _Output, reason: str) -> None:
        with self._lock:
            if self._lost or not self._open or output is not self._output:
                return
            self._lost = True
            self._reopener = Reopener("parley-speaker-reopen", self._try_reopen)
            reopener = self._reopener
        output.queue.flush()  # nothing queued can play now: nobody may wait for it
        if release_stream(output.stream, "speaker"):
            stream_closed()
        self.health.set(DeviceState.LOST,
                        f"{self._name()} was lost ({reason}); replies are not heard until it "
                        f"is back or another is chosen, and it is reopened every {RETRY_S:g} s")
        with self._lock:
            if self._reopener is reopener:  # not closed meanwhile
                reopener.start()

    def _try_reopen(self) -> bool:
        """One attempt, on the reopener's thread: True once playing again (or closed)."""
        if not self._open:
            return True
        with STREAMS.lock:
            if STREAMS.can_refresh():  # no stream is open: a re-scan finds a replugged card
                list_audio_devices(refresh=True)
            try:
                output = self._start_output(self._queue)
            except AudioDeviceError as exc:
                import logging

                logging.getLogger("parley.audio").debug("reopening the speaker failed: %s", exc)
                return False
        with self._lock:
            keep = self._open
            if keep:
                self._seen_callbacks, self._t_callback = self._callbacks, time.monotonic()
                self._output, self._lost = output, False
        if not keep:  # closed meanwhile: this stream is nobody's
            if release_stream(output.stream, "speaker"):
                stream_closed()
            return True
        self.health.set(DeviceState.OK, f"{self._name()} is back; replies are heard again")
        return True

    def poll_health(self) -> list[HealthReport]:
        """Check the device now and return its reports since the last call (one reader)."""
        self._watch()
        return self.health.drain()

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
    def lost(self) -> bool:
        """True while the device is lost (replies dropped, reopening is tried)."""
        return self._lost

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
        output = self._output
        return 0.0 if output is None else output.latency
