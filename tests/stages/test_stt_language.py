"""``stt.language = auto``: each turn's language detected, held across the conversation
unless a turn is long and sure enough (``engine/stages/stt_language.py``), and carried on
the transcript, its event and the turn's record; the settings that ask for it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.backends.base import SttModel, SttResult
from engine.config import EngineConfig, SttConfig
from engine.errors import ConfigError
from engine.measures import Figure
from engine.pipeline.events import FinalTranscript
from engine.pipeline.messages import SpeechSegment, Transcript
from engine.pipeline.stage import StageContext
from engine.stages.stt_language import LanguageHold, switches, within
from engine.stages.stt_stage import SttStage
from engine.stages.vad_stage import PartialSequence
from tests.support.stage_harness import run_stage, stage_context

RATE = 16000


class DetectingStt(SttModel):
    """Detects the next scripted language probabilities when no language is asked for;
    its text names the language it decoded in, so a test sees which one was used."""

    sample_rate = RATE
    actual_device = "cpu"

    def __init__(self, detections: list[tuple[tuple[str, float], ...]]) -> None:
        self.detections = list(detections)
        self.asked: list[str | None] = []

    def transcribe(self, audio, language=None, beam_size=1, fit_window_s=None):
        self.asked.append(language)
        if language is not None:
            return SttResult(f"words in {language}", audio.size / RATE, 0.01, language=language)
        detected = self.detections.pop(0)
        return SttResult(f"words in {detected[0][0]}", audio.size / RATE, 0.01,
                         language=detected[0][0], language_probabilities=detected)

    def check_language(self, language):
        pass


def stage_for(model: SttModel, **stt: str) -> tuple[SttStage, StageContext, list]:
    config = dataclasses.replace(EngineConfig(), stt=SttConfig()).with_overrides(
        {f"stt.{key}": value for key, value in stt.items()})
    events: list = []  # of every turn run
    ctx = stage_context(config=config)
    ctx.events.subscribe(events.append)
    return SttStage(ctx, model, PartialSequence()), ctx, events


def turn(stage: SttStage, ctx: StageContext, seconds: float, turn_id: int) -> Transcript:
    voiced = round(seconds * RATE)
    msg = SpeechSegment(turn_id, ctx.control.generation, np.zeros(voiced, np.float32), RATE, True,
                        100.0, 100.0 + seconds, voiced_samples=voiced)
    out, _events = run_stage(stage, [msg], commit=True)  # the turn has ended: its events go out
    return next(m for m in out if isinstance(m, Transcript))


def test_a_long_sure_turn_sets_the_language_and_a_short_unsure_one_keeps_it():
    model = DetectingStt([
        (("fr", 0.8), ("en", 0.1)),    # 3 s, sure: the conversation is in French
        (("en", 0.6), ("fr", 0.3)),    # 1 s "Merci." heard as English: kept French
        (("en", 0.95), ("fr", 0.02)),  # 4 s of sure English: switches
    ])
    stage, ctx, events = stage_for(model, language="auto")
    first = turn(stage, ctx, 3.0, 1)
    assert (first.text, first.language, first.language_probability) == ("words in fr", "fr", 0.8)
    second = turn(stage, ctx, 1.0, 2)
    # Decoded again in the held language, with Whisper's probability of it in this turn.
    assert (second.text, second.language, second.language_probability) == ("words in fr", "fr", 0.3)
    assert model.asked[1:3] == [None, "fr"]
    third = turn(stage, ctx, 4.0, 3)
    assert (third.text, third.language) == ("words in en", "en")
    finals = [e for e in events if isinstance(e, FinalTranscript)]
    assert [(e.language, e.language_probability) for e in finals] == [
        ("fr", 0.8), ("fr", 0.3), ("en", 0.95)]
    record = ctx.metrics.turn(0, 2)
    assert record is not None and record.language == "fr"
    assert record.figures[Figure.STT_LANGUAGE_P] == pytest.approx(0.3)


def test_the_allowed_languages_narrow_the_detection():
    model = DetectingStt([(("de", 0.5), ("fr", 0.3), ("en", 0.2))])
    stage, ctx, _events = stage_for(model, language="auto", languages="en, FR")
    heard = turn(stage, ctx, 3.0, 1)
    assert heard.language == "fr" and heard.language_probability == pytest.approx(0.6)
    assert model.asked == [None, "fr"]


def test_a_language_set_is_asked_for_and_reported_without_a_probability():
    model = DetectingStt([])
    stage, ctx, _events = stage_for(model, language="es")
    heard = turn(stage, ctx, 1.0, 1)
    assert (heard.language, heard.language_probability, model.asked) == ("es", None, ["es"])


def test_the_switch_rule():
    # A turn of 2 s or more decides (bench language: the most turns right), a shorter
    # one only where sure.
    assert switches(2.0, 0.2) and switches(0.5, 0.95)
    assert not switches(1.9, 0.8)
    hold = LanguageHold()
    # Nothing held yet: an unsure turn is heard in its own language but sets nothing.
    choice = hold.choose((("de", 0.4), ("en", 0.3)), 1.0)
    assert (choice.language, choice.switched, hold.language) == ("de", False, None)
    assert within((("de", 0.5), ("fr", 0.25)), ()) == (("de", 0.5), ("fr", 0.25))


@pytest.mark.parametrize(("raw", "expected"), [("auto", "auto"), ("", "auto"), (" FR ", "fr"),
                                               ("yue", "yue")])
def test_stt_language_takes_auto_or_a_whisper_code(raw, expected):
    assert EngineConfig().with_overrides({"stt.language": raw}).stt.language == expected


def test_unknown_languages_are_refused_naming_the_setting():
    with pytest.raises(ConfigError, match=r"'stt.language' = 'french'.*auto or a Whisper language code"):
        EngineConfig().with_overrides({"stt.language": "french"})
    with pytest.raises(ConfigError, match=r"'stt.languages' = 'xx'.*Whisper language code"):
        EngineConfig().with_overrides({"stt.languages": "fr, xx"})
    config = EngineConfig().with_overrides({"stt.languages": "fr, de,fr"})
    assert config.stt.languages == "fr,de" and config.stt.allowed_languages == ("fr", "de")
