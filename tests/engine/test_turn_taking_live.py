"""Live transcription, barge-in and speculative turns, with real speech at real time."""

from __future__ import annotations

import difflib

import numpy as np
import pytest

from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.engine import Engine
from engine.measures import Figure
from engine.pipeline.events import (EngineError, FinalTranscript, PartialTranscript, ReplyText, TurnCancelled)
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from tests.support.events import EventRecorder
from tests.support.sources import SpeakWhenReplyPlays
from tests.support.transcripts import normalize

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


def run_live(registry, audio, overrides, timeout=180, source_for=None):
    config = EngineConfig().with_overrides(overrides)
    engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
    engine.load()
    recorder = EventRecorder()
    engine.subscribe(recorder)
    sink = FileSink(None, realtime=True)
    source = (source_for(sink) if source_for else
              FileSource(audio, realtime=True, trailing_silence_s=2.0))
    engine.start([source], [sink])
    try:
        assert engine.wait_drained(timeout)
    finally:
        assert engine.stop() == []
    assert not recorder.of(EngineError), recorder.of(EngineError)
    turns = engine.metrics.turns()
    engine.release_models()
    return engine, turns, recorder, sink


def silence(seconds):
    return np.zeros(int(seconds * 16000), np.float32)


def test_partials_arrive_while_speaking_and_grow_into_the_final(registry, jfk_path):
    _engine, turns, rec, _sink = run_live(registry, load_audio(jfk_path), {
        "turns.live_transcription": "true", "turns.barge_in": "off"})
    assert len(turns) == 1
    final = normalize(turns[0].transcript)
    assert "ask not what your country can do for you" in final
    speech_end = turns[0].marks["speech_end"]
    early = [(t, e) for t, e in rec.of(PartialTranscript) if t < speech_end]
    assert len(early) >= 2, [e for _t, e in rec.of(PartialTranscript)]
    final_words = final.split()
    for _t, partial in early:
        words = normalize(f"{partial.stable} {partial.unstable}").split()
        prefix = final_words[: len(words)]
        ratio = difflib.SequenceMatcher(None, words, prefix).ratio()
        assert ratio >= 0.6, (words, prefix)
    # Stable words only ever grow, and are a prefix of what was said.
    stable = [normalize(e.stable) for _t, e in rec.of(PartialTranscript) if e.stable]
    assert stable and all(final.startswith(s.split()[0]) for s in stable)
    assert [normalize(e.text) for _t, e in rec.of(FinalTranscript)] == [final]


def test_barge_in_stops_the_reply_and_the_llm(registry, one_two_three_path, jfk_path):
    question = load_audio(jfk_path)[: int(7.8 * 16000)]  # "... ask not what your country can do for you"
    interruption = load_audio(one_two_three_path)
    # A prompt that makes SmolLM2 write ~120 tokens, so the reply is still being generated
    # when the user speaks again, 0.4 s into its playback: on transformers (~20 tokens/s),
    # since onnx-genai (~150 tokens/s) finishes it first. onnx-genai's cancellation per
    # token is tested in tests/backends/test_onnx_genai_llm.py. Silence ends the turn:
    # transformers' SmolLM2 (fp32) gives jfk's first pause a text signal of 0.116 where
    # onnx-genai's int4 gives 0.049, and the learned end of turn may end the question
    # there; tests/stages/test_turn_end.py is where the learned decision is tested.
    engine, turns, rec, sink = run_live(registry, None, source_for=lambda sink: SpeakWhenReplyPlays(
        np.concatenate([question, silence(1.5)]), interruption, sink), overrides={
        "turns.barge_in": "full-duplex", "llm.backend": "transformers", "turns.end_of_turn": "silence",
        "llm.max_new_tokens": "120", "llm.max_sentences": "50",
        "llm.system_prompt": "Write a long essay about the user's words."})
    first, second = turns[0], turns[-1]
    assert first.cancelled and "barge_in" in first.marks
    assert ("barge-in" in [e.reason for _t, e in rec.of(TurnCancelled)])
    assert "audio_out_first" in first.marks and first.marks["audio_out_first"] < first.marks["barge_in"]
    # The LLM was cut off mid-reply, not left to finish.
    assert "llm_stopped" in first.marks and "reply_done" not in first.marks
    assert first.figures[Figure.LLM_TOKENS] < 120
    # Nothing of the cancelled reply was heard after the barge-in (10 ms clock tick).
    played = {p.turn_id: p for p in sink.history()}[first.turn_id]
    heard_until = played.t_first_heard + played.samples_played / played.sample_rate
    assert heard_until <= first.marks["barge_in"] + 0.02
    assert played.samples_flushed > 0
    # The interruption became its own answered turn.
    assert second.turn_id != first.turn_id and second.reply and not second.cancelled
    reaction = first.marks["barge_in"] - second.marks["speech_start"]
    print(f"\nbarge-in: reply silenced {reaction * 1000:.0f} ms after the user's speech start "
          f"(VAD speech-start window {engine.config.vad.min_speech_ms} ms)")
    assert reaction < 1.0


