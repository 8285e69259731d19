"""Turns recorded the way the stages record them, and a history store filled with them."""

from __future__ import annotations

from engine.history.store import HistoryStore
from engine.measures import Figure, Mark
from engine.pipeline.metrics import Metrics

PLACEMENTS = [{"stage": "stt", "backend": "faster-whisper", "model": "tiny.en", "device": "cpu",
               "actual_device": "cpu", "bundled": True},
              {"stage": "llm", "backend": "transformers", "model": "SmolLM2", "device": "cpu",
               "actual_device": "cpu", "bundled": True}]


def make_turn(metrics: Metrics, turn_id: int, transcript: str, reply: str, *, unit: int = 0,
              v2v: float = 0.8, cancelled: bool = False, finished: bool = True):
    """Record a turn the way the stages do and return its TurnRecord."""
    t0 = 100.0 + turn_id * 10
    metrics.mark(unit, turn_id, Mark.SPEECH_START, t0)
    metrics.mark(unit, turn_id, Mark.SPEECH_END, t0 + 1.5)
    metrics.mark(unit, turn_id, Mark.VAD_END, t0 + 1.8)
    metrics.mark(unit, turn_id, Mark.STT_DONE, t0 + 1.9)
    metrics.mark(unit, turn_id, Mark.LLM_FIRST_TOKEN, t0 + 2.0)
    metrics.mark(unit, turn_id, Mark.AUDIO_OUT_FIRST, t0 + 1.5 + v2v)
    metrics.figure(unit, turn_id, Figure.STT_COMPUTE_S, 0.1)
    metrics.figure(unit, turn_id, Figure.LLM_TOKENS, 17)
    metrics.figure(unit, turn_id, Figure.LLM_TOKENS_PER_S, 42.123)
    if transcript:
        metrics.set_transcript(unit, turn_id, transcript)
    if reply:
        metrics.add_reply(unit, turn_id, reply)
    if cancelled:
        metrics.set_cancelled(unit, turn_id)
    if finished:  # as Playback does when the last chunk goes to the sink
        metrics.mark(unit, turn_id, Mark.REPLY_DONE, t0 + 3.0)
        metrics.set_finished(unit, turn_id)
    return metrics.turn(unit, turn_id)


def fill(store: HistoryStore) -> int:
    """Store one conversation of two finished turns (with PLACEMENTS); returns its id."""
    m = Metrics()
    cid = store.start_conversation("converse:test.wav", PLACEMENTS)
    store.add_turn(cid, make_turn(m, 1, "What is the capital of France?",
                                  "The capital of France is **Paris**."), placements=PLACEMENTS)
    store.add_turn(cid, make_turn(m, 2, "And how tall is the Eiffel tower?",
                                  "It is about 330 metres tall.", v2v=0.65), placements=PLACEMENTS)
    return cid


def finished_turn(turn: int, said: str, reply: str):
    """A finished turn of unit 0 as the app stores it: four marks, a token count, the
    transcript and the reply (the GUI's history tests)."""
    metrics = Metrics()
    for mark, t in ((Mark.SPEECH_START, 1.0), (Mark.SPEECH_END, 2.0),
                    (Mark.AUDIO_OUT_FIRST, 3.1), (Mark.REPLY_DONE, 4.0)):
        metrics.mark(0, turn, mark, t)
    metrics.figure(0, turn, Figure.LLM_TOKENS, 7)
    metrics.set_transcript(0, turn, said)
    metrics.add_reply(0, turn, reply)
    metrics.set_finished(0, turn)
    return metrics.turn(0, turn)
