"""The microphone: a sounddevice InputStream feeding a drop-oldest buffer.

The callback runs on PortAudio's thread and only copies (down-mixed) samples into the
buffer with the capture time of their first sample. Everything slower — checking the
samples, resampling the card's native rate to 16 kHz — happens in ``read``, on the
consumer's thread.

``read`` also watches the device (``engine.audio.health``): a block holding NaN, infinite
or far out-of-range samples becomes silence (the VAD never sees it) and is reported once
per episode; an open device that delivers nothing for ``STALL_S`` is reported; a stream
that stops (unplugged, or PortAudio ended it) is released, reported as lost, and reopened
every ``RETRY_S`` on a ``Reopener`` thread until that works or the source is closed.
Meanwhile ``read`` returns None on time, so the pipeline stays up. ``poll_health`` hands
the reports to the VAD stage, which emits them as ``AudioStatus`` events.
"""

from __future__ import annotations

import functools
import math
import threading
import time

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock
from engine.audio.buffer import DropOldestBuffer
from engine.audio.health import (RETRY_S, STALL_S, STREAMS, DeviceState, HealthLog, HealthReport,
                                 Reopener, SampleGuard, release_stream, stream_closed,
                                 stream_opened)
from engine.audio.sd_devices import (AudioDevice, describe_devices, import_sounddevice,
                                     list_audio_devices, resolve_device)
from engine.errors import AudioDeviceError, ConfigError


class StreamResampler:
    """Continuous resampling of a block stream to 16 kHz, with exact block timestamps.

    One soxr stream carries its filter state across blocks (no clicks at block edges).
    The stamp of each output block follows from the input block's end time minus what the
    filter still holds back (``delay``) and the output block's own length.
    """

    def __init__(self, from_rate: int, to_rate: int = PIPELINE_RATE) -> None:
        import soxr

        self.from_rate = from_rate
        self.to_rate = to_rate
        self._stream = soxr.ResampleStream(from_rate, to_rate, 1, dtype="float32", quality="HQ")

    def process(self, block: AudioBlock) -> AudioBlock | None:
        """Resample one input block; None while the filter is still filling."""
        out = self._stream.resample_chunk(block.samples)
        if out.size == 0:
            return None
        t_end_in = block.t_start + block.samples.size / self.from_rate
        held_back = self._stream.delay()
        t_start = t_end_in - (held_back + out.size) / self.to_rate
        return AudioBlock(np.ascontiguousarray(out, dtype=np.float32), t_start)

    def reset(self) -> None:
        """Forget the filter state (after a gap: dropped blocks are not continuous)."""
        self._stream.clear()


class _Capture:
    """One open input stream and what its callback fills."""

    __slots__ = ("stream", "device", "rate", "channels", "buffer", "resampler", "frame_s", "ended")

    def __init__(self, device: AudioDevice, rate: int, channels: int, buffer: DropOldestBuffer,
                 resampler: StreamResampler | None) -> None:
        self.stream = None
        self.device = device
        self.rate = rate
        self.channels = channels
        self.buffer = buffer
        self.resampler = resampler
        self.frame_s = 1.0 / rate
        self.ended = False  # PortAudio's finished callback ran: this stream stopped

    def on_finished(self) -> None:
        self.ended = True


