"""Echo cancellation: the microphone hears the reply; this takes the reply back out.

Three parts, one per thread that touches them:

- ``ReferenceLane``: the far end (what the speaker plays) on the listener's clock, 16 kHz,
  each piece stamped with the ``perf_counter()`` time its first sample is heard.
- ``ReferenceTap`` (playback side, the sink stage's thread): ``play`` queues a reply chunk
  on the sink and lays it on the lane. The sink says when a turn's first sample is heard
  (``AudioSink.first_heard``, from its own clock: the speaker's DAC time, the file sink's
  ticks), so a turn's audio is placed exactly; audio queued behind audio still playing
  follows it sample for sample; a chunk that finds the sink idle mid-turn (an underrun) is
  placed at "now + the sink's latency", learnt from its earlier first-heard times. A cut
  (barge-in) drops what will not be heard.
- ``EchoCanceller.clean`` (capture side, the VAD stage's thread): cuts the captured
  stream into 10 ms frames and runs each through WebRTC's AEC3 (livekit's
  ``AudioProcessingModule``) with the reference heard ``REFERENCE_LEAD_S`` after the
  frame was captured: the reference runs ahead (the sink has that audio queued already),
  so the echo lags it even where a device under-reports its latency by that much.
  Capture and playback stamps are both on ``perf_counter``, from the devices' reported
  latencies, which is what aligns the two streams; AEC3 finds the remaining acoustic
  delay itself. ``EchoDetector`` (``engine.audio.echo_measure``) finds out whether the
  microphone hears the reply at all: where it does not (headphones), the captured audio
  goes on untouched instead of being muffled by AEC3 while it learns that. ``EchoMeter``
  (there too) measures, live, how much echo is removed (ERLE, dB) while a reply plays.

The canceller runs while ``enabled()`` says so (``audio.echo_cancellation`` is read per
block, so switching it applies at once); off, blocks pass through untouched. ``auto`` is
on where livekit is installed and the reply plays on a speaker (``echo_wanted``). livekit
is the optional extra ``parley[aec]``: without it ``auto`` is off, and ``on`` is an error
that gives the pip command (``require_echo``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from engine.audio.base import AudioBlock, AudioSink
from engine.audio.echo_measure import FRAME, RATE, EchoDetector, EchoMeter, EchoStats
from engine.audio.pcm import from_int16, to_int16
from engine.config import EchoCancellation, EngineConfig
from engine.errors import ConfigError, MissingDependencyError

PACKAGE = "livekit"
EXTRA = "aec"
#: AEC3 hands back each captured sample 128 samples (8 ms) later at 16 kHz (its internal
#: blocking); measured, and checked by tests/audio/test_echo.py. Cleaned blocks are stamped so.
APM_DELAY_SAMPLES = 128
#: The reference runs this far ahead of the capture it is matched with (a captured frame
#: goes in with the reply heard this much later), so the echo never comes before its
#: reference even where a device under-reports its latency by up to this much; AEC3
#: estimates the rest of the delay itself (it tracks hundreds of ms).
REFERENCE_LEAD_S = 0.05
_KEEP_PAST_S = 2.0  # reference kept after it was heard (capture arrives later than playback)
_CUT_MARGIN_S = 0.02  # after a cut, what the device already holds still sounds this long


@functools.cache
def available() -> bool:
    """True where livekit (the ``aec`` extra) is installed; nothing is imported."""
    try:
        return importlib.util.find_spec("livekit.rtc") is not None
    except (ImportError, ValueError):
        return False


def hears_itself(sink: AudioSink) -> bool:
    """True where what ``sink`` plays reaches a microphone: a speaker. (A paced file sink
    stands for one in tests, with ``audio.echo_cancellation = on``.)"""
    from engine.audio.speaker import SpeakerSink

    return isinstance(sink, SpeakerSink)


def require_echo(config: EngineConfig) -> None:
    """MissingDependencyError (with the pip command) if ``config`` turns echo
    cancellation on where livekit is not installed."""
    if config.audio.echo_cancellation is EchoCancellation.ON and not available():
        raise MissingDependencyError("echo cancellation ('audio.echo_cancellation' = on)",
                                     PACKAGE, EXTRA)


def echo_wanted(config: EngineConfig, sink: AudioSink) -> bool:
    """Whether ``config`` asks for echo cancellation on a unit playing to ``sink``."""
    setting = config.audio.echo_cancellation
    if setting is EchoCancellation.AUTO:
        return available() and hears_itself(sink)
    return setting is EchoCancellation.ON


def canceller_for(config: Callable[[], EngineConfig], sink: AudioSink) -> EchoCanceller | None:
    """The canceller of one pipeline unit playing to ``sink``, or None: where livekit is
    missing, or where the sink is no speaker and the setting is not ``on`` (a file, a
    network client: nothing to cancel, so nothing is spent on it).

    ``config`` returns the unit's current settings: the canceller works while they ask for
    it (``echo_wanted``), so switching ``audio.echo_cancellation`` takes effect at the next
    block. Raises MissingDependencyError if they say ``on`` and livekit is not installed.
    """
    require_echo(config())
    if not available():
        return None
    if not hears_itself(sink) and config().audio.echo_cancellation is not EchoCancellation.ON:
        return None
    try:
        return EchoCanceller(enabled=lambda: echo_wanted(config(), sink))
    except Exception as exc:  # noqa: BLE001 - livekit's native library failed to load
        if config().audio.echo_cancellation is EchoCancellation.ON:
            raise ConfigError(f"'audio.echo_cancellation' = on, but livekit's audio processing "
                              f"could not start: {exc}") from None
        logging.getLogger("parley.audio").warning("echo cancellation is off: livekit's audio "
                                                  "processing could not start: %s", exc)
        return None


# ---------------------------------------------------------------------- the far end
class _Segment:
    __slots__ = ("samples", "start", "anchor", "offset")

    def __init__(self, samples: np.ndarray, start: float,
                 anchor: Callable[[], float | None] | None, offset: float) -> None:
        self.samples = samples  # 16 kHz
        self.start = start  # when samples[0] is heard (an estimate while ``anchor`` waits)
        self.anchor = anchor  # the exact start of its run, once the sink knows it
        self.offset = offset  # seconds from the run's start to samples[0]

    def resolve(self) -> None:
        if self.anchor is not None:
            t = self.anchor()
            if t is not None:
                self.start, self.anchor = t + self.offset, None

    @property
    def end(self) -> float:
        return self.start + self.samples.size / RATE


class ReferenceLane:
    """What the listener hears when, at 16 kHz: written by playback, read by capture."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self.samples_added = 0

    def add(self, samples: np.ndarray, start: float,
            anchor: Callable[[], float | None] | None = None, offset: float = 0.0) -> None:
        """Lay 16 kHz ``samples`` heard from ``start`` on. With ``anchor``, ``start`` is an
        estimate: the true start is ``anchor() + offset`` once ``anchor()`` is not None."""
        if samples.size == 0:
            return
        with self._lock:
            self._segments.append(_Segment(samples, start, anchor, offset))
            self.samples_added += samples.size

    def read(self, t: float, n: int) -> np.ndarray:
        """The ``n`` samples heard from time ``t`` on (zeros where nothing played)."""
        out = np.zeros(n, np.float32)
        t_end = t + n / RATE
        with self._lock:
            keep = []
            for seg in self._segments:
                seg.resolve()
                if seg.end < t - _KEEP_PAST_S:
                    continue  # long heard: the capture side is past it
                keep.append(seg)
                if seg.start >= t_end or seg.end <= t:
                    continue
                first = round((seg.start - t) * RATE)  # where samples[0] falls in ``out``
                lo, hi = max(0, first), min(n, first + seg.samples.size)
                if hi > lo:
                    out[lo:hi] = seg.samples[lo - first:hi - first]
            self._segments = keep
        return out

    def cut(self, after: float) -> None:
        """Nothing from time ``after`` on will be heard (a barge-in flushed the sink)."""
        with self._lock:
            keep = []
            for seg in self._segments:
                seg.resolve()
                if seg.start >= after:
                    continue
                if seg.end > after:
                    seg.samples = seg.samples[:max(0, round((after - seg.start) * RATE))]
                keep.append(seg)
            self._segments = keep

    def __len__(self) -> int:
        return len(self._segments)


