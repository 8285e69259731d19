"""Faults end one turn, never the pipeline (README "Reliability").

- A stage that raises on one turn: an ``EngineError`` naming the stage, the cause and the
  turn; ``TurnCancelled(reason="error")``; the turn's record cancelled (and so in
  ``converse --json``: ``"cancelled": true`` and the error in ``"errors"``); the window's
  banner; the next turn answered; every thread joined.
- Out of memory (torch, ONNX Runtime, CTranslate2, Python): the same, with the stage's
  device memory figures.
- A model that cannot be loaded: a ModelLoadError naming the model, the device and the
  cause (out of memory: with figures), in the CLI and the window; another load works.
- A sound device that is lost: capture or playback stops cleanly, is reported, resumes
  when the device is back; the pipeline answers turns meanwhile.

Faults are injected by ``tests.support.faults`` and ``tests.support.fake_sound``: wrappers
around really loaded models, a registry whose loader fails, a stand-in for the sounddevice
module.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.audio.base import AudioBlock
from engine.audio.health import RETRY_S, STALL_S, DeviceState
from engine.audio.mic import MicSource
from engine.audio.speaker import SpeakerSink
from engine.config import EngineConfig
from engine.pipeline.control import CancelReason
from engine.engine import Engine, EngineState
from engine.errors import ModelError, ParleyError, is_out_of_memory
from engine.runtime.failures import ModelLoadError, describe_failure, memory_figures
from engine.pipeline.events import (AudioStatus, EngineError, FinalTranscript, TurnCancelled,
                                    TurnFinished, UserSpeaking)
from engine.runtime.hub import HubStatus
from engine.pipeline.messages import Message, SpeechSegment, TextChunk
from engine.models.model_registry import ModelRegistry
from engine.report import turn_dict
from engine.pipeline.stage import SourceStage, Stage, StageContext
from tests.support.audio import speech_with_gap
from tests.support.fake_sound import FakeSoundDevice, install_fake_sound
from tests.support.faults import (FaultyLlm, FaultyModel, FaultyRegistry, FaultyVad, ctranslate2_oom,
                                  cuda_oom, injected, onnx_oom)
from tests.support.gui import panel_devices
from tests.support.stage_harness import stage_context
from tests.support.threads import parley_threads, wait_for
from tests.support.transcripts import normalize, normalize_spelled

WAIT_S = 10.0
# Unpaced input: no barge-in (every reply would be interrupted), no speculation (one
# final segment per turn, so "the Nth call" is "turn N").
FAST = {"turns.barge_in": "off", "turns.speculative": "false", "llm.max_new_tokens": "24"}


class Events:
    """Every engine event, in order, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.all: list = []

    def __call__(self, event) -> None:
        with self._lock:
            self.all.append(event)

    def of(self, kind) -> list:
        with self._lock:
            return [e for e in self.all if isinstance(e, kind)]


# ---------------------------------------------------------------------- the wording
def test_out_of_memory_is_recognised_in_every_library_s_words():
    import torch

    for exc in (cuda_oom(), MemoryError(), onnx_oom(), ctranslate2_oom(),
                OSError(12, "Cannot allocate memory"), torch.OutOfMemoryError("MPS backend out of memory")):
        assert is_out_of_memory(exc), exc
    for exc in (RuntimeError("shape mismatch"), ValueError("bad phoneme"), ModelError("no model.bin")):
        assert not is_out_of_memory(exc), exc


def test_an_out_of_memory_report_carries_the_device_memory_figures():
    text = describe_failure(cuda_oom(), "cpu")
    assert text.startswith("out of memory on cpu (CUDA out of memory. Tried to allocate 2.00 GiB. "
                           "GPU 0 has a total capacity of 23.55 GiB); memory now: cpu: Parley uses ")
    assert " (RSS), " in text and " available" in text
    # A CUDA device whose library reports nothing here (no GPU in this process) says so.
    import torch

    figures = memory_figures("cuda:0")
    if not torch.cuda.is_available():
        assert figures.startswith("cuda:0: no figures (its library reports none); cpu: Parley uses ")
    else:
        assert figures.startswith("cuda:0: ") and " free; Parley allocated " in figures
    assert describe_failure(ValueError("bad"), "cpu") == "ValueError: bad"
    assert describe_failure(ModelError("the model refused"), "cpu") == "the model refused"


