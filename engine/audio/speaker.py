"""The speaker: a sounddevice OutputStream pulling reply audio from a PlaybackQueue.

``play`` resamples on the caller's thread and queues; the callback only copies one
block out of the queue (zeros on underrun) and notes, per turn, when its first sample
reaches the DAC (``outputBufferDacTime`` mapped onto ``perf_counter``).
"""

from __future__ import annotations

import time

import numpy as np

from engine.audio.base import PIPELINE_RATE
from engine.audio.buffer import PlaybackQueue, TurnPlayback
from engine.audio.sd_devices import (AudioDevice, describe_devices, import_sounddevice,
                                     list_audio_devices, resolve_device)
from engine.errors import AudioDeviceError


class SpeakerSink:
    """An output device as an AudioSink. Mono replies go to every channel of the card."""

    def __init__(self, device: str | int | None = "default", block_ms: int = 16,
                 sample_rate: int | None = None) -> None:
        """``sample_rate`` forces the card's rate; None uses its native rate (or a common one)."""
        self.device_setting = device
        self.block_ms = block_ms
        self.requested_rate = sample_rate
        self.device: AudioDevice | None = None
        self.sample_rate: int | None = None
        self.channels: int | None = None
        self._stream = None
        self._queue: PlaybackQueue | None = None
        self._latency = 0.0
        self._underflows = 0

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Open and start the output stream; AudioDeviceError names it and lists outputs."""
        if self._stream is not None:
            return
        sd = import_sounddevice()
        self.device = resolve_device(self.device_setting, "output")
        rate, channels = self._choose_format(sd, self.device)
        self._queue = PlaybackQueue(rate)
        try:
            stream = sd.OutputStream(device=self.device.index, samplerate=rate, channels=channels,
                                     dtype="float32", blocksize=max(1, round(rate * self.block_ms / 1000)),
                                     callback=self._callback)
            self._latency = float(stream.latency)
            stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(
                f"cannot open speaker {self.device.label} at {rate} Hz, {channels} ch: {exc}; "
                f"{describe_devices(list_audio_devices()[1], 'output')}"
            ) from None
        self.sample_rate, self.channels, self._stream = rate, channels, stream

    def close(self) -> None:
        """Drop what is queued, stop and release the stream. Idempotent."""
        stream, self._stream = self._stream, None
        if stream is not None:
            if self._queue is not None:
                self._queue.flush()
            try:
                stream.stop()
            finally:
                stream.close()

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

    # ------------------------------------------------------------------ callback
    def _callback(self, outdata, frames, time_info, status) -> None:
        now = time.perf_counter()
        if status.output_underflow:
            self._underflows += 1
        ahead = time_info.outputBufferDacTime - time_info.currentTime
        if time_info.outputBufferDacTime <= 0 or not 0.0 <= ahead < 2.0:
            ahead = self._latency  # the host gave no usable DAC time
        self._queue.fill(outdata[:, 0], now + ahead)
        if outdata.shape[1] > 1:
            outdata[:, 1:] = outdata[:, :1]

    # ------------------------------------------------------------------ sink API
    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """Queue float32 mono ``audio``; resampled here (caller's thread) to the card's rate."""
        if self._queue is None:
            raise RuntimeError("SpeakerSink.play() called before open()")
        from engine.audio.decode import resample

        samples = resample(audio, sample_rate, self._queue.sample_rate)
        if samples is audio:
            samples = samples.copy()  # the queue keeps it; the caller may reuse its array
        self._queue.put(samples, turn_id)

    def flush(self) -> int:
        """Barge-in: drop everything queued now; returns samples dropped (card rate).

        What the card already holds (one block plus its latency) still sounds.
        """
        return 0 if self._queue is None else self._queue.flush()

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued has been heard (or timeout). True if idle."""
        return True if self._queue is None else self._queue.wait_idle(timeout)

    @property
    def is_playing(self) -> bool:
        """True while queued or written audio remains to be heard."""
        return self._queue is not None and self._queue.busy

    def first_heard(self, turn_id: int) -> float | None:
        """perf_counter() time when the first sample of ``turn_id`` was (or will be) heard."""
        return None if self._queue is None else self._queue.first_heard(turn_id)

    def history(self) -> list[TurnPlayback]:
        """Per turn: first heard, samples played and flushed (at ``sample_rate``)."""
        return [] if self._queue is None else self._queue.history()

    @property
    def underflow_count(self) -> int:
        """Callbacks PortAudio flagged with output underflow (the card ran dry)."""
        return self._underflows

    @property
    def latency(self) -> float:
        """The stream's output latency in seconds, as PortAudio reports it."""
        return self._latency
