"""The microphone: a sounddevice InputStream feeding a drop-oldest buffer.

The callback runs on PortAudio's thread and only copies (down-mixed) samples into the
buffer with the capture time of their first sample. Everything slower — resampling the
card's native rate to 16 kHz — happens in ``read``, on the consumer's thread.
"""

from __future__ import annotations

import math
import time

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock
from engine.audio.buffer import DropOldestBuffer
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
        self.device: AudioDevice | None = None
        self.capture_rate: int | None = None
        self.channels: int | None = None
        self._stream = None
        self._buffer: DropOldestBuffer | None = None
        self._resampler: StreamResampler | None = None
        self._seen_overflows = 0
        self._status_overflows = 0

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Open and start the input stream; AudioDeviceError names the device and lists inputs."""
        if self._stream is not None:
            return
        sd = import_sounddevice()
        self.device = resolve_device(self.device_setting, "input")
        rate, channels = self._choose_format(sd, self.device)
        blocksize = max(1, round(rate * self.block_ms / 1000))
        self._buffer = DropOldestBuffer(max(2, math.ceil(self.capture_buffer_s * rate / blocksize)))
        self._resampler = StreamResampler(rate) if rate != PIPELINE_RATE else None
        self._frame_s = 1.0 / rate
        try:
            stream = sd.InputStream(device=self.device.index, samplerate=rate, channels=channels,
                                    dtype="float32", blocksize=blocksize, callback=self._callback)
            stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(
                f"cannot open microphone {self.device.label} at {rate} Hz, {channels} ch: {exc}; "
                f"{describe_devices(list_audio_devices()[0], 'input')}"
            ) from None
        self.capture_rate, self.channels, self._stream = rate, channels, stream

    def close(self) -> None:
        """Stop and release the input stream. Idempotent."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
            finally:
                stream.close()

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

    # ------------------------------------------------------------------ callback
    def _callback(self, indata, frames, time_info, status) -> None:
        now = time.perf_counter()
        if status.input_overflow:
            self._status_overflows += 1
        # time_info is on the stream's clock; map it onto perf_counter through
        # currentTime. A host that reports no (or impossible) latency gets the minimum:
        # the block's last sample was captured just now.
        block_s = frames * self._frame_s
        latency = time_info.currentTime - time_info.inputBufferAdcTime
        if time_info.inputBufferAdcTime <= 0 or not block_s <= latency < 1.0:
            latency = block_s
        self._buffer.push(indata, now - latency)

    # ------------------------------------------------------------------ consumer side
    def read(self, timeout: float) -> AudioBlock | None:
        """The next 16 kHz block (sizes follow the card), or None within ``timeout``."""
        if self._buffer is None:
            raise RuntimeError("MicSource.read() called before open()")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            block = self._buffer.pop(max(0.0, deadline - time.monotonic()))
            if block is None:
                return None
            if self._resampler is not None:
                overflows = self._buffer.overflow_count
                if overflows != self._seen_overflows:
                    self._seen_overflows = overflows
                    self._resampler.reset()
                block = self._resampler.process(block)
            if block is not None:
                return block
            if time.monotonic() >= deadline:
                return None

    @property
    def finished(self) -> bool:
        """A microphone never finishes."""
        return False

    @property
    def overflow_count(self) -> int:
        """Blocks dropped from the capture buffer because nobody read them in time."""
        return 0 if self._buffer is None else self._buffer.overflow_count

    @property
    def input_overflows(self) -> int:
        """Callbacks PortAudio flagged with input overflow (the card lost samples)."""
        return self._status_overflows

    @property
    def buffered_blocks(self) -> int:
        """Blocks captured and waiting for ``read``."""
        return 0 if self._buffer is None else len(self._buffer)

    @property
    def buffer_capacity(self) -> int:
        """Blocks the capture buffer holds before it drops the oldest."""
        return 0 if self._buffer is None else self._buffer.max_blocks

    @property
    def level(self) -> float:
        """RMS of the latest block captured (live, even while nobody reads)."""
        return 0.0 if self._buffer is None else self._buffer.level
