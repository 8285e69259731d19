"""What applying a changed setting costs (engine/config_diff.py)."""

from __future__ import annotations

import pytest

from engine.config import STAGES, EngineConfig, config_fields
from engine.config_diff import ConfigDiff, Effect, describe, diff_configs, effect_of

RUNTIME_KEYS = ["vad.threshold", "vad.min_silence_ms", "llm.temperature", "llm.system_prompt",
                "llm.max_new_tokens", "stt.language", "stt.beam_size", "tts.speed", "tts.voice",
                "turns.reopen_grace_ms", "turns.barge_in", "turns.speculative"]

RELOADS = {"stt.model": "STT", "stt.dtype": "STT", "stt.backend": "STT", "stt.device": "STT",
           "llm.device": "LLM", "llm.model": "LLM", "llm.dtype": "LLM",
           "tts.backend": "TTS", "tts.model": "TTS", "vad.model": "VAD", "vad.device": "VAD"}


def test_every_setting_has_an_effect_and_a_description():
    names = [name for name, _field, _tp in config_fields()]
    assert len(names) == len(set(names)) == len(EngineConfig().flat())
    for name in names:
        assert isinstance(effect_of(name), Effect), name
        assert describe(name), name


def test_runtime_fields_are_exactly_those_declared_runtime():
    for name, field, _tp in config_fields():
        assert (effect_of(name) is Effect.RUNTIME) == bool(field.metadata.get("runtime")), name


@pytest.mark.parametrize("key", RUNTIME_KEYS)
def test_runtime_settings_apply_now(key):
    assert effect_of(key) is Effect.RUNTIME
    assert describe(key) == "applies now"


@pytest.mark.parametrize("key", sorted(RELOADS))
def test_model_settings_reload_their_stage(key):
    assert effect_of(key) is Effect.RELOAD
    assert describe(key) == f"reloads the {RELOADS[key]} model"


def test_the_default_device_reloads_every_stage():
    assert effect_of("device") is Effect.RELOAD
    assert describe("device") == "reloads the models that use the default device"
    diff = diff_configs(EngineConfig(), EngineConfig().with_overrides({"device": "cpu"}))
    assert diff.reload_stages == STAGES == ("vad", "stt", "llm", "tts")
    assert diff.keys() == ("device",)


def test_audio_devices_reopen_the_microphone_or_the_speaker():
    assert effect_of("audio.input_device") is Effect.AUDIO
    assert describe("audio.input_device") == "reopens the microphone"
    assert effect_of("audio.output_device") is Effect.AUDIO
    assert describe("audio.output_device") == "reopens the speaker"
    assert effect_of("audio.capture_buffer_s") is Effect.AUDIO
    assert describe("audio.capture_buffer_s") == "reopens the microphone"


def test_units_restart_the_pipeline():
    assert effect_of("units") is Effect.RESTART
    assert describe("units") == "restarts the pipeline (the conversation starts over)"


@pytest.mark.parametrize("key", ["llm.temprature", "nope", "llm", "audio.input", ""])
def test_an_unknown_key_raises_key_error(key):
    with pytest.raises(KeyError):
        effect_of(key)
    with pytest.raises(KeyError):
        describe(key)


# ---------------------------------------------------------------- diff_configs


def test_identical_configs_differ_in_nothing():
    diff = diff_configs(EngineConfig(), EngineConfig())
    assert isinstance(diff, ConfigDiff)
    assert diff.empty and diff.changes == () and diff.reload_stages == ()
    assert diff.summary() == "no settings changed"
    same = EngineConfig().with_overrides({"llm.temperature": 0.0, "stt.model": "auto"})
    assert diff_configs(EngineConfig(), same).empty


def test_a_runtime_change_and_a_model_change():
    old = EngineConfig()
    new = old.with_overrides({"llm.temperature": 0.7, "stt.model": "tiny.en"})
    diff = diff_configs(old, new)
    assert not diff.empty
    by_key = {c.key: c for c in diff.changes}
    assert set(by_key) == {"llm.temperature", "stt.model"}
    temperature, model = by_key["llm.temperature"], by_key["stt.model"]
    assert (temperature.old, temperature.new, temperature.effect) == (0.0, 0.7, Effect.RUNTIME)
    assert (model.old, model.new, model.effect) == ("auto", "tiny.en", Effect.RELOAD)
    assert temperature.description == "applies now"
    assert model.description == "reloads the STT model"
    assert diff.reload_stages == ("stt",)
    assert diff.keys(Effect.RUNTIME) == ("llm.temperature",)
    assert diff.keys(Effect.RELOAD) == ("stt.model",)
    assert diff.keys(Effect.AUDIO) == ()
    summary = diff.summary()
    assert "llm.temperature applied now" in summary
    assert "reloaded the STT model" in summary
    assert "stt.model" not in summary.replace("reloaded the STT model", "")


def test_reload_stages_are_in_pipeline_order_without_repeats():
    new = EngineConfig().with_overrides({"tts.backend": "piper", "stt.dtype": "int8",
                                         "stt.model": "tiny.en", "llm.device": "cpu"})
    diff = diff_configs(EngineConfig(), new)
    assert diff.reload_stages == ("stt", "llm", "tts")
    assert "reloaded the STT, LLM, TTS models" in diff.summary()


def test_summary_of_audio_and_restart_changes():
    new = EngineConfig().with_overrides({"audio.output_device": "3", "units": 2,
                                         "tts.speed": 1.5})
    diff = diff_configs(EngineConfig(), new)
    assert diff.reload_stages == ()
    summary = diff.summary()
    assert "tts.speed applied now" in summary
    assert "audio.output_device: reopens the speaker" in summary
    assert "units: restarts the pipeline" in summary
    assert "reloaded" not in summary


def test_changes_record_old_and_new_values_in_both_directions():
    a = EngineConfig().with_overrides({"vad.threshold": 0.25})
    b = EngineConfig().with_overrides({"vad.threshold": 0.75})
    (forward,) = diff_configs(a, b).changes
    (backward,) = diff_configs(b, a).changes
    assert (forward.key, forward.old, forward.new) == ("vad.threshold", 0.25, 0.75)
    assert (backward.old, backward.new) == (0.75, 0.25)