def test_a_load_error_names_the_stage_model_device_and_cause():
    err = ModelLoadError("llm", "/m/SmolLM2", "transformers", "cuda:1", injected())
    assert str(err) == ("the llm model /m/SmolLM2 (transformers) could not be loaded on cuda:1: "
                        "RuntimeError: injected fault")
    assert (err.stage, err.model, err.backend, err.device, err.out_of_memory) == \
        ("llm", "/m/SmolLM2", "transformers", "cuda:1", False)
    assert isinstance(err, ModelError) and isinstance(err, ParleyError)
    # A backend's own message that names both already is kept as it is.
    own = ModelError("cannot load STT model /m/w on cpu: bad file")
    assert str(ModelLoadError("stt", "/m/w", "faster-whisper", "cpu", own)) == str(own)
    oom = ModelLoadError("stt", "/m/w", "faster-whisper", "cpu", MemoryError())
    assert oom.out_of_memory and "out of memory on cpu (MemoryError); memory now: cpu: " in str(oom)


# ---------------------------------------------------------------------- stages, no models
class Collect(Stage):
    def __init__(self, ctx: StageContext) -> None:
        super().__init__("collect", ctx)
        self.got: list[Message] = []

    def process(self, msg: Message) -> Iterator[Message]:
        self.got.append(msg)
        yield from ()


