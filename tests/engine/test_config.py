"""EngineConfig: TOML loading, overrides and the errors that name the key."""

import pytest

from engine.config import BargeIn, EngineConfig, config_fields, config_from_dict, load_config
from engine.errors import ConfigError


def test_toml_sections_and_top_level_keys_load(tmp_path):
    path = tmp_path / "parley.toml"
    path.write_text('device = "cpu"\n[stt]\ndevice = "cuda:1"\nbeam_size = 3\n'
                    '[turns]\nbarge_in = "mute-while-speaking"\nspeculative = true\n')
    config = load_config(path)
    assert config.device == "cpu"
    assert config.stt.device == "cuda:1" and config.stt.beam_size == 3
    assert config.turns.barge_in is BargeIn.MUTE_WHILE_SPEAKING and config.turns.speculative
    assert config.llm == EngineConfig().llm  # untouched sections keep their defaults


@pytest.mark.parametrize("text, fragment", [
    ("[stt]\nmodle = 'x'\n", "unknown key 'stt.modle'"),
    ("[sst]\nmodel = 'x'\n", "unknown section [sst]"),
    ("[vad]\nthreshold = 'high'\n", "'vad.threshold' must be a number"),
    ("[vad]\nthreshold = 3.0\n", "'vad.threshold' must be between 0.01 and 0.99"),
    ("[turns]\nbarge_in = 'sometimes'\n", "'turns.barge_in' must be one of full-duplex"),
    ("units = 1.5\n", "'units' must be an integer"),
    ("stt = 'cpu'\n", "'stt' must be a table"),
    ("[stt\nmodel = 1\n", "is not valid TOML"),
])
def test_malformed_config_names_the_key(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert fragment in str(info.value)
    assert str(path) in str(info.value)


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_flat_and_overrides_round_trip_every_setting():
    changed = {"stt.device": "cuda:0", "llm.max_new_tokens": "12", "turns.speculative": "true",
               "vad.threshold": "0.4", "turns.barge_in": "off", "device": "cpu"}
    config = EngineConfig().with_overrides(changed)
    flat = config.flat()
    assert flat["llm.max_new_tokens"] == 12 and flat["turns.speculative"] is True
    assert EngineConfig().with_overrides(flat) == config
    assert {name for name, _f, _t in config_fields()} == set(flat)


def test_config_from_dict_rejects_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        config_from_dict({"colour": "blue"})
