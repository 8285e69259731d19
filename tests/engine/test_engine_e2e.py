"""The whole pipeline in-process on the real offline models: turns, history, devices, stop."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.engine import Engine
from engine.measures import Figure
from engine.pipeline.events import EngineError, FinalTranscript
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from tests.support.audio import speech_with_gap
from tests.support.sources import Quiet
from tests.support.transcripts import normalize, normalize_spelled

pytestmark = pytest.mark.slow
FAST = {"turns.barge_in": "off"}  # no barge-in: fast input would interrupt every reply


@pytest.fixture(scope="module")
def registry():
    """Models loaded once for the module; every Engine here shares them."""
    return ModelRegistry()


def make_engine(registry, **overrides) -> Engine:
    config = EngineConfig().with_overrides({**FAST, **overrides})
    engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
    engine.load()
    return engine


def converse(engine: Engine, audio: np.ndarray, realtime: bool = False, timeout: float = 240):
    cfg = engine.config
    trailing = (cfg.vad.min_silence_ms + cfg.turns.reopen_grace_ms) / 1000 + 0.5
    source = FileSource(audio, realtime=realtime, trailing_silence_s=trailing)
    sink = FileSink(None, realtime=realtime)
    errors = []
    engine.subscribe(lambda e: errors.append(e) if isinstance(e, EngineError) else None)
    engine.start([source], [sink])
    assert engine.wait_drained(timeout), "pipeline did not drain"
    stuck = engine.stop()
    assert not stuck and not errors, (stuck, errors)
    return engine.metrics.turns(), sink


def test_every_stage_runs_on_the_device_resolved_for_it(registry):
    engine = make_engine(registry, device="cpu")
    for stage, placement in engine.placements.items():
        assert str(placement.device) == "cpu"
        # actual_device is read back from the library that holds the weights.
        assert engine.models[stage].actual_device == str(placement.device), stage
    snapshot = engine.snapshot()
    assert {p.stage: p.actual_device for p in snapshot.placements} == {
        "vad": "cpu", "stt": "cpu", "llm": "cpu", "tts": "cpu"}
    engine.release_models()


def test_jfk_is_one_turn_transcribed_and_answered_with_audio(registry, jfk_path):
    engine = make_engine(registry)
    heard = []
    engine.subscribe(lambda e: heard.append(e.text) if isinstance(e, FinalTranscript) else None)
    turns, sink = converse(engine, load_audio(jfk_path))
    assert len(turns) == 1, [t.transcript for t in turns]
    turn = turns[0]
    assert "ask not what your country can do for you" in normalize(turn.transcript)
    assert heard == [turn.transcript]
    assert turn.reply and turn.finished and not turn.cancelled
    assert sink.seconds_played > 0.5
    for mark in ("speech_end", "stt_done", "llm_first_token", "tts_first_text",
                 "tts_first_audio", "audio_out_first"):
        assert mark in turn.marks
    order = [turn.marks[m] for m in ("stt_done", "llm_first_token", "tts_first_audio")]
    assert order == sorted(order)
    engine.release_models()


def test_two_utterances_make_two_turns_and_history_carries_over(registry, one_two_three_path, jfk_path):
    first = load_audio(one_two_three_path)
    second = load_audio(jfk_path)[: int(4.6 * 16000)]  # "And so my fellow Americans, ask not"
    engine = make_engine(registry)
    turns, _sink = converse(engine, speech_with_gap(first, second, 1.5), realtime=True)
    assert len(turns) == 2, [t.transcript for t in turns]
    assert "one two three" in normalize_spelled(turns[0].transcript)  # or "1, 2, 3."
    assert "fellow americans" in normalize(turns[1].transcript)
    assert all(t.reply for t in turns)
    assert turns[0].turn_id != turns[1].turn_id
    assert turns[0].marks["speech_end"] < turns[1].marks["speech_start"]
    # The second turn's prompt held the first exchange: the LLM saw it.
    history = [t.figures[Figure.LLM_HISTORY_TURNS] for t in turns]
    assert history == [0, 1]
    exchanges = engine.units[0].chat_history.exchanges()
    assert [normalize(e.user) for e in exchanges] == [normalize(t.transcript) for t in turns]
    assert exchanges[0].assistant == turns[0].reply
    engine.release_models()


def test_stop_mid_generation_returns_fast_and_leaves_no_thread(registry, jfk_path):
    engine = make_engine(registry, **{"llm.max_new_tokens": "400", "llm.max_sentences": "50"})
    source = FileSource(load_audio(jfk_path), realtime=False, trailing_silence_s=2.0)
    sink = FileSink(None, realtime=True)
    engine.start([source], [sink])
    deadline = time.time() + 120
    while time.time() < deadline:
        turns = engine.metrics.turns()
        if turns and "llm_first_token" in turns[-1].marks:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the LLM never started")
    started = time.perf_counter()
    stuck = engine.stop(timeout=2.0)
    elapsed = time.perf_counter() - started
    assert not stuck and elapsed < 2.0, (stuck, elapsed)
    assert engine.threads_alive() == []
    alive = [t.name for t in threading.enumerate() if t.name.startswith("parley")]
    assert alive == []
    assert not engine.metrics.turns()[-1].finished  # it really was cut off mid-reply
    engine.release_models()




def test_units_come_and_go_and_typed_turns_are_answered(registry):
    from engine.pipeline.events import TurnFinished

    engine = make_engine(registry)
    finished = []
    engine.subscribe(lambda e: finished.append(e.record) if isinstance(e, TurnFinished) else None)
    first = engine.start_unit(Quiet(), FileSink(None, realtime=False), unit=3)
    turn = first.say("What is the capital of France?")
    deadline = time.monotonic() + 120
    while not finished and time.monotonic() < deadline:
        time.sleep(0.05)
    (record,) = finished
    assert record.unit == 3 and record.turn_id == turn and "paris" in normalize(record.reply)
    assert record.transcript == "What is the capital of France?"
    assert [e.user for e in first.chat_history.exchanges()] == [record.transcript]
    assert engine.stop_unit(first) == [] and engine.units == []
    assert not [t for t in first.stages if t.alive]
    # The next client gets a fresh unit on the same models: no history of the first.
    second = engine.start_unit(Quiet(), FileSink(None, realtime=False), unit=3)
    assert second.chat_history.exchanges() == () and second.llm.model is first.llm.model
    assert engine.stop_unit(second) == []