class MicSource:
    """An input device as an AudioSource: 16 kHz mono blocks, never blocking the card."""

    sample_rate = PIPELINE_RATE

    def __init__(self, device: str | int | None = "default", capture_buffer_s: float = 2.0,
                 block_ms: int = 32, capture_rate: int | None = None) -> None:
        """``capture_rate`` forces the card's rate; None tries 16 kHz, then the native rate."""
        if not capture_buffer_s > 0:
            raise ConfigError(f"'audio.capture_buffer_s' must be > 0; got {capture_buffer_s!r}")
        if not isinstance(block_ms, int) or not 1 <= block_ms <= 1000:
            raise ConfigError(f"MicSource block_ms must be an integer from 1 to 1000; got {block_ms!r}")
        self.device_setting = device
        self.capture_buffer_s = capture_buffer_s
        self.block_ms = block_ms
        self.requested_rate = capture_rate
        self.health = HealthLog("microphone")
        self._guard = SampleGuard(self.health, self._name)
        self._lock = threading.Lock()
        self._capture: _Capture | None = None  # the open stream; kept (stopped) while lost
        self._open = False  # between open() and close()
        self._lost = False
        self._reopener: Reopener | None = None
        self._seen_overflows = 0
        self._status_overflows = 0
        self._overflow_base = 0  # overflows of the streams before a reopen
        self._seen_pushed = 0
        self._t_pushed = 0.0  # monotonic time the stall watch last saw a new block

    # ------------------------------------------------------------------ lifecycle
    @property
    def device(self) -> AudioDevice | None:
        capture = self._capture
        return None if capture is None else capture.device

    @property
    def capture_rate(self) -> int | None:
        capture = self._capture
        return None if capture is None else capture.rate

    @property
    def channels(self) -> int | None:
        capture = self._capture
        return None if capture is None else capture.channels

    def open(self) -> None:
        """Open and start the input stream; AudioDeviceError names the device and lists inputs."""
        if self._open:
            return
        with STREAMS.lock:
            capture = self._start_capture()
        with self._lock:
            self._capture, self._open, self._lost = capture, True, False
            self._seen_pushed, self._t_pushed = 0, time.monotonic()

    def close(self) -> None:
        """Stop and release the input stream (and stop reopening a lost one). Idempotent."""
        with self._lock:
            was_open, self._open = self._open, False
            reopener, self._reopener = self._reopener, None
            lost = self._lost
        if reopener is not None:
            reopener.stop()
        capture = self._capture
        if not was_open or capture is None or lost:
            return  # a lost stream was released when it was lost
        stream = capture.stream
        try:
            stream.stop()
        finally:
            stream.close()
            stream_closed()

    def _start_capture(self) -> _Capture:
        """Open and start a stream on the device the setting names now."""
        sd = import_sounddevice()
        device = resolve_device(self.device_setting, "input")
        rate, channels = self._choose_format(sd, device)
        blocksize = max(1, round(rate * self.block_ms / 1000))
        capture = _Capture(device, rate, channels,
                           DropOldestBuffer(max(2, math.ceil(self.capture_buffer_s * rate / blocksize))),
                           StreamResampler(rate) if rate != PIPELINE_RATE else None)
        try:
            stream = sd.InputStream(device=device.index, samplerate=rate, channels=channels,
                                    dtype="float32", blocksize=blocksize,
                                    callback=functools.partial(self._callback, capture),
                                    finished_callback=capture.on_finished)
            stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(
                f"cannot open microphone {device.label} at {rate} Hz, {channels} ch: {exc}; "
                f"{describe_devices(list_audio_devices()[0], 'input')}"
            ) from None
        capture.stream = stream
        stream_opened()
        return capture

    def _choose_format(self, sd, device: AudioDevice) -> tuple[int, int]:
        native = round(device.default_rate)
        rates = [self.requested_rate] if self.requested_rate else [PIPELINE_RATE, native]
        channel_options = sorted({1, min(device.channels, 2), device.channels})
        errors = []
        for rate in dict.fromkeys(rates):
            for channels in channel_options:
                try:
                    sd.check_input_settings(device=device.index, channels=channels,
                                            dtype="float32", samplerate=rate)
                    return rate, channels
                except (sd.PortAudioError, ValueError) as exc:
                    errors.append(f"{rate} Hz x {channels} ch: {exc}")
        raise AudioDeviceError(
            f"microphone {device.label} supports none of the formats tried "
            f"({'; '.join(errors)}); {describe_devices(list_audio_devices()[0], 'input')}"
        )

    def _name(self) -> str:
        device = self.device
        return f'microphone "{device.name}"' if device is not None else \
            f"microphone {self.device_setting!r}"

    # ------------------------------------------------------------------ callback
    def _callback(self, capture: _Capture, indata, frames, time_info, status) -> None:
        now = time.perf_counter()
        if status.input_overflow:
            self._status_overflows += 1
        # time_info is on the stream's clock; map it onto perf_counter through
        # currentTime. A host that reports no (or impossible) latency gets the minimum:
        # the block's last sample was captured just now.
        block_s = frames * capture.frame_s
        latency = time_info.currentTime - time_info.inputBufferAdcTime
        if time_info.inputBufferAdcTime <= 0 or not block_s <= latency < 1.0:
            latency = block_s
        capture.buffer.push(indata, now - latency)

    # ------------------------------------------------------------------ health
    def _watch(self, capture: _Capture) -> None:
        """Notice a stream that stopped, or one that delivers nothing (reader's thread)."""
        if self._lost or not self._open:
            return
        stream = capture.stream
        if capture.ended or not stream.active:
            self._lose(capture, "its stream stopped: the device was unplugged, or the sound "
                                "system ended the stream")
            return
        pushed = capture.buffer.pushed_count
        now = time.monotonic()
        if pushed != self._seen_pushed:
            self._seen_pushed, self._t_pushed = pushed, now
            if self.health.state is DeviceState.STALLED:
                self.health.set(DeviceState.OK, f"{self._name()} delivers audio again")
        elif now - self._t_pushed > STALL_S and self.health.state is not DeviceState.STALLED:
            self.health.set(DeviceState.STALLED,
                            f"{self._name()} delivered nothing for {now - self._t_pushed:.0f} s "
                            "(muted or disconnected?); still listening")

    def _lose(self, capture: _Capture, reason: str) -> None:
        with self._lock:
            if self._lost or not self._open or capture is not self._capture:
                return
            self._lost = True
            self._reopener = Reopener("parley-mic-reopen", self._try_reopen)
            reopener = self._reopener
        released = release_stream(capture.stream, "mic")
        if released:
            stream_closed()
        self.health.set(DeviceState.LOST,
                        f"{self._name()} was lost ({reason}); capture stopped, and it is "
                        f"reopened every {RETRY_S:g} s until it is back or another is chosen")
        with self._lock:
            if self._reopener is reopener:  # not closed meanwhile
                reopener.start()

    def _try_reopen(self) -> bool:
        """One attempt, on the reopener's thread: True once capturing again (or closed)."""
        if not self._open:
            return True
        with STREAMS.lock:
            if STREAMS.can_refresh():  # no stream is open: a re-scan finds a replugged card
                list_audio_devices(refresh=True)
            try:
                capture = self._start_capture()
            except AudioDeviceError as exc:
                log_retry("microphone", exc)
                return False
        with self._lock:
            if not self._open:  # closed meanwhile: this stream is nobody's
                keep = False
            else:
                keep = True
                old = self._capture
                if old is not None:
                    self._overflow_base += old.buffer.overflow_count
                self._seen_pushed, self._t_pushed = 0, time.monotonic()
                self._seen_overflows = 0
                self._capture, self._lost = capture, False
                self._guard.reset()
        if not keep:
            release_stream(capture.stream, "mic")
            stream_closed()
            return True
        self.health.set(DeviceState.OK, f"{self._name()} is back; capturing again")
        return True

    def poll_health(self) -> list[HealthReport]:
        """Check the device now and return its reports since the last call (one reader)."""
        capture = self._capture
        if capture is not None:
            self._watch(capture)
        return self.health.drain()

    # ------------------------------------------------------------------ consumer side
    def read(self, timeout: float) -> AudioBlock | None:
        """The next 16 kHz block (sizes follow the card), or None within ``timeout``.

        Invalid samples come out as silence; while the device is lost, None on time.
        """
        if self._capture is None:
            raise RuntimeError("MicSource.read() called before open()")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            capture = self._capture
            self._watch(capture)
            if self._lost or not self._open:  # nothing to read until it is back
                time.sleep(max(0.0, min(deadline - time.monotonic(), 0.05)))
                if time.monotonic() >= deadline:
                    return None
                continue
            block = capture.buffer.pop(max(0.0, min(deadline - time.monotonic(), 0.25)))
            if block is None:
                if time.monotonic() >= deadline:
                    return None
                continue
            samples = self._guard.check(block.samples, capture.rate)
            if samples is not block.samples:
                block = AudioBlock(samples, block.t_start)
            if capture.resampler is not None:
                overflows = capture.buffer.overflow_count
                if overflows != self._seen_overflows:
                    self._seen_overflows = overflows
                    capture.resampler.reset()
                block = capture.resampler.process(block)
            if block is not None:
                return block
            if time.monotonic() >= deadline:
                return None

    @property
    def finished(self) -> bool:
        """A microphone never finishes."""
        return False

    @property
    def lost(self) -> bool:
        """True while the device is lost (capture stopped, reopening is tried)."""
        return self._lost

    @property
    def overflow_count(self) -> int:
        """Blocks dropped from the capture buffer because nobody read them in time."""
        capture = self._capture
        return self._overflow_base + (0 if capture is None else capture.buffer.overflow_count)

    @property
    def input_overflows(self) -> int:
        """Callbacks PortAudio flagged with input overflow (the card lost samples)."""
        return self._status_overflows

    @property
    def invalid_blocks(self) -> int:
        """Blocks replaced by silence because they held invalid samples."""
        return self._guard.replaced_blocks

    @property
    def buffered_blocks(self) -> int:
        """Blocks captured and waiting for ``read``."""
        capture = self._capture
        return 0 if capture is None or self._lost else len(capture.buffer)

    @property
    def buffer_capacity(self) -> int:
        """Blocks the capture buffer holds before it drops the oldest."""
        capture = self._capture
        return 0 if capture is None else capture.buffer.max_blocks

    @property
    def level(self) -> float:
        """RMS of the latest block captured (live, even while nobody reads), 0..1; 0 while
        the device is lost."""
        capture = self._capture
        return 0.0 if capture is None or self._lost else capture.buffer.level


def log_retry(what: str, exc: Exception) -> None:
    """A failed reopen attempt: worth a debug line, not a report (the loss was reported)."""
    import logging

    logging.getLogger("parley.audio").debug("reopening the %s failed: %s", what, exc)
