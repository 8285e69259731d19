"""A microphone that delivers invalid samples, or nothing: detected where blocks are read,
reported once per episode, replaced by silence before the VAD, and shown on a meter that
stays on its scale. The sound card is ``tests.support.fake_sound.FakeSoundDevice``; the VAD,
the models and the pipeline are real.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from engine.audio.health import (INVALID_LIMIT, STALL_S, DeviceState, HealthLog, SampleGuard, count_invalid)
from engine.audio.mic import MicSource
from engine.config import EngineConfig
from engine.engine import Engine
from engine.pipeline.events import AudioStatus, EngineError, UserSpeaking
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from tests.support.fake_sound import FakeSoundDevice, install_fake_sound
from tests.support.threads import parley_threads, wait_for

BLOCK = 512


def _tone(seconds: float, amplitude: float = 0.1) -> np.ndarray:
    t = np.arange(round(seconds * 16000)) / 16000
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _garbage() -> np.ndarray:
    """Three blocks a broken driver might deliver: NaN, infinities, values far out of range."""
    nan = np.full(BLOCK, np.nan, np.float32)
    inf = np.full(BLOCK, np.inf, np.float32)
    inf[::2] = -np.inf
    huge = _tone(BLOCK / 16000, amplitude=1e6)
    return np.concatenate([nan, inf, huge])


# ---------------------------------------------------------------------- the check itself
def test_count_invalid_finds_nan_infinities_and_far_out_of_range_samples():
    clean = _tone(0.05, amplitude=0.9)
    assert count_invalid(clean) == 0
    assert count_invalid(np.zeros(0, np.float32)) == 0
    loud = clean.copy()
    loud[:3] = INVALID_LIMIT  # loud, clipped audio is still audio
    assert count_invalid(loud) == 0
    bad = clean.copy()
    bad[[1, 5, 9, 11]] = [np.nan, np.inf, -np.inf, 40.0]
    assert count_invalid(bad) == 4


def test_the_guard_replaces_bad_blocks_by_silence_and_reports_once_per_episode():
    log = HealthLog("microphone")
    guard = SampleGuard(log, lambda: "microphone 0: Test")
    clean = _tone(BLOCK / 16000)
    assert guard.check(clean, 16000) is clean
    for block in np.split(_garbage(), 3) * 4:  # twelve bad blocks: one episode
        out = guard.check(block, 16000)
        assert out.shape == block.shape and not out.any()
    (report,) = log.drain()
    assert report.state is DeviceState.INVALID
    assert report.message.startswith("microphone 0: Test delivers invalid samples")
    assert "NaN, infinite or beyond ±4" in report.message and "replaced by silence" in report.message
    for _ in range(10):  # 0.32 s of valid audio: not over yet
        guard.check(clean, 16000)
    assert log.drain() == [] and log.state is DeviceState.INVALID
    for _ in range(25):
        guard.check(clean, 16000)
    (back,) = log.drain()
    assert back.state is DeviceState.OK and back.message == "microphone 0: Test delivers valid audio again"
    guard.check(np.split(_garbage(), 3)[0], 16000)  # a new episode is a new report
    assert [r.state for r in log.drain()] == [DeviceState.INVALID]
    assert guard.replaced_blocks == 13


# ---------------------------------------------------------------------- the microphone
@pytest.fixture
def sound(monkeypatch):
    sound = install_fake_sound(monkeypatch)
    yield sound
    assert wait_for(lambda: not parley_threads(), timeout=5.0), parley_threads()


def _read_all(mic: MicSource, sound: FakeSoundDevice, seconds: float) -> np.ndarray:
    """Everything the microphone delivers until ``seconds`` of audio were read."""
    out = []
    total = 0
    deadline = time.monotonic() + 10
    while total < seconds * 16000 and time.monotonic() < deadline:
        block = mic.read(0.5)
        if block is not None:
            out.append(block.samples)
            total += block.samples.size
    return np.concatenate(out)


def test_invalid_samples_from_the_microphone_become_silence_with_one_report(sound):
    tone = _tone(BLOCK * 2 / 16000)
    sound.hear(np.concatenate([tone, _garbage(), _garbage(), tone]))
    mic = MicSource("default", capture_buffer_s=2.0)
    mic.open()
    try:
        audio = _read_all(mic, sound, 0.5)
        assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
        assert np.allclose(audio[:tone.size], tone)  # valid audio passes untouched
        assert not audio[tone.size:tone.size + 6 * BLOCK].any()  # the garbage is silence
        assert np.allclose(audio[tone.size + 6 * BLOCK:2 * tone.size + 6 * BLOCK], tone)
        assert mic.invalid_blocks == 6
        (report,) = mic.poll_health()
        assert report.device == "microphone" and report.state is DeviceState.INVALID
        assert 'microphone "Fake input"' in report.message and "invalid samples" in report.message
        _read_all(mic, sound, 1.2)  # a second of silence: valid
        (back,) = mic.poll_health()
        assert back.state is DeviceState.OK and "valid audio again" in back.message
    finally:
        mic.close()


def test_the_input_level_stays_on_its_scale(sound):
    mic = MicSource("default")
    mic.open()
    try:
        for block, expected in ((np.full(BLOCK, np.inf, np.float32), 1.0),
                                (np.full(BLOCK, 1e9, np.float32), 1.0),
                                (np.full(BLOCK, np.nan, np.float32), 0.0),
                                (np.full(BLOCK, 0.25, np.float32), 0.25)):
            sound.hear_forever(block)
            assert wait_for(lambda e=expected: mic.level == pytest.approx(e)), (mic.level, expected)
    finally:
        mic.close()


def test_the_level_meter_clamps_to_its_scale(qtbot):
    from app.core.widgets import LevelMeter

    meter = LevelMeter()
    qtbot.addWidget(meter)
    for rms, text, db in ((638.0, "0 dB", 0.0), (math.inf, "0 dB", 0.0), (1.0, "0 dB", 0.0),
                          (math.nan, "-60 dB", -60.0), (1e-9, "-60 dB", -60.0),
                          (0.5, "-6 dB", 20 * math.log10(0.5))):
        meter.set_level(rms, active=True)
        assert meter.text.text() == text, rms
        assert meter.db == pytest.approx(db)
        assert 0.0 <= meter.bar.value <= 1.0


def test_a_microphone_that_delivers_nothing_is_reported_and_heard_again(sound):
    mic = MicSource("default")
    mic.open()
    try:
        assert mic.read(1.0) is not None
        (stream,) = sound.live("input")
        stream.stall()
        started = time.monotonic()
        reports = []
        while not reports and time.monotonic() - started < STALL_S + 2:
            assert mic.read(0.1) is None or time.monotonic() - started < 0.1
            reports = mic.poll_health()
        (report,) = reports
        assert STALL_S <= time.monotonic() - started < STALL_S + 1
        assert report.state is DeviceState.STALLED
        assert report.message.startswith('microphone "Fake input" delivered nothing for 2 s')
        stream.stall(False)
        assert mic.read(1.0) is not None
        (back,) = mic.poll_health()
        assert back.state is DeviceState.OK and back.message.endswith("delivers audio again")
    finally:
        mic.close()


# ---------------------------------------------------------------------- through the pipeline
@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


@pytest.mark.slow
def test_garbage_from_the_microphone_is_reported_never_starts_a_turn_and_crashes_nothing(
        registry, monkeypatch, qtbot):
    from app.core.widgets import LevelMeter

    sound = install_fake_sound(monkeypatch, FakeSoundDevice(period_s=0.008))
    from engine.audio.speaker import SpeakerSink

    engine = Engine(EngineConfig(), registry=registry, hub=HubStatus(offline=True))
    engine.load()
    events = []
    lock = threading.Lock()

    def listen(event):
        with lock:
            events.append(event)

    engine.subscribe(listen)
    sound.hear(np.concatenate([_tone(0.3)] + [_garbage()] * 20))  # ~2 s of NaN/inf/1e6
    sound.hear_forever(_garbage()[BLOCK:2 * BLOCK])  # then infinities, on and on
    engine.start([MicSource("default")], [SpeakerSink("default")])
    meter = LevelMeter()
    qtbot.addWidget(meter)
    try:
        assert wait_for(lambda: any(isinstance(e, AudioStatus) for e in events), timeout=10)
        time.sleep(1.5)  # more garbage: still one report, no turn
        snap = engine.snapshot()
        assert 0.0 <= snap.input_level <= 1.0
        meter.set_level(snap.input_level, active=True)
        assert meter.text.text() == "0 dB" and meter.bar.value == 1.0
        assert engine.threads_alive() and len(engine.threads_alive()) == 5  # nothing crashed
    finally:
        stuck = engine.stop()
        engine.release_models()
    assert stuck == []
    with lock:
        statuses = [e for e in events if isinstance(e, AudioStatus)]
        errors = [e for e in events if isinstance(e, EngineError)]
        speaking = [e for e in events if isinstance(e, UserSpeaking)]
    assert [(s.device, s.state) for s in statuses] == [("microphone", "invalid")]
    assert statuses[0].message.startswith('microphone "Fake input" delivers invalid samples')
    assert [(e.stage, e.message) for e in errors] == [("microphone", statuses[0].message)]
    assert speaking == [] and engine.metrics.turns() == ()
    assert engine.units[0].source.invalid_blocks >= 60
    assert wait_for(lambda: not parley_threads(), timeout=5.0), parley_threads()