class ReferenceTap:
    """The playback side: plays reply audio on ``sink`` and lays it on the lane."""

    def __init__(self, lane: ReferenceLane, sink: AudioSink, latency_s: float | None = None) -> None:
        self.lane = lane
        self.sink = sink
        # How long a chunk queued on an idle sink takes to be heard: learnt from the sink's
        # first-heard times; the speaker's reported output latency to start with.
        self.latency_s = latency_s if latency_s is not None else sink.latency + 0.005
        self._in_run = False  # chunks laid so far play back to back, from the run's start
        self._run_turn: int | None = None  # turn whose first-heard time anchors the run
        self._run_anchor: Callable[[], float | None] | None = None
        self._run_start = 0.0  # estimated start of the current run
        self._run_offset = 0.0  # seconds of audio laid in the current run
        self._learn: tuple[int, float] | None = None  # (turn, time queued on an idle sink)
        self._heard: set[int] = set()  # turns with audio laid already

    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        """``sink.play`` the chunk, and lay it on the lane where it will be heard."""
        from engine.audio.decode import resample

        self._learn_latency()
        idle = not self.sink.is_playing  # before the chunk is queued
        self.sink.play(audio, sample_rate, turn_id)  # resamples first: queued only now
        now = time.perf_counter()
        samples = resample(audio, sample_rate, RATE)
        if idle or not self._in_run:
            # A new run: it starts when the sink's clock next takes a block.
            self._run_start, self._run_offset = now + self.latency_s, 0.0
            if turn_id not in self._heard:
                sink = self.sink
                self._run_turn = turn_id
                self._run_anchor = lambda: sink.first_heard(turn_id)
                if idle:
                    self._learn = (turn_id, now)
            else:  # the sink ran dry mid-turn: its first-heard time is of no use now
                self._run_turn, self._run_anchor = turn_id, None
            self._in_run = True
        self._heard.add(turn_id)
        if len(self._heard) > 64:
            self._heard = {t for t in self._heard if t > turn_id - 32}
        self.lane.add(samples, self._run_start + self._run_offset, self._run_anchor, self._run_offset)
        self._run_offset += samples.size / RATE

    def cut(self) -> None:
        """The sink was flushed: what it had not played yet will not be heard."""
        self.lane.cut(time.perf_counter() + self.latency_s + _CUT_MARGIN_S)
        self._in_run, self._run_turn, self._run_anchor, self._learn = False, None, None, None

    def _learn_latency(self) -> None:
        if self._learn is None:
            return
        turn, queued = self._learn
        heard = self.sink.first_heard(turn)
        if heard is None:
            return
        self._learn = None
        observed = heard - queued
        if 0.0 <= observed < 1.0:
            self.latency_s += 0.5 * (observed - self.latency_s)


