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
import time

import numpy as np

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource
from engine.audio.buffer import DropOldestBuffer
from engine.audio.health import STALL_S, DeviceState, SampleGuard
from engine.audio.reopening import DeviceStream, ReopeningDevice
from engine.audio.sd_devices import AudioDevice, DeviceKind
from engine.errors import ConfigError


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


class _Capture(DeviceStream):
    """One open input stream and what its callback fills."""

    __slots__ = ("buffer", "resampler", "frame_s")

    def __init__(self, device: AudioDevice, rate: int, channels: int, buffer: DropOldestBuffer,
                 resampler: StreamResampler | None) -> None:
        super().__init__(device, rate, channels)
        self.buffer = buffer
        self.resampler = resampler
        self.frame_s = 1.0 / rate


class MicSource(ReopeningDevice[_Capture], AudioSource):
    """An input device as an AudioSource: 16 kHz mono blocks, never blocking the card."""

    sample_rate = PIPELINE_RATE
    what = "microphone"
    kind = DeviceKind.INPUT
    tag = "mic"
    while_lost = "capture stopped"
    when_back = "capturing again"

    def __init__(self, device: str | int | None = "default", capture_buffer_s: float = 2.0,
                 block_ms: int = 32, capture_rate: int | None = None) -> None:
        """``capture_rate`` forces the card's rate; None tries 16 kHz, then the native rate."""
        if not capture_buffer_s > 0:
            raise ConfigError(f"'audio.capture_buffer_s' must be > 0; got {capture_buffer_s!r}")
        if not isinstance(block_ms, int) or not 1 <= block_ms <= 1000:
            raise ConfigError(f"MicSource block_ms must be an integer from 1 to 1000; got {block_ms!r}")
        super().__init__(device, block_ms, capture_rate)
        self.capture_buffer_s = capture_buffer_s
        self._guard = SampleGuard(self.health, self._name)
        self._seen_overflows = 0
        self._status_overflows = 0
        self._overflow_base = 0  # overflows of the streams before a reopen
        self._seen_pushed = 0
        self._t_pushed = 0.0  # monotonic time the stall watch last saw a new block

    @property
    def capture_rate(self) -> int | None:
        capture = self._stream
        return None if capture is None else capture.rate

    # ------------------------------------------------------------------ the stream
    def _formats(self, device: AudioDevice) -> tuple[list[int], list[int]]:
        native = round(device.default_rate)
        rates = [self.requested_rate] if self.requested_rate else [PIPELINE_RATE, native]
        return rates, sorted({1, min(device.channels, 2), device.channels})

    def _start_stream(self, sd, device: AudioDevice, rate: int, channels: int,
                      previous: _Capture | None) -> _Capture:
        blocksize = max(1, round(rate * self.block_ms / 1000))
        capture = _Capture(device, rate, channels,
                           DropOldestBuffer(max(2, math.ceil(self.capture_buffer_s * rate / blocksize))),
                           StreamResampler(rate) if rate != PIPELINE_RATE else None)
        capture.stream = sd.InputStream(device=device.index, samplerate=rate, channels=channels,
                                        dtype="float32", blocksize=blocksize,
                                        callback=functools.partial(self._callback, capture),
                                        finished_callback=capture.on_finished)
        capture.stream.start()
        return capture

    def _on_reopened(self, old: _Capture | None, new: _Capture) -> None:
        if old is not None:
            self._overflow_base += old.buffer.overflow_count
        self._seen_pushed, self._t_pushed = 0, time.monotonic()
        self._seen_overflows = 0
        self._guard.reset()

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
    def watch(self) -> None:
        capture = self._stream
        if capture is not None:
            self._watch(capture)

    def _watch(self, capture: _Capture) -> None:
        """Notice a stream that stopped, or one that delivers nothing (reader's thread)."""
        if self._lost or not self._open or not self.check_stream(capture):
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

    # ------------------------------------------------------------------ consumer side
    def read(self, timeout: float) -> AudioBlock | None:
        """The next 16 kHz block (sizes follow the card), or None within ``timeout``.

        Invalid samples come out as silence; while the device is lost, None on time.
        """
        if self._stream is None:
            raise RuntimeError("MicSource.read() called before open()")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            capture = self._stream
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
    def overflow_count(self) -> int:
        """Blocks dropped from the capture buffer because nobody read them in time."""
        capture = self._stream
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
        capture = self._stream
        return 0 if capture is None or self._lost else len(capture.buffer)

    @property
    def buffer_capacity(self) -> int:
        """Blocks the capture buffer holds before it drops the oldest."""
        capture = self._stream
        return 0 if capture is None else capture.buffer.max_blocks

    @property
    def level(self) -> float:
        """RMS of the latest block captured (live, even while nobody reads), 0..1; 0 while
        the device is lost."""
        capture = self._stream
        return 0.0 if capture is None or self._lost else capture.buffer.level