class FailOn(Stage):
    """Passes messages on; raises on a TextChunk whose text is "boom"."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__("tts", ctx)

    def process(self, msg: Message) -> Iterator[Message]:
        if getattr(msg, "text", None) == "boom" or getattr(msg, "revision", 0) == 99:
            raise RuntimeError("boom")
        yield msg


@pytest.fixture
def pipeline():
    ctx = stage_context()
    events = Events()
    ctx.events.subscribe(events)
    fail, collect = FailOn(ctx), Collect(ctx)
    fail.connect(collect)
    fail.start()
    collect.start()
    yield ctx, fail, collect, events
    ctx.stopping.set()
    assert fail.join(WAIT_S) and collect.join(WAIT_S)


def _chunk(ctx: StageContext, turn: int, text: str, last: bool = False) -> TextChunk:
    return TextChunk(turn, ctx.control.generation, text, last)


def test_a_failure_ends_its_turn_once_committed_and_the_next_turn_flows(pipeline):
    ctx, fail, collect, events = pipeline
    turn5 = [_chunk(ctx, 5, "Hello,"), _chunk(ctx, 5, "boom"), _chunk(ctx, 5, "the rest", last=True)]
    for chunk in turn5[:2]:
        fail.put(chunk)
    assert wait_for(lambda: events.of(EngineError))
    (error,) = events.of(EngineError)
    assert (error.stage, error.message, error.turn_id) == ("tts", "RuntimeError: boom", 5)
    fail.put(turn5[2])  # made before the failure: dropped
    fail.put(_chunk(ctx, 6, "turn six", last=True))
    assert wait_for(lambda: any(m.turn_id == 6 for m in collect.got))
    # What came before the failure may have gone on; nothing of turn 5 after it.
    assert [(m.turn_id, m.text) for m in collect.got if m.text != "Hello,"] == [(6, "turn six")]
    # Turn 5 was not committed yet (speculation): its end is held, then released.
    record = ctx.metrics.turn(0, 5)
    assert events.of(TurnCancelled) == [] and (record is None or not record.cancelled)
    ctx.held.commit(5)
    assert [(e.turn_id, e.reason) for e in events.of(TurnCancelled)] == [(5, CancelReason.FAILED)]
    assert ctx.metrics.turn(0, 5).cancelled
    assert fail.alive


def test_a_failed_turn_the_user_goes_on_speaking_into_is_redone_not_failed(pipeline):
    ctx, fail, _collect, events = pipeline
    fail.put(_chunk(ctx, 7, "boom"))
    assert wait_for(lambda: events.of(EngineError))
    ctx.control.cancel_turn(7, CancelReason.REOPENED)  # what the VAD does when speech resumes in the grace
    ctx.held.commit(7)
    assert events.of(TurnCancelled) == []
    record = ctx.metrics.turn(0, 7)
    assert record is None or not record.cancelled


def test_a_failure_on_a_partial_segment_does_not_end_the_turn(pipeline):
    ctx, fail, collect, events = pipeline
    ctx.held.commit(8)
    audio = np.zeros(160, np.float32)
    fail.put(SpeechSegment(8, 0, audio, 16000, False, 0.0, 0.0, revision=99))
    assert wait_for(lambda: events.of(EngineError))
    assert events.of(EngineError)[0].turn_id is None
    fail.put(_chunk(ctx, 8, "still turn eight", last=True))
    assert wait_for(lambda: collect.got)
    assert events.of(TurnCancelled) == []


def test_a_source_stage_failing_on_every_block_reports_once_not_per_block():
    ctx = stage_context()
    events = Events()
    ctx.events.subscribe(events)

    class Blocks:
        sample_rate, overflow_count, level = 16000, 0, 0.0

        def __init__(self) -> None:
            self.n = 0

        def open(self) -> None: ...

        def close(self) -> None: ...

        def read(self, timeout: float):
            self.n += 1
            return AudioBlock(np.zeros(160, np.float32), time.perf_counter()) if self.n <= 200 else None

        @property
        def finished(self) -> bool:
            return self.n > 200

    class Broken(SourceStage):
        def process_block(self, block):
            raise RuntimeError("the VAD model failed")

    stage, collect = Broken("vad", ctx, Blocks()), Collect(ctx)
    stage.connect(collect)
    stage.start()
    collect.start()
    try:
        assert wait_for(lambda: not stage.alive)
    finally:
        ctx.stopping.set()
        assert collect.join(WAIT_S)
    assert [(e.stage, e.message) for e in events.of(EngineError)] == \
        [("vad", "RuntimeError: the VAD model failed")]
    assert stage.repeats_suppressed == 199


# ---------------------------------------------------------------------- the engine, real models
@pytest.fixture(scope="module")
def registry():
    """Models loaded once for the module; every Engine here shares them."""
    return ModelRegistry()


@pytest.fixture(scope="module")
def two_utterances(one_two_three_path, jfk_path) -> np.ndarray:
    from engine.audio.decode import load_audio

    second = load_audio(jfk_path)[: int(4.6 * 16000)]  # "And so my fellow Americans, ask not"
    return speech_with_gap(load_audio(one_two_three_path), second, 1.5)


def make_engine(registry, **overrides) -> Engine:
    engine = Engine(EngineConfig().with_overrides({**FAST, **overrides}), registry=registry,
                    hub=HubStatus(offline=True))
    engine.load()
    return engine


def _wrap(engine: Engine, stage: str, exc) -> object:
    model = engine.models[stage]
    wrapped = (FaultyLlm(model, exc, on_calls=1) if stage == "llm" else
               FaultyModel(model, "transcribe" if stage == "stt" else "synthesize", exc, on_calls=1))
    engine.models[stage] = wrapped
    return wrapped


STAGE_FAULTS = [
    ("stt", injected, "RuntimeError: injected fault"),
    ("llm", injected, "RuntimeError: injected fault"),  # after two tokens of the reply
    ("tts", injected, "RuntimeError: injected fault"),
    ("llm", cuda_oom, "out of memory on cpu (CUDA out of memory. Tried to allocate 2.00 GiB."),
    ("tts", onnx_oom, "out of memory on cpu ([ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION :"),
    ("stt", ctranslate2_oom, "out of memory on cpu (CUDA failed with error out of memory)"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "exc", "message"), STAGE_FAULTS,
                         ids=[f"{s}-{e.__name__}" for s, e, _m in STAGE_FAULTS])
def test_a_stage_failing_on_a_turn_ends_that_turn_and_the_next_is_answered(
        registry, two_utterances, stage, exc, message):
    from engine.recording import run_recording

    engine = make_engine(registry)
    wrapped = _wrap(engine, stage, exc)
    events = Events()
    try:
        turns, errors = run_recording(engine, two_utterances, None, realtime=False, on_event=events)
        unit = engine.units[0]
    finally:
        engine.release_models()
    assert wrapped.faults.raised == 1
    assert len(turns) == 2, [(t.transcript, t.reply) for t in turns]
    first, second = turns
    # The user reads: the error (converse --json's "errors"), and that turn 1 ended.
    assert len(errors) == 1 and errors[0].startswith(f"{stage}: {message}"), errors
    if "out of memory" in message:
        assert "; memory now: cpu: Parley uses " in errors[0] and " (RSS), " in errors[0]
    (error,) = events.of(EngineError)
    assert (error.stage, error.turn_id) == (stage, first.turn_id)
    assert [(e.turn_id, e.reason) for e in events.of(TurnCancelled)] == [(first.turn_id, "error")]
    assert first.cancelled and not first.finished and turn_dict(first)["cancelled"] is True
    # The next turn is answered as if nothing happened.
    assert [e.record.turn_id for e in events.of(TurnFinished)] == [second.turn_id]
    assert second.finished and not second.cancelled and second.reply
    assert "fellow americans" in normalize(second.transcript)
    assert turn_dict(second)["cancelled"] is False
    # The failed reply is not in the chat history (after TTS failed, the user's words are).
    history = {e.turn_id: e.assistant for e in unit.chat_history.exchanges()}
    assert list(history) == ([first.turn_id] if stage == "tts" else []) + [second.turn_id]
    assert history.get(first.turn_id, "") == ""
    assert parley_threads() == []


@pytest.mark.slow
def test_a_vad_failure_mid_speech_ends_that_turn_and_the_next_is_answered(registry, two_utterances):
    from engine.recording import run_recording

    engine = make_engine(registry)
    vad = engine.models["vad"]
    # The failing frame: 10 frames (0.3 s) into the first words.
    stream, n = vad.new_stream(), vad.frame_samples
    probs = [stream.speech_probability(two_utterances[i:i + n])
             for i in range(0, two_utterances.size - n, n)]
    first_voiced = next(i for i, p in enumerate(probs) if p > engine.config.vad.threshold)
    engine.models["vad"] = FaultyVad(vad, injected, on_frame=first_voiced + 11)
    events = Events()
    try:
        turns, errors = run_recording(engine, two_utterances, None, realtime=False, on_event=events)
    finally:
        engine.release_models()
    failed = [t for t in turns if t.cancelled]
    assert len(failed) == 1 and not failed[0].finished
    (error,) = events.of(EngineError)
    assert (error.stage, error.message, error.turn_id) == ("vad", "RuntimeError: injected fault",
                                                           failed[0].turn_id)
    assert errors == ["vad: RuntimeError: injected fault"]
    assert (failed[0].turn_id, "error") in [(e.turn_id, e.reason) for e in events.of(TurnCancelled)]
    ended = [e.turn_id for e in events.of(UserSpeaking) if not e.started]
    assert failed[0].turn_id in ended  # the window stops showing "listening"
    answered = [t for t in turns if t.finished and not t.cancelled and t.reply]
    assert answered and "fellow americans" in normalize(answered[-1].transcript)
    assert parley_threads() == []


@pytest.mark.slow
def test_a_stage_failure_reaches_the_window_banner(registry, two_utterances, qtbot, gui_settings):
    from app.window.main_window import MainWindow
    from engine.recording import run_recording

    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    engine = make_engine(registry)
    _wrap(engine, "llm", injected)
    window.bridge.attach(engine)
    try:
        turns, errors = run_recording(engine, two_utterances, None, realtime=False)
    finally:
        window.bridge.detach(engine)
        engine.release_models()
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=5000)
    assert window.banner.label.text() == "llm stage: RuntimeError: injected fault"
    assert errors == ["llm: RuntimeError: injected fault"] and turns[-1].reply
    window.close()


# ---------------------------------------------------------------------- a load that fails
@pytest.mark.slow
def test_a_model_that_fails_to_load_is_named_and_another_load_works(registry, one_two_three_path):
    from engine.audio.decode import load_audio
    from engine.recording import run_recording

    faulty = FaultyRegistry("llm", injected)
    engine = Engine(EngineConfig().with_overrides(FAST), registry=faulty, hub=HubStatus(offline=True))
    placement = engine.placements["llm"]
    with pytest.raises(ModelLoadError) as info:
        engine.load()
    err = info.value
    assert str(err) == (f"the llm model {placement.model} (onnx-genai) could not be loaded on cpu: "
                        "RuntimeError: injected fault")
    assert (err.stage, err.device, err.model) == ("llm", "cpu", placement.model)
    assert engine.state is EngineState.CREATED and engine.models == {}
    assert faulty.loaded() == ()  # the stages loaded before it were released
    # Out of memory while loading: the device's figures come with it.
    oom = Engine(EngineConfig().with_overrides(FAST), registry=FaultyRegistry("stt", cuda_oom),
                 hub=HubStatus(offline=True))
    with pytest.raises(ModelLoadError) as info:
        oom.load()
    assert info.value.out_of_memory and str(info.value).startswith(
        f"the stt model {oom.placements['stt'].model} (faster-whisper) could not be loaded on cpu: "
        "out of memory on cpu (CUDA out of memory.")
    assert "; memory now: cpu: Parley uses " in str(info.value)
    # The next load (another device, or the fault gone) works, and answers a turn.
    engine = make_engine(registry)
    try:
        turns, errors = run_recording(engine, load_audio(one_two_three_path), None, realtime=False)
    finally:
        engine.release_models()
    assert errors == [] and len(turns) == 1 and turns[0].reply


def test_the_cli_names_a_model_that_fails_to_load(monkeypatch, capsys, one_two_three_path):
    import engine.backends.vad.silero as silero
    from engine.cli.main import main

    def fail(request, progress):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(silero, "load", fail)
    assert main(["converse", str(one_two_three_path), "--json", "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("parley-cli: error: the vad model ")
    assert err.endswith(" (silero) could not be loaded on cpu: RuntimeError: injected fault")


def test_the_window_names_a_model_that_fails_to_load(monkeypatch, qtbot, gui_settings):
    import engine.backends.vad.silero as silero
    from app.window.main_window import MainWindow

    def fail(request, progress):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(silero, "load", fail)
    window = MainWindow(EngineConfig(), gui_settings, autoload=True)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=60000)
    text = window.banner.label.text()
    assert text.startswith("The models could not be loaded: the vad model ")
    assert " (silero) could not be loaded on cpu: RuntimeError: injected fault" in text
    # Silero runs only on the CPU, and the CPU failed: no other device to offer.
    assert window.banner.action.isHidden()
    window.close()


def test_after_a_failed_load_the_window_offers_another_device(monkeypatch, qtbot, gui_settings):
    """The failure travels as the error itself (not only its words), so the banner can
    offer the failed stage on another device it runs on; one click applies that."""
    import torch

    from PySide6.QtCore import Qt

    from app.window.main_window import MainWindow
    from app.core.background import Failure, JobKind

    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: not window.controller.worker.busy, timeout=60000)  # discovery
    window.panel.set_devices(panel_devices())  # cpu, two CUDA GPUs, (no) mps, mlx
    applied = []
    monkeypatch.setattr(window.controller, "apply", applied.append)
    error = ModelLoadError("llm", "HuggingFaceTB/SmolLM2-360M-Instruct", "transformers", "cuda:1",
                           torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.0 GiB"))
    window.controller.apply_failed.emit(Failure(error, JobKind.LOAD))
    assert window.banner.isVisible() and "could not be loaded on cuda:1" in window.banner.label.text()
    assert window.banner.action.isVisible()
    assert window.banner.action.text() == "Load the llm model on cpu"  # the floor first
    assert window.banner.action.accessibleName() == window.banner.action.text()
    qtbot.mouseClick(window.banner.action, Qt.MouseButton.LeftButton)
    (config,) = applied
    assert config.llm.device == "cpu" and not window.banner.isVisible()
    window.close()


def test_other_devices_are_usable_supported_and_not_the_one_that_failed():
    import torch

    from app.onboarding.load_recovery import other_devices
    from engine.backends import BackendRegistry

    oom = torch.OutOfMemoryError("CUDA out of memory")
    backends = BackendRegistry()
    llm = ModelLoadError("llm", "m", "transformers", "cuda:1", oom)
    assert other_devices(llm, panel_devices(), backends) == ["cpu", "cuda:0"]  # mps absent
    on_cpu = ModelLoadError("llm", "m", "transformers", "cpu", oom)
    assert other_devices(on_cpu, panel_devices(), backends) == ["cuda:0", "cuda:1"]
    vad = ModelLoadError("vad", "silero_vad.onnx", "silero", "cpu", oom)
    assert other_devices(vad, panel_devices(), backends) == []  # Silero runs only on the CPU
    unknown = ModelLoadError("llm", "m", "no-such-backend", "cpu", oom)
    assert other_devices(unknown, panel_devices(), backends) == []


# ---------------------------------------------------------------------- lost sound devices
@pytest.fixture
def sound(monkeypatch):
    sound = install_fake_sound(monkeypatch)
    yield sound
    assert wait_for(lambda: not parley_threads(), timeout=5.0), parley_threads()


@pytest.mark.parametrize("notify", [True, False], ids=["finished-callback", "silently-inactive"])
def test_a_lost_microphone_stops_cleanly_is_reported_and_comes_back(sound, notify):
    mic = MicSource("default")
    mic.open()
    try:
        assert mic.read(1.0) is not None
        sound.unplug("input", notify=notify)  # unplugged; or a sound server that died
        t = time.monotonic()
        while not mic.lost and time.monotonic() - t < 2:
            mic.read(0.05)
        assert mic.lost
        (report,) = mic.poll_health()
        assert report.state is DeviceState.LOST
        assert report.message.startswith('microphone "Fake input" was lost (its stream stopped')
        assert "reopened every 1 s until it is back or another is chosen" in report.message
        assert mic.level == 0.0 and mic.buffered_blocks == 0
        t = time.monotonic()
        assert mic.read(0.2) is None and 0.15 < time.monotonic() - t < 0.5  # on time, no error
        assert "parley-mic-reopen" in parley_threads()
        time.sleep(2.5 * RETRY_S)  # attempts fail while it is away
        assert mic.lost and mic.poll_health() == []
        sound.plug("input")
        assert wait_for(lambda: not mic.lost, timeout=3 * RETRY_S)
        (back,) = mic.poll_health()
        assert back.state is DeviceState.OK
        assert back.message == 'microphone "Fake input" is back; capturing again'
        sound.hear(np.full(512, 0.25, np.float32))
        assert wait_for(lambda: (b := mic.read(0.1)) is not None and b.samples.max() == np.float32(0.25))
        assert len(sound.live("input")) == 1
    finally:
        mic.close()
    assert not sound.live("input")


def test_closing_a_lost_microphone_stops_reopening(sound):
    mic = MicSource("default")
    mic.open()
    sound.unplug("input")
    assert wait_for(lambda: mic.poll_health() != [] or mic.lost)
    assert "parley-mic-reopen" in parley_threads()
    t = time.monotonic()
    mic.close()
    mic.close()
    assert time.monotonic() - t < 0.5 and parley_threads() == []
    sound.plug("input")
    time.sleep(1.5 * RETRY_S)
    assert not sound.live("input")  # nothing reopened behind its back


def test_a_lost_speaker_drops_replies_is_reported_and_comes_back(sound):
    speaker = SpeakerSink("default")
    speaker.open()
    try:
        tone = np.full(16000, 0.5, np.float32)
        speaker.play(tone, 16000, turn_id=1)
        assert wait_for(lambda: speaker.first_heard(1) is not None)
        assert speaker.is_playing
        sound.unplug("output")
        assert wait_for(lambda: not speaker.is_playing, timeout=2.0)  # nothing waits for it
        (report,) = speaker.poll_health()
        assert report.state is DeviceState.LOST and report.message.startswith(
            'speaker "Fake output" was lost (its stream stopped')
        t = time.monotonic()
        speaker.play(tone, 16000, turn_id=2)
        assert speaker.wait_idle(5.0) and time.monotonic() - t < 0.2
        assert speaker.dropped_samples == tone.size and speaker.flush() == 0
        sound.plug("output")
        assert wait_for(lambda: not speaker.lost, timeout=3 * RETRY_S)
        (back,) = speaker.poll_health()
        assert back.state is DeviceState.OK and "is back; replies are heard again" in back.message
        speaker.play(tone[:4000], 16000, turn_id=3)
        assert wait_for(lambda: speaker.first_heard(3) is not None)
        assert speaker.wait_idle(5.0)
        (stream,) = sound.live("output")
        assert stream.played and np.concatenate(stream.played).max() == np.float32(0.5)
    finally:
        speaker.close()


def test_a_speaker_whose_callbacks_stop_is_lost_not_waited_for(sound):
    speaker = SpeakerSink("default")
    speaker.open()
    try:
        (stream,) = sound.live("output")
        stream.stall()
        speaker.play(np.full(16000, 0.5, np.float32), 16000, turn_id=1)
        t = time.monotonic()
        assert speaker.wait_idle(STALL_S + 2)  # returns once the stall is noticed
        assert STALL_S - 0.1 < time.monotonic() - t < STALL_S + 1
        (report,) = speaker.poll_health()
        assert report.state is DeviceState.LOST and "it took no audio for 2 s" in report.message
        assert not speaker.is_playing
    finally:
        speaker.close()


@pytest.mark.slow
def test_lost_devices_keep_the_pipeline_up_and_answer_the_next_turn(registry, monkeypatch, qtbot,
                                                                     one_two_three_path):
    from app.core.bridge import EventBridge
    from engine.audio.decode import load_audio

    sound = install_fake_sound(monkeypatch, FakeSoundDevice(period_s=0.008))
    # No echo canceller: this fake microphone runs 4x faster than real time while the
    # reply plays, so a canceller lines reference and capture up wrongly and took the
    # first word ("one") in double talk. Cancellation has its own real-time tests
    # (tests/audio/test_echo.py); this test is about devices that come and go.
    engine = make_engine(registry, **{"turns.speculative": "true", "turns.end_of_turn": "auto",
                                      "audio.echo_cancellation": "off"})
    events = Events()
    engine.subscribe(events)
    bridge = EventBridge()
    banner: list[tuple[str, str]] = []
    bridge.engine_error.connect(lambda stage, message: banner.append((stage, message)))
    bridge.attach(engine)
    engine.start([MicSource("default")], [SpeakerSink("default")])
    unit = engine.units[0]

    def statuses():
        return [(e.device, e.state) for e in events.of(AudioStatus)]

    def answered(turn: int) -> bool:
        return any(e.record.turn_id == turn and e.record.reply for e in events.of(TurnFinished))

    try:
        # The microphone goes away: reported, and a typed turn is answered meanwhile.
        sound.unplug("input")
        assert wait_for(lambda: ("microphone", "lost") in statuses())
        turn = unit.say("What is the capital of France?")
        assert wait_for(lambda: answered(turn), timeout=120)
        assert wait_for(lambda: sound.live("output")[0].played)  # heard, too
        sound.plug("input")
        assert wait_for(lambda: ("microphone", "ok") in statuses(), timeout=5)
        # Back: a spoken turn through the reopened microphone is answered.
        sound.hear(load_audio(one_two_three_path))
        assert wait_for(lambda: any("one" in normalize_spelled(e.text)
                                    for e in events.of(FinalTranscript)), timeout=120)
        spoken = events.of(FinalTranscript)[-1].turn_id
        assert wait_for(lambda: answered(spoken), timeout=120)
        # The speaker goes away: replies are dropped, turns still end; then it is back.
        sound.unplug("output")
        assert wait_for(lambda: ("speaker", "lost") in statuses())
        turn = unit.say("Say hello.")
        assert wait_for(lambda: answered(turn), timeout=120)
        sound.plug("output")
        assert wait_for(lambda: ("speaker", "ok") in statuses(), timeout=5)
        turn = unit.say("Say goodbye.")
        assert wait_for(lambda: answered(turn), timeout=120)
        assert wait_for(lambda: sound.live("output")[0].played)
        assert len(engine.threads_alive()) == 5
    finally:
        stuck = engine.stop()
        bridge.detach(engine)
        engine.release_models()
    assert stuck == [] and wait_for(lambda: not parley_threads(), timeout=5)
    assert statuses() == [("microphone", "lost"), ("microphone", "ok"), ("speaker", "lost"),
                          ("speaker", "ok")]
    lost = [e for e in events.of(EngineError)]
    assert [e.stage for e in lost] == ["microphone", "speaker"]
    qtbot.waitUntil(lambda: len(banner) == 2, timeout=5000)  # queued to the GUI thread
    assert banner == [(e.stage, e.message) for e in lost]  # what the window's banner shows
    assert not [e for e in events.of(TurnCancelled) if e.reason == "error"]


# ---------------------------------------------------------------------- a real sound server dies
_JACK_CHILD = """
import json, os, sys, time
from engine.audio.mic import MicSource
# JACK's own device by name: ALSA's "default" (a card, or CI's null devices) would be
# PortAudio's default and outlive the JACK server this test kills.
mic = MicSource("system")
mic.open()
got = sum(mic.read(0.5) is not None for _ in range(8))
print("READY", got, flush=True)
sys.stdin.readline()  # the parent killed the server
t = time.monotonic()
while not mic.lost and time.monotonic() - t < 5:
    mic.read(0.1)