# ---------------------------------------------------------------------- the canceller
class Aec(Protocol):
    """An echo canceller of 10 ms frames (AEC3 through livekit; tests use others)."""

    def process(self, near: np.ndarray, far: np.ndarray, delay_ms: int) -> np.ndarray:
        """One frame: ``near`` captured, ``far`` heard at the same time; ``near`` cleaned."""
        ...


class LivekitAec:
    """WebRTC's AEC3 (with its high-pass filter) through livekit: 10 ms 16-bit frames."""

    name = "livekit"

    def __init__(self) -> None:
        try:
            from livekit import rtc
        except ImportError:
            raise MissingDependencyError("echo cancellation", PACKAGE, EXTRA) from None
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True,
                                              noise_suppression=False, auto_gain_control=False)
        self._near_buf, self._far_buf = bytearray(2 * FRAME), bytearray(2 * FRAME)
        self._near = np.frombuffer(self._near_buf, np.int16)
        self._far = np.frombuffer(self._far_buf, np.int16)
        self._near_frame = rtc.AudioFrame(self._near_buf, RATE, 1, FRAME)
        self._far_frame = rtc.AudioFrame(self._far_buf, RATE, 1, FRAME)

    def process(self, near: np.ndarray, far: np.ndarray, delay_ms: int) -> np.ndarray:
        """One 10 ms frame: ``near`` captured, ``far`` heard at the same time; float32 out."""
        self._far[:] = to_int16(far)
        self._apm.process_reverse_stream(self._far_frame)
        self._near[:] = to_int16(near)
        self._apm.set_stream_delay_ms(delay_ms)
        self._apm.process_stream(self._near_frame)
        return from_int16(self._near)


