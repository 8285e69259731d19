"""Where the STT was unsure of the words, every reading of them reaches the learned end of
turn, and a turn commits early only when each reading may end there."""

from __future__ import annotations

import dataclasses

import pytest

from engine.backends.base import LlmModel, LlmSession, LlmStep
from engine.backends.stt.whisper_window import FittedDecode
from engine.config import EndOfTurn, EngineConfig
from engine.pipeline.chat_history import ChatHistory
from engine.pipeline.control import CancelReason
from engine.pipeline.messages import Transcript
from engine.stages.llm_stage import LlmStage
from tests.stages.test_stt_continue import ScriptedStt, segment, stage_for
from tests.support.stage_harness import run_stage, stage_context


class UnsureStt(ScriptedStt):
    """A ScriptedStt whose results also carry the given other readings."""

    def __init__(self, results: list[tuple[str, tuple[str, ...]]]) -> None:
        super().__init__([text for text, _ in results])
        self.others = [others for _, others in results]

    def transcribe(self, audio, language=None, beam_size=1, fit_window_s=None):
        result = super().transcribe(audio, language, beam_size, fit_window_s)
        return dataclasses.replace(result, other_readings=self.others.pop(0))

    def continue_transcript(self, audio, previous, language=None, beam_size=1, fit_window_s=None):
        result = super().continue_transcript(audio, previous, language, beam_size, fit_window_s)
        return dataclasses.replace(result, other_readings=self.others.pop(0))


def finals(stage, msg) -> list[Transcript]:
    out, _events = run_stage(stage, [msg])
    return [m for m in out if isinstance(m, Transcript)]


def test_the_transcript_carries_the_other_readings_as_whole_turn_texts():
    model = UnsureStt([("And so am I fellow Americans.", (" And so my fellow Americans. ",)),
                       ("Ask what you can do.", ("Ask what you can do?",))])
    stage, ctx = stage_for(model)
    (first,) = finals(stage, segment(ctx, 6.0))
    assert first.text == "And so am I fellow Americans."
    assert first.other_readings == ("And so my fellow Americans.",)
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    (second,) = finals(stage, segment(ctx, 9.0))  # continued after the words heard before
    assert model.calls[-1][0] == "continued"
    assert second.text == "And so am I fellow Americans. Ask what you can do."
    assert second.other_readings == ("And so am I fellow Americans. Ask what you can do?",)


def test_a_sure_transcript_has_no_other_readings():
    stage, ctx = stage_for(ScriptedStt(["One, two, three."]))
    (only,) = finals(stage, segment(ctx, 2.0))
    assert only.other_readings == ()


class EndScores(LlmSession):
    """Gives each text its scripted sentence-end probability; replies with one word."""

    def __init__(self, scores: dict[str, float], asked: list[str]) -> None:
        self.scores, self.asked = scores, asked

    def generate(self, messages, options, should_stop):
        yield LlmStep("Sure.", 1, 10, 0.01, 20.0, finished=True)

    def reset(self) -> None:
        pass

    def sentence_end_probability(self, text: str) -> float:
        self.asked.append(text)
        return self.scores[text]


class EndScoring(LlmModel):
    actual_device = "cpu"

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.asked: list[str] = []

    def new_session(self) -> EndScores:
        return EndScores(self.scores, self.asked)

    def end_of_turn_signal(self) -> bool:
        return True


@pytest.mark.parametrize("others, posted", [
    ((), 0.22),
    (("And so my fellow Americans.",), 0.05),  # the least likely end counts
    (("And so am I fellow Americans.", ""), 0.22),  # the same reading once; no empty one
])
def test_the_text_signal_is_the_least_likely_end_over_the_readings(others, posted):
    model = EndScoring({"And so am I fellow Americans.": 0.22, "And so my fellow Americans.": 0.05})
    config = EngineConfig()
    config = dataclasses.replace(config, turns=dataclasses.replace(
        config.turns, end_of_turn=EndOfTurn.LEARNED))
    ctx = stage_context(config=config)
    stage = LlmStage(ctx, model, ChatHistory())
    turn, gen = 1, ctx.control.generation
    speculative = Transcript(turn, gen, "And so am I fellow Americans.", True, 0.0,
                             other_readings=others)
    run_stage(stage, [speculative])  # not committed: the reply is held, the signal posted
    assert ctx.end_of_turn.scores(turn, gen).text == posted
    assert len(model.asked) == len({"And so am I fellow Americans.", *others} - {""})


def test_a_decode_set_aside_for_doubt_is_a_reading_and_a_loop_is_not():
    assert FittedDecode("And so my fellow Americans.", kept=False, looped=False).unsure_reading \
        == "And so my fellow Americans."
    assert FittedDecode("and so and so and so", kept=False, looped=True).unsure_reading is None
    assert FittedDecode("One, two, three.", kept=True, looped=False).unsure_reading is None
    assert FittedDecode("", kept=False, looped=False).unsure_reading is None