took = time.monotonic() - t
reports = [(r.state.value, r.message) for r in mic.poll_health()]
t = time.monotonic()
none = mic.read(0.2)
print(json.dumps({"lost": mic.lost, "took": took, "reports": reports, "read": none is None,
                  "read_s": time.monotonic() - t, "level": mic.level}), flush=True)
os._exit(0)  # PortAudio cannot release a stream whose JACK server died: skip its atexit
"""


@pytest.mark.slow
@pytest.mark.skipif(not __import__("shutil").which("jackd"), reason="needs jackd (apt install jackd2)")
def test_a_real_sound_server_that_dies_is_reported_as_a_lost_microphone(tmp_path):
    import os
    import subprocess
    import sys

    name = f"parley-fault-{os.getpid()}"
    env = {**os.environ, "JACK_DEFAULT_SERVER": name, "JACK_NO_START_SERVER": "1",
           "JACK_NO_AUDIO_RESERVATION": "1"}
    server = subprocess.Popen(["jackd", "-n", name, "--no-realtime", "-d", "dummy", "-r", "16000",
                               "-p", "512"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=env)
    child = None
    try:
        up = wait_for(lambda: subprocess.run(["jack_lsp", "-s", name], env=env, capture_output=True,
                                             timeout=5).returncode == 0, timeout=10, poll=0.1)
        if not up:
            pytest.skip("a private JACK server did not start here")
        child = subprocess.Popen([sys.executable, "-c", _JACK_CHILD], cwd=Path(__file__).parents[2],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        ready = child.stdout.readline().split()
        assert ready[:1] == ["READY"] and int(ready[1]) >= 6, (ready, child.stderr.read()[-2000:])
        server.kill()
        server.wait(10)
        child.stdin.write("\n")
        child.stdin.flush()
        result = json.loads(child.stdout.readline())
        assert child.wait(20) == 0
    finally:
        for proc in (child, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert result["lost"] and result["took"] < 1.5, result
    ((state, message),) = result["reports"]
    assert state == "lost" and message.startswith('microphone "system" was lost (its stream stopped')
    assert result["read"] and result["read_s"] < 0.5 and result["level"] == 0.0