class EchoCanceller:
    """One pipeline unit's canceller: the reference lane, AEC3, and the meter.

    ``tap(sink)`` is the playback side; ``clean(block)`` the capture side (one thread).
    """

    def __init__(self, enabled: Callable[[], bool] = lambda: True,
                 aec_factory: Callable[[], Aec] | None = None,
                 lead_s: float = REFERENCE_LEAD_S) -> None:
        self.lane = ReferenceLane()
        self.meter = EchoMeter()
        self.detector = EchoDetector()
        self._enabled = enabled
        self._aec = (aec_factory or LivekitAec)()  # the default looked up now: tests replace it
        self.lead_s = lead_s
        self._delay_ms = round(lead_s * 1000)
        self._pending = np.zeros(0, np.float32)  # captured samples short of a frame
        self._pending_t = 0.0  # capture time of _pending[0]
        self._active = False
        self._processed = 0
        # The input as AEC3 delays it: what goes out where the microphone hears no echo.
        self._raw = np.zeros(APM_DELAY_SAMPLES + FRAME, np.float32)

    def tap(self, sink: AudioSink) -> ReferenceTap:
        """The playback side for ``sink`` (give it to ``Playback``)."""
        return ReferenceTap(self.lane, sink)

    @property
    def active(self) -> bool:
        """True while blocks are being cleaned (the setting asks for it)."""
        return self._active

    def stats(self) -> EchoStats:
        meter = self.meter
        return EchoStats(self._active, meter.erle_db, meter.erle_total_db, meter.measured_s,
                         self._processed / RATE, self.detector.heard)

    def clean(self, block: AudioBlock) -> AudioBlock:
        """``block`` without the reply's echo, or as it is while the canceller is off.

        Samples are cleaned in whole 10 ms frames: up to 10 ms wait for the next block,
        and the frames come out ``APM_DELAY_SAMPLES`` late; the block returned is stamped
        with the capture time of its first sample. Its marker stays with it.
        """
        active = self._active = bool(self._enabled())
        if not active:
            if self._pending.size == 0:
                return block
            samples = np.concatenate([self._pending, block.samples])
            t = self._pending_t
            self._pending = np.zeros(0, np.float32)
            return AudioBlock(samples, t, block.marker)
        samples = np.asarray(block.samples, np.float32)
        if self._pending.size == 0:
            self._pending_t = block.t_start
        elif abs(self._pending_t + self._pending.size / RATE - block.t_start) > 0.002:
            # Blocks were dropped (or an unpaced source): the samples stay contiguous,
            # stamped from the newest block's time.
            self._pending_t = block.t_start - self._pending.size / RATE
        pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        frames = pending.size // FRAME
        out = np.empty(frames * FRAME, np.float32)
        t0 = self._pending_t
        for k in range(frames):
            near = pending[k * FRAME:(k + 1) * FRAME]
            far = self.lane.read(t0 + k * FRAME / RATE + self.lead_s, FRAME)
            cleaned = self._aec.process(near, far, self._delay_ms)
            raw = self._raw
            raw[:APM_DELAY_SAMPLES] = raw[FRAME:]
            raw[APM_DELAY_SAMPLES:] = near
            self.detector.add(near, far)
            if self.detector.heard is False:  # no echo (headphones): AEC3 would only muffle
                cleaned = raw[:FRAME].copy()
            out[k * FRAME:(k + 1) * FRAME] = cleaned
            self.meter.add(near, far, cleaned)
        self._pending = pending[frames * FRAME:].copy()
        self._pending_t = t0 + frames * FRAME / RATE
        self._processed += frames * FRAME
        return AudioBlock(out, t0 - APM_DELAY_SAMPLES / RATE, block.marker)


def describe(canceller: EchoCanceller | None, config: EngineConfig, sink: AudioSink) -> str:
    """One line for the app's status: whether it is on, and the echo it removes."""
    setting = config.audio.echo_cancellation
    if canceller is None:
        if setting is EchoCancellation.OFF:
            return "echo cancellation: off"
        return f"echo cancellation: off (needs livekit: pip install 'parley[{EXTRA}]')"
    if not echo_wanted(config, sink):
        if setting is EchoCancellation.AUTO:
            return "echo cancellation: off (the reply does not play on a speaker)"
        return "echo cancellation: off"
    stats = canceller.stats()
    if stats.echo_heard is False:
        return "echo cancellation: on (no echo heard: headphones?)"
    return ("echo cancellation: on" if stats.erle_db is None else
            f"echo cancellation: on, removing {stats.erle_db:.0f} dB of echo")
