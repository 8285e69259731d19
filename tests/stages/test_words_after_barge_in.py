"""A barge-in cuts a reply, never the user's words: a committed turn whose transcript was
not out yet when the user spoke again (a busy CPU makes that likely) is still transcribed
(``FinalTranscript``: the client's ``input_audio_transcription.completed``) and its words
stay in the history, while its reply is dropped. Found by ``parley-cli bench lost-turns``:
without this the turn was committed, its response cancelled, and it was never transcribed."""

from __future__ import annotations

import numpy as np

from engine.backends.base import LlmModel, LlmSession, LlmStep, SttModel, SttResult
from engine.pipeline.chat_history import ChatHistory, ItemKind
from engine.pipeline.control import CancelReason
from engine.pipeline.events import FinalTranscript
from engine.pipeline.messages import SpeechSegment, TextChunk, Transcript
from engine.pipeline.stage import StageContext
from engine.stages.llm_stage import LlmStage
from engine.stages.stt_stage import SttStage
from engine.stages.vad_stage import PartialSequence
from tests.support.stage_harness import run_stage, stage_context

RATE = 16000
WORDS = "Reincarnation and the converse of spirits."


class OneTextStt(SttModel):
    sample_rate = RATE
    actual_device = "cpu"

    def transcribe(self, audio, language=None, beam_size=1, fit_window_s=None):
        return SttResult(WORDS, audio.size / RATE, 0.01)

    def check_language(self, language):
        pass


class CountingSession(LlmSession):
    def __init__(self, model: CountingLlm) -> None:
        self.model = model

    def generate(self, messages, options, should_stop):
        self.model.calls += 1
        yield LlmStep("Sure.", 1, 10, 0.01, 20.0, finished=True)

    def reset(self) -> None:
        pass


class CountingLlm(LlmModel):
    actual_device = "cpu"

    def __init__(self) -> None:
        self.calls = 0

    def new_session(self) -> CountingSession:
        return CountingSession(self)


def _ctx() -> tuple[StageContext, list]:
    ctx = stage_context()
    events: list = []  # of the whole test, commits included
    ctx.events.subscribe(events.append)
    return ctx, events


def _final_segment(ctx: StageContext, turn: int = 1) -> SpeechSegment:
    audio = np.zeros(RATE, np.float32)
    return SpeechSegment(turn, ctx.control.generation, audio, RATE, True, 10.0, 11.0,
                         voiced_samples=audio.size)


def _transcribe(stage: SttStage, segment: SpeechSegment) -> list[Transcript] | None:
    """What the stage's loop does with the segment: dropped (None) or its outputs."""
    if stage.is_stale(segment):
        return None
    out, _events = run_stage(stage, [segment])
    return [m for m in out if isinstance(m, Transcript)]


def test_a_committed_turn_cut_before_its_transcript_is_still_transcribed():
    ctx, events = _ctx()
    stage = SttStage(ctx, OneTextStt(), PartialSequence())
    segment = _final_segment(ctx)
    ctx.held.commit(1)
    ctx.control.cancel_all(1, CancelReason.BARGE_IN)  # the user spoke again: its reply is cut
    out = _transcribe(stage, segment)
    assert out is not None and [t.text for t in out] == [WORDS]
    assert [e.text for e in events if isinstance(e, FinalTranscript)] == [WORDS]
    assert ctx.metrics.turn(0, 1).transcript == WORDS


def test_a_turn_not_committed_or_redone_keeps_its_old_revision_dropped():
    ctx, events = _ctx()
    stage = SttStage(ctx, OneTextStt(), PartialSequence())
    uncommitted = _final_segment(ctx)
    ctx.control.cancel_all(1, CancelReason.BARGE_IN)
    assert _transcribe(stage, uncommitted) is None  # not committed: nothing was promised

    old = _final_segment(ctx, turn=2)
    ctx.control.cancel_turn(2, CancelReason.REOPENED)  # the user went on: a new revision comes
    ctx.held.commit(2)
    ctx.control.cancel_all(2, CancelReason.BARGE_IN)
    assert _transcribe(stage, old) is None
    cleared = _final_segment(ctx, turn=3)
    ctx.held.commit(3)
    ctx.control.cancel_all(3, CancelReason.NEW_CONVERSATION)
    assert _transcribe(stage, cleared) is None
    assert not [e for e in events if isinstance(e, FinalTranscript)]


def test_the_llm_keeps_the_words_of_a_cut_turn_and_answers_nothing():
    ctx, _events = _ctx()
    model, history = CountingLlm(), ChatHistory()
    stage = LlmStage(ctx, model, history)
    transcript = Transcript(1, ctx.control.generation, WORDS, True, 11.0)
    ctx.held.commit(1)
    ctx.control.cancel_all(1, CancelReason.BARGE_IN)
    assert not stage.is_stale(transcript)
    out, _events = run_stage(stage, [transcript])
    assert not [m for m in out if isinstance(m, TextChunk)] and model.calls == 0
    assert [(i.kind, i.text) for i in history.items()] == [(ItemKind.USER, WORDS)]
    # A current turn is answered as ever.
    answered = Transcript(2, ctx.control.generation, "And the next one?", True, 12.0)
    ctx.held.commit(2)
    assert any(isinstance(m, TextChunk) and m.text for m in run_stage(stage, [answered])[0])
    assert model.calls == 1
