"""The STT stage continues a turn that paused: the final segment after the pause decodes
only the new audio, with the words heard before it as context (``stt.continue_turn``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.backends.base import SttModel, SttResult
from engine.config import EngineConfig, SttConfig, SttWindow
from engine.pipeline.control import CancelReason
from engine.pipeline.messages import SpeechSegment, Transcript
from engine.pipeline.stage import StageContext
from engine.stages.stt_stage import MIN_CONTINUED_S, MIN_HEARD_S, SttStage, join_after_pause, pause_context
from engine.stages.vad_stage import PartialSequence
from tests.support.stage_harness import run_stage, stage_context

RATE = 16000


class ScriptedStt(SttModel):
    """Answers each call with the next text; records what it was asked to decode."""

    sample_rate = RATE
    actual_device = "cpu"

    def __init__(self, texts: list[str], continues: bool = True) -> None:
        self.texts = list(texts)
        self.continues = continues
        self.calls: list[tuple[str, int, str | None]] = []  # (kind, samples, previous)

    def transcribe(self, audio, language=None, beam_size=1, fit_window_s=None):
        self.calls.append(("whole", audio.size, None))
        return SttResult(self.texts.pop(0), audio.size / RATE, 0.01)

    def check_language(self, language):
        pass

    def continues_transcripts(self) -> bool:
        return self.continues

    def continue_transcript(self, audio, previous, language=None, beam_size=1, fit_window_s=None):
        self.calls.append(("continued", audio.size, previous))
        return SttResult(self.texts.pop(0), audio.size / RATE, 0.01)


def stage_for(model: ScriptedStt, stt: SttConfig | None = None) -> tuple[SttStage, StageContext]:
    config = EngineConfig()
    if stt is not None:
        config = dataclasses.replace(config, stt=stt)
    ctx = stage_context(config=config)
    return SttStage(ctx, model, PartialSequence()), ctx


def segment(ctx: StageContext, voiced_s: float, turn: int = 1, pad_s: float = 0.2) -> SpeechSegment:
    voiced = round(voiced_s * RATE)
    audio = np.zeros(voiced + round(pad_s * RATE), np.float32)
    return SpeechSegment(turn, ctx.control.generation, audio, RATE, True, 100.0, 100.0 + voiced_s,
                         voiced_samples=voiced)


def transcripts(stage: SttStage, msg: SpeechSegment) -> list[str]:
    """The texts the stage sends on for ``msg``, processed even if its turn was cancelled
    (it stands for a segment cancelled while it was decoded)."""
    out, _events = run_stage(stage, [msg], skip_stale=False)
    return [m.text for m in out if isinstance(m, Transcript)]


def test_after_a_pause_only_the_new_audio_is_decoded_with_the_words_before_as_context():
    model = ScriptedStt(["And so my fellow Americans, ask not.", "Ask what you can do."])
    stage, ctx = stage_for(model)
    first = segment(ctx, 7.0)
    assert transcripts(stage, first) == ["And so my fellow Americans, ask not."]
    ctx.control.cancel_turn(1, CancelReason.REOPENED)  # the user went on speaking
    second = segment(ctx, 10.0)
    assert transcripts(stage, second) == ["And so my fellow Americans, ask not. Ask what you can do."]
    kind, samples, previous = model.calls[-1]
    # Without the period Whisper put where the pause cut the words (``pause_context``).
    assert kind == "continued" and previous == "And so my fellow Americans, ask not"
    # From the end of the first revision's speech: its padding was silence after it.
    assert samples == second.audio.size - first.voiced_samples


def test_a_revision_dropped_while_it_was_decoded_still_gives_its_words():
    model = ScriptedStt(["One long clause,", "and the rest."])
    stage, ctx = stage_for(model)
    first = segment(ctx, 6.0)
    ctx.control.cancel_turn(1, CancelReason.REOPENED)  # reopened while STT was running
    assert transcripts(stage, first) == []  # stale: nothing goes on to the LLM
    assert transcripts(stage, segment(ctx, 8.0)) == ["One long clause, and the rest."]
    assert model.calls[-1][0] == "continued"


@pytest.mark.parametrize("first_s, second_s, why", [
    (MIN_HEARD_S - 1.0, MIN_HEARD_S + 3.0, "too little speech heard to trust its words"),
    (6.0, 6.0 + MIN_CONTINUED_S / 2, "too little new speech to decode on its own"),
])
def test_the_whole_turn_is_decoded_when_continuing_would_risk_words(first_s, second_s, why):
    model = ScriptedStt(["And so am I.", "And so my fellow Americans."])
    stage, ctx = stage_for(model)
    transcripts(stage, segment(ctx, first_s))
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert transcripts(stage, segment(ctx, second_s)) == ["And so my fellow Americans."], why
    assert [kind for kind, _, _ in model.calls] == ["whole", "whole"], why


def test_a_continuation_is_taken_as_heard_only_when_it_decoded_enough_speech_itself():
    # Pauses at 6, 9, 15 and 17 s, the end at 19 s: the 3 s after the first pause are too
    # little to trust on their own, the 6 s after that are enough.
    model = ScriptedStt(["First part.", "second part.", "third part.", "fourth.", "end."])
    stage, ctx = stage_for(model)
    for seconds in (6.0, 9.0, 15.0, 17.0, 19.0):
        transcripts(stage, segment(ctx, seconds))
        ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert [(kind, previous) for kind, _, previous in model.calls] == [
        ("whole", None), ("continued", "First part"), ("continued", "First part"),
        ("continued", "First part third part"), ("continued", "First part third part")]
    assert model.calls[-1][1] == round((19.0 + 0.2 - 15.0) * RATE)  # from the 15 s pause


@pytest.mark.parametrize("stt, continues", [
    (SttConfig(continue_turn=False), True),
    (SttConfig(window=SttWindow.FULL), True),
    (SttConfig(), False),  # a backend that cannot take earlier text
])
def test_off_full_window_or_a_backend_that_cannot_decodes_the_whole_turn(stt, continues):
    model = ScriptedStt(["Heard first.", "Heard whole."], continues=continues)
    stage, ctx = stage_for(model, stt)
    transcripts(stage, segment(ctx, 6.0))
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert transcripts(stage, segment(ctx, 9.0)) == ["Heard whole."]
    assert [kind for kind, _, _ in model.calls] == ["whole", "whole"]


def test_another_turn_never_continues_this_ones_words():
    model = ScriptedStt(["Turn one.", "Turn two."])
    stage, ctx = stage_for(model)
    transcripts(stage, segment(ctx, 6.0, turn=1))
    assert transcripts(stage, segment(ctx, 9.0, turn=2)) == ["Turn two."]
    assert model.calls[-1][0] == "whole"


def test_continuing_is_a_runtime_setting_on_by_default():
    from engine.config_diff import Effect, effect_of

    assert SttConfig().continue_turn is True
    assert effect_of("stt.continue_turn") is Effect.RUNTIME


@pytest.mark.parametrize("heard, after, joined", [
    # Whisper's period at the cut goes: the words after the pause go on the sentence.
    ("Capital in the 21st Century, argues for a.", "4% global wealth tax.",
     "Capital in the 21st Century, argues for a 4% global wealth tax."),
    ("implemented in the world.", ", if at all.", "implemented in the world, if at all."),
    # A capital that is not "I": Whisper heard a new sentence begin after the pause.
    ("ask not what your country can do for you.", "Ask what you can do.",
     "ask not what your country can do for you. Ask what you can do."),
    ("And so my fellow Americans.", "I'm asking.", "And so my fellow Americans I'm asking."),
    # Nothing more heard after the pause: the words before it as they were.
    ("Well, good luck with that.", "", "Well, good luck with that."),
    ("", "Hello there.", "Hello there."),
])
def test_the_words_after_a_pause_join_the_sentence_the_pause_cut(heard, after, joined):
    assert join_after_pause(heard, after) == joined


def test_the_context_after_a_pause_has_no_sentence_end_the_cut_made():
    assert pause_context("Thomas Piketty in his book, I use for a.") == (
        "Thomas Piketty in his book, I use for a")
    assert pause_context("Who is it? ") == "Who is it"
    assert pause_context("And the answer that comes back is...") == (
        "And the answer that comes back is")
    assert pause_context("in his book,") == "in his book,"  # a comma says the speaker went on


def test_the_continuation_is_asked_without_the_cut_sentence_end_and_joined_to_it():
    model = ScriptedStt(["Thomas Piketty argues for a.", "4% global wealth tax."])
    stage, ctx = stage_for(model)
    transcripts(stage, segment(ctx, 6.0))
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert transcripts(stage, segment(ctx, 9.0)) == [
        "Thomas Piketty argues for a 4% global wealth tax."]
    assert model.calls[-1][2] == "Thomas Piketty argues for a"
