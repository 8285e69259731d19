"""Learned end of turn: the Smart Turn audio model, the LLM's text signal, their
combination, and the pipeline committing a finished turn early but never a pause in the
middle of a sentence (real speech: jfk.flac)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.audio.decode import load_audio
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EndOfTurn, EngineConfig
from engine.engine import Engine
from engine.errors import MissingDependencyError, ModelError
from engine.measures import Figure, Mark
from engine.runtime.compute_gate import ComputeGate, set_compute_gate
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from engine.stages.end_of_turn.board import AudioScorer, TurnEndBoard, TurnScores
from tests.support.transcripts import normalize

# ------------------------------------------------------------------ the pieces


def test_scores_combine_only_when_both_signals_are_known():
    assert TurnScores(0.9, None).combined is None
    assert TurnScores(0.9, 0.1).combined == pytest.approx(0.3)
    board = TurnEndBoard()
    board.post_audio(4, 2, 0.81)
    board.post_text(4, 1, 0.5)  # an older revision of the turn: not this one's
    assert board.scores(4, 2) == TurnScores(0.81, None)
    board.post_text(4, 2, 0.25)
    assert board.scores(4, 2).combined == pytest.approx(0.45)
    board.forget(4)
    assert board.scores(4, 2) == TurnScores()


def test_the_decision_needs_both_signals_and_words_that_may_end_a_sentence():
    from engine.stages.end_of_turn.decide import MIN_TEXT_P, commit_early

    # What the signals said on the recordings (bench turn-taking --signals): jfk's first
    # pause sounds finished but its words are not; its end and a finished question commit.
    assert not commit_early(TurnScores(0.931, 0.049), 0.25)  # "And so, my fellow Americans,"
    assert not commit_early(TurnScores(0.949, 0.001), 0.25)  # "...that take no account"
    assert commit_early(TurnScores(0.904, 0.381), 0.25)  # "...what you can do for your country."
    assert commit_early(TurnScores(0.811, 0.948), 0.25)  # "...your testing routine, is it?"
    assert not commit_early(TurnScores(0.99, None), 0.25) and not commit_early(TurnScores(None, 0.9), 0.25)
    # The text signal must reach its floor on its own, however sure the audio model is.
    assert not commit_early(TurnScores(1.0, MIN_TEXT_P * 0.9), 0.25)
    assert commit_early(TurnScores(1.0, MIN_TEXT_P), 0.25)


def test_audio_scorer_scores_each_revision_once_on_its_own_thread():
    board, calls, release = TurnEndBoard(), [], threading.Event()

    def score(audio: np.ndarray) -> float:
        calls.append((threading.current_thread().name, audio.size))
        release.wait(5)
        return audio.size / 100

    scorer = AudioScorer("parley-test-turn", score, board, lambda message: None)
    scorer.start()
    scorer.offer(1, 0, np.zeros(10, np.float32))
    while not calls:
        time.sleep(0.01)
    assert scorer.taken(1, 0) and not scorer.taken(1, 1)
    scorer.offer(1, 0, np.zeros(20, np.float32))  # its score started: ignored
    scorer.offer(1, 1, np.zeros(30, np.float32))  # the next revision is scored
    release.set()
    deadline = time.monotonic() + 5
    while board.scores(1, 1).audio is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scorer.stop(5)
    assert [size for _name, size in calls] == [10, 30]
    assert {name for name, _size in calls} == {"parley-test-turn"}
    assert board.scores(1, 0).audio == pytest.approx(0.1)
    assert board.scores(1, 1).audio == pytest.approx(0.3)


def test_audio_scorer_scores_the_newest_audio_offered_before_the_cpu_was_free():
    # While the speculative STT holds the CPU, the source stage goes on offering the
    # revision as it grows: the score runs on what was offered last, once.
    gate = ComputeGate(slots=1)
    previous = set_compute_gate(gate)
    board, calls = TurnEndBoard(), []
    scorer = AudioScorer("parley-test-turn", lambda audio: calls.append(audio.size) or 0.5,
                         board, lambda message: None)
    scorer.start()
    try:
        with gate.hold():  # the STT's call
            for size in (10, 20, 30):
                scorer.offer(4, 2, np.zeros(size, np.float32))
                time.sleep(0.02)
            assert not calls and not scorer.taken(4, 2)
        deadline = time.monotonic() + 5
        while board.scores(4, 2).audio is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert scorer.taken(4, 2)
        scorer.offer(4, 2, np.zeros(40, np.float32))
        time.sleep(0.05)
    finally:
        assert scorer.stop(5)
        set_compute_gate(previous)
    assert calls == [30]


@pytest.fixture(scope="module")
def smart_turn():
    from engine.stages.end_of_turn.smart_turn import SmartTurn

    return SmartTurn()


@pytest.fixture(scope="module")
def jfk(jfk_path):
    return load_audio(jfk_path)


def test_the_audio_model_alone_calls_jfks_first_pause_complete(smart_turn, jfk):
    # Why the text signal is needed: "And so, my fellow Americans" sounds finished.
    first_pause = smart_turn.probability(jfk[: int(2.55 * 16000)])
    mid_sentence = smart_turn.probability(jfk[: int(4.7 * 16000)])  # "... ask not"
    the_end = smart_turn.probability(jfk[: int(10.9 * 16000)])
    assert first_pause > 0.5 and the_end > 0.5 and mid_sentence < 0.3
    assert smart_turn.last_seconds < 2.0


def test_missing_package_gives_the_pip_command(monkeypatch):
    import importlib.util

    from engine.stages.end_of_turn import smart_turn

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pipecat" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"pip install --no-deps 'pipecat-ai==1\.14\.0'"):
        smart_turn.model_files()


def test_a_model_file_that_fails_to_load_is_named(tmp_path):
    from engine.stages.end_of_turn.smart_turn import SmartTurn, model_files

    broken = tmp_path / "smart-turn.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(ModelError, match=str(broken)):
        SmartTurn(broken, model_files()[1])


# ------------------------------------------------------------------ the pipeline


@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


def _engine(registry, **overrides) -> Engine:
    config = EngineConfig().with_overrides({"turns.barge_in": "off", **overrides})
    engine = Engine(config, registry=registry, hub=HubStatus(offline=True))
    engine.load()
    return engine


def _jfk_turn(turns):
    """jfk.flac's one turn. On some machines tiny.en hears its first clause as a sentence
    of its own, "And so am I fellow Americans." (a near tie in Whisper that this CPU's
    float rounding tips; the 30 s window hears the same): ending the turn at that pause is
    then right for the words the decision was given, so the test is skipped, saying so.
    A first clause heard right and cut still fails."""
    if len(turns) == 2 and not normalize(turns[0].transcript).startswith("and so my"):
        pytest.skip(f"tiny.en heard jfk.flac's first clause as {turns[0].transcript!r} here, "
                    "a whole sentence: the cut after it is the STT's, not the decision's")
    (turn,) = turns
    return turn


def _run(engine: Engine, audio: np.ndarray):
    source = FileSource(audio, realtime=True, trailing_silence_s=6.0)
    engine.start([source], [FileSink(None, realtime=True)])
    assert engine.wait_drained(180)
    assert engine.stop() == []
    return [t for t in engine.metrics.turns() if t.finished]


@pytest.mark.slow
def test_jfk_is_one_turn_committed_early_and_its_first_pause_is_not(registry, jfk):
    # A long grace, so that even a slow (or busy) machine has the text signal before it
    # ends: only the learned decision can commit the turn before it.
    engine = _engine(registry, **{"turns.reopen_grace_ms": "5000", "turns.end_of_turn": "learned"})
    try:
        assert engine.turn_model is not None
        assert any(n.startswith("end of turn: learned") for n in engine.notes)
        turn = _jfk_turn(_run(engine, jfk))
    finally:
        engine.close()
    words = normalize(turn.transcript)
    assert words.startswith("and so my fellow americans") and words.endswith("for your country")
    assert turn.figures[Figure.DROPPED_REVISIONS] >= 1  # the pauses reopened the turn
    assert turn.figures[Figure.EOT_EARLY] == 1
    assert turn.figures[Figure.EOT_SCORE] >= engine.config.turns.end_of_turn_threshold
    waited = turn.marks[Mark.COMMITTED] - turn.marks[Mark.SPEECH_END]
    # Committed by the decision (EOT_EARLY), so before min silence + the 5 s grace ran out;
    # how much before depends on this machine's STT and LLM speed (the text signal).
    assert waited < 0.3 + 5.0 - 0.2, waited


@pytest.mark.slow
def test_learned_end_of_turn_with_its_defaults_keeps_jfk_one_turn(registry, jfk):
    # Learned end of turn with every other setting as shipped (the grace, the threshold,
    # the early speculative start): jfk's pauses of 1.06 s and 0.99 s inside its one
    # sentence reopen the turn and never end it, whatever the signals said there.
    engine = _engine(registry, **{"turns.end_of_turn": "learned"})
    try:
        assert engine.turn_model is not None
        assert engine._unit_config(1).turns.end_of_turn is EndOfTurn.LEARNED
        turn = _jfk_turn(_run(engine, jfk))
    finally:
        engine.close()
    words = normalize(turn.transcript)
    assert words.startswith("and so my fellow americans") and words.endswith("for your country")
    assert turn.figures[Figure.DROPPED_REVISIONS] >= 2  # at least the two long pauses
    assert Figure.EOT_EARLY in turn.figures  # the learned decision was the one asked


@pytest.mark.slow
def test_silence_mode_and_a_missing_model_wait_for_the_grace(registry, one_two_three_path,
                                                             monkeypatch):
    from engine.stages.end_of_turn import smart_turn

    monkeypatch.setattr(smart_turn, "model_files", lambda: (_ for _ in ()).throw(
        MissingDependencyError("learned end-of-turn detection (Smart Turn)", "pipecat-ai", "",
                               "pip install --no-deps 'pipecat-ai==1.14.0'")))
    engine = _engine(registry, **{"turns.reopen_grace_ms": "1500", "turns.end_of_turn": "auto"})
    try:
        assert engine.turn_model is None
        note = next(n for n in engine.notes if n.startswith("end of turn"))
        assert note.startswith("end of turn: silence") and "pip install --no-deps" in note
        assert engine.units == [] and engine._unit_config(1).turns.end_of_turn is EndOfTurn.SILENCE
        (turn,) = _run(engine, load_audio(one_two_three_path))
    finally:
        engine.close()
    assert "three" in normalize(turn.transcript) or "3" in turn.transcript
    waited = turn.marks[Mark.COMMITTED] - turn.marks[Mark.SPEECH_END]
    assert waited >= 0.3 + 1.5 - 0.1  # the whole grace: nothing decided early
    assert Figure.EOT_EARLY not in turn.figures


@pytest.mark.slow
def test_the_audio_model_hears_its_silence_however_soon_the_stt_starts(registry, jfk, monkeypatch):
    # The speculative STT may start after one silent frame; Smart Turn still scores each
    # revision only once it heard AUDIO_SCORE_SILENCE_S after the words (less made it call
    # finished turns unfinished), never a revision that speech reopened first.
    from engine.stages.end_of_turn.decide import AUDIO_SCORE_SILENCE_S
    from engine.stages.turns import SegmentEnded
    from engine.stages.vad_stage import VadStage

    started, scored = [], []
    final, offer = VadStage._final, VadStage._offer_audio_score

    def recording_final(self, event):
        if isinstance(event, SegmentEnded):
            started.append(self.detector.silence_s)
        return final(self, event)

    def recording_offer(self):
        scored.append((self.turn_id, self._segment_generation, self.detector.silence_s))
        offer(self)

    monkeypatch.setattr(VadStage, "_final", recording_final)
    monkeypatch.setattr(VadStage, "_offer_audio_score", recording_offer)
    engine = _engine(registry, **{"turns.end_of_turn": "learned", "turns.speculative_start_ms": "32"})
    try:
        _run(engine, jfk)
    finally:
        engine.close()
    assert started and max(started) < AUDIO_SCORE_SILENCE_S  # the STT started at one frame
    assert scored and min(silence for _t, _g, silence in scored) >= AUDIO_SCORE_SILENCE_S - 1e-6
    assert len({(turn, generation) for turn, generation, _s in scored}) <= len(started)