def test_short_pause_reopens_the_turn_and_drops_the_first_revision(registry, one_two_three_path,
                                                                   jfk_path):
    first_part = load_audio(one_two_three_path)
    second_part = load_audio(jfk_path)[: int(2.5 * 16000)]  # "And so my fellow Americans"
    next_turn = load_audio(jfk_path)[int(3.1 * 16000): int(4.6 * 16000)]  # "ask not"
    audio = np.concatenate([first_part, silence(0.4), second_part, silence(1.5), next_turn])
    engine, turns, rec, sink = run_live(registry, audio, {
        "turns.speculative": "true", "turns.barge_in": "off"})
    assert len(turns) == 2, [t.transcript for t in turns]
    merged, later = turns
    text = normalize(merged.transcript)
    assert "fellow americans" in text and ("three" in text or "3" in text)
    assert merged.figures[Figure.DROPPED_REVISIONS] >= 1 and not merged.cancelled
    assert [e.reason for _t, e in rec.of(TurnCancelled)].count("reopened") >= 1
    # Only the final revision of each turn reached listeners, the history and the speaker.
    finals = rec.of(FinalTranscript)
    assert [e.turn_id for _t, e in finals] == [merged.turn_id, later.turn_id]
    assert [e.text for _t, e in finals] == [merged.transcript, later.transcript]
    replies = {t.turn_id: " ".join(e.text for _t2, e in rec.of(ReplyText) if e.turn_id == t.turn_id)
               for t in turns}
    assert replies == {t.turn_id: t.reply for t in turns}
    exchanges = engine.units[0].chat_history.exchanges()
    assert [(e.turn_id, e.user) for e in exchanges] == [(t.turn_id, t.transcript) for t in turns]
    played = {p.turn_id: p.samples_played / p.sample_rate for p in sink.history()}
    for turn in turns:
        # Exactly the final revision's TTS audio was played, nothing of a dropped one.
        tts_seconds = turn.figures[Figure.TTS_AUDIO_S]
        assert played[turn.turn_id] == pytest.approx(tts_seconds, abs=0.05)
    assert later.reply and "ask not" in normalize(later.transcript)


def test_mute_while_speaking_lets_the_reply_finish(registry, one_two_three_path, jfk_path):
    question = load_audio(jfk_path)[: int(7.8 * 16000)]
    interruption = load_audio(one_two_three_path)
    audio = np.concatenate([question, silence(2.2), interruption, silence(2.0)])
    _engine, turns, rec, sink = run_live(registry, audio, {
        "turns.barge_in": "mute-while-speaking", "llm.max_sentences": "2"})
    first = turns[0]
    assert not first.cancelled and "reply_done" in first.marks
    assert "barge-in" not in [e.reason for _t, e in rec.of(TurnCancelled)]
    played = {p.turn_id: p for p in sink.history()}[first.turn_id]
    assert played.samples_flushed == 0
    heard = played.samples_played / played.sample_rate
    assert heard == pytest.approx(first.figures[Figure.TTS_AUDIO_S], abs=0.05)
