"""The model ladder: the shipped file loads, is ordered by size, points at real configs and
at today's defaults; bad ladder data is a ConfigError naming the file, rung and field."""

import json

import pytest

from engine.backends import BackendRegistry
from engine.errors import ConfigError
from engine.backends.ladder import BUILD_DEVICE_KINDS, DEFAULT_LADDER, STAGES, load_ladder


@pytest.fixture(scope="module")
def ladder():
    return load_ladder()


# ------------------------------------------------------------------ the shipped ladder

def test_the_shipped_ladder_holds_the_models_of_each_stage(ladder):
    ids = {stage: [r.id for r in ladder.rungs if r.stage == stage] for stage in STAGES}
    assert ids["stt"] == ["whisper-tiny.en", "whisper-base.en", "whisper-small.en",
                          "distil-large-v3", "whisper-large-v3-turbo"]
    assert {"smollm2-360m-instruct", "qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct",
            "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b-instruct-2507", "llama-3.2-1b-instruct",
            "llama-3.2-3b-instruct"} == set(ids["llm"])
    assert "kokoro-82m" in ids["tts"] and any(r.startswith("piper-") for r in ids["tts"])


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("kind", BUILD_DEVICE_KINDS)
def test_the_shipped_rungs_are_ordered_by_size_per_stage_and_device_kind(ladder, stage, kind):
    sizes = [r.parameters for r in ladder.rungs_for(stage, kind)]
    assert sizes == sorted(sizes)


def test_every_stage_has_rungs_on_a_cpu_and_on_cuda(ladder):
    for stage in STAGES:
        assert len(ladder.rungs_for(stage, "cpu")) >= 3, stage
        assert ladder.rungs_for(stage, "cuda"), stage


def test_each_hub_config_exists_parses_and_names_its_model(ladder):
    for rung in ladder.rungs:
        if rung.stage in ("stt", "llm"):
            assert rung.hub_config is not None, rung.id
        if rung.hub_config is None:
            continue
        config = json.loads(rung.hub_config.read_text(encoding="utf-8"))
        assert config.get("_name_or_path", rung.hub_id) == rung.hub_id
        if rung.stage == "llm":  # the sizes a speed prediction needs are there
            assert config["hidden_size"] > 0 and config["num_hidden_layers"] > 0


def test_each_build_names_a_backend_of_the_registry_that_runs_on_its_device(ladder):
    registry = BackendRegistry()
    for rung in ladder.rungs:
        for build in rung.builds:
            assert build.device_kind in registry.get(rung.stage, build.backend).devices


def test_the_registry_defaults_of_today_are_rungs_of_the_ladder(ladder):
    # The ladder describes what auto picks now; it must not drift away from it.
    registry = BackendRegistry()
    builds = {(rung.stage, b.backend, b.device_kind, b.repo) for rung in ladder.rungs
              for b in rung.builds}
    for stage, backend, kind in [("stt", "faster-whisper", "cpu"), ("stt", "faster-whisper", "cuda"),
                                 ("stt", "mlx-whisper", "mlx"), ("llm", "onnx-genai", "cpu"),
                                 ("llm", "transformers", "cuda"), ("llm", "mlx-lm", "mlx"),
                                 ("tts", "piper", "cpu"), ("tts", "kokoro", "cuda")]:
        default = registry.get(stage, backend).hub_model(kind)
        assert (stage, backend, kind, default) in builds


def test_english_only_models_speak_only_english(ladder):
    tiny = ladder.get("whisper-tiny.en")
    assert tiny.english_only and tiny.speaks("en") and not tiny.speaks("de")
    turbo = ladder.get("whisper-large-v3-turbo")
    assert not turbo.english_only and turbo.speaks("de") and turbo.speaks("yue")
    assert ladder.get("qwen3-1.7b").speaks("da")  # "multilingual": the card claims 119
    for rung in ladder.rungs:
        if ".en" in rung.hub_id:
            assert rung.english_only and rung.languages == ("en",), rung.id


def test_tools_licences_and_unverified_figures_are_data(ladder):
    assert ladder.get("qwen3-4b-instruct-2507").tools
    assert not ladder.get("smollm2-360m-instruct").tools
    assert ladder.get("qwen3-0.6b").thinking == "hybrid"
    assert ladder.get("qwen3-4b-instruct-2507").thinking == "none"
    llama = ladder.get("llama-3.2-1b-instruct").licence
    assert not llama.osi and "Llama 3.2" in llama.name
    assert ladder.get("whisper-small.en").licence.name == "MIT"
    assert ladder.get("qwen3-1.7b").build("cpu").download_bytes is None  # "unknown" in the file
    assert ladder.get("llama-3.2-3b-instruct").accuracy.value == 77.4
    assert ladder.get("distil-large-v3").accuracy.metric == "WER"


def test_an_unknown_rung_id_lists_the_ids(ladder):
    with pytest.raises(ConfigError, match=r"no rung 'gpt-5'.*whisper-tiny\.en"):
        ladder.get("gpt-5")


# ------------------------------------------------------------------ bad ladder data

_SMALL = """
schema = 1

[[rung]]
id = "tiny"
stage = "stt"
family = "whisper"
hub_id = "org/tiny.en"
parameters = 1000
licence = { name = "MIT", osi = true, url = "https://example.org/licence" }
languages = ["en"]
english_only = true
tools = false
thinking = "none"
hub_config = "tiny"
[rung.accuracy]
metric = "WER"
value = 5.6
benchmark = "LibriSpeech test-clean"
source = "https://example.org/paper"
[rung.builds.cpu]
backend = "faster-whisper"
repo = "org/faster-tiny.en"
precision = "int8"
download_bytes = 75_500_000

[[rung]]
id = "large"
stage = "stt"
family = "whisper"
hub_id = "org/large"
parameters = 2000
licence = { name = "MIT", osi = true, url = "https://example.org/licence" }
languages = ["en", "de"]
english_only = false
tools = false
thinking = "none"
hub_config = "large"
[rung.accuracy]
metric = "WER"
value = "unknown"
benchmark = "LibriSpeech test-clean"
source = "https://example.org/paper"
[rung.builds.cpu]
backend = "faster-whisper"
repo = "org/faster-large"
precision = "int8"
download_bytes = "unknown"
[rung.builds.mlx]
backend = "mlx-whisper"
repo = "org/large-mlx"
precision = "fp16"
download_bytes = 1_610_000_000
"""


def _load(tmp_path, text):
    configs = tmp_path / "configs"
    for name, hub_id in (("tiny", "org/tiny.en"), ("large", "org/large")):
        (configs / name).mkdir(parents=True, exist_ok=True)
        (configs / name / "config.json").write_text(json.dumps({"_name_or_path": hub_id}))
    path = tmp_path / "my-ladder.toml"
    path.write_text(text, encoding="utf-8")
    return load_ladder(path, configs=configs)


def _edit(old, new, count=1):
    assert _SMALL.count(old) >= count, old
    return _SMALL.replace(old, new, count)


def test_the_small_ladder_of_these_tests_loads(tmp_path):
    ladder = _load(tmp_path, _SMALL)
    assert [r.id for r in ladder.rungs_for("stt", "cpu")] == ["tiny", "large"]
    large = ladder.get("large")
    assert large.build("cpu").download_bytes is None and large.accuracy.value is None
    assert large.build("mlx").download_bytes == 1_610_000_000 and large.build("cuda") is None


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param(_edit("parameters = 1000\n", ""),
                 "rung 'tiny': missing field 'parameters'", id="missing field"),
    pytest.param(_edit("parameters = 1000", 'parameters = "big"'),
                 "rung 'tiny': 'parameters' = 'big' is not allowed; expected a whole number > 0",
                 id="wrong type"),
    pytest.param(_edit("english_only = true", 'english_only = "yes"'),
                 "'english_only' = 'yes' is not allowed; expected true or false", id="not a boolean"),
    pytest.param(_edit('backend = "faster-whisper"', 'backend = "fast-whisper"'),
                 "'builds.cpu': 'backend' = 'fast-whisper' is not allowed; expected a stt backend: "
                 "faster-whisper, transformers-whisper, mlx-whisper", id="unknown backend"),
    pytest.param(_edit('backend = "faster-whisper"', 'backend = "mlx-whisper"'),
                 "'backend' = 'mlx-whisper' is not allowed; expected a backend that runs on cpu; "
                 "mlx-whisper runs on mlx", id="backend on the wrong device"),
    pytest.param(_edit("[rung.builds.mlx]", "[rung.builds.tpu]"),
                 "rung 'large': 'builds.tpu': 'tpu' is not a device kind; allowed: cpu, cuda, mps, mlx",
                 id="unknown device kind"),
    pytest.param(_edit("parameters = 1000", "parameters = 3000"),
                 "rung 'large': 'parameters' = 2,000 is out of order: it comes after 'tiny' (3,000)",
                 id="sizes out of order"),
    pytest.param(_edit('id = "large"', 'id = "tiny"'),
                 "rung 2: 'id' = 'tiny' is a duplicate", id="duplicate id"),
    pytest.param(_edit("download_bytes = 75_500_000", "download_byte = 75_500_000"),
                 "unknown field 'download_byte'", id="misspelt field"),
    pytest.param(_edit('precision = "int8"', 'precision = "q4_K_M"'),
                 "'precision' = 'q4_K_M' is not allowed; expected one of fp32", id="unknown precision"),
    pytest.param(_edit('languages = ["en"]\nenglish_only = true', 'languages = "multilingual"\n'
                       'english_only = false'),
                 "'english_only' = false, but 'org/tiny.en' is an English-only (.en) model",
                 id=".en model claiming other languages"),
    pytest.param(_edit('languages = ["en", "de"]', 'languages = ["en", "German"]'),
                 "'German' is not an ISO 639 code", id="bad language code"),
    pytest.param(_edit('languages = ["en", "de"]', 'languages = "europe"'),
                 "'languages' = 'europe' is not allowed", id="unknown language set"),
    pytest.param(_edit('hub_config = "large"', 'hub_config = "huge"'),
                 "'hub_config' = 'huge' is not allowed", id="missing hub config"),
    pytest.param(_edit('hub_config = "large"', 'hub_config = "tiny"'),
                 "expected the config of 'org/large'", id="another model's hub config"),
    pytest.param(_edit('[rung.accuracy]\nmetric = "WER"\nvalue = 5.6\nbenchmark = "LibriSpeech '
                       'test-clean"\nsource = "https://example.org/paper"\n', ""),
                 "rung 'tiny': missing field 'accuracy'", id="stt without accuracy"),
    pytest.param(_edit("value = 5.6", "value = -1"),
                 "'value' = -1 is not allowed; expected a number >= 0, or 'unknown'",
                 id="negative accuracy"),
    pytest.param(_edit('url = "https://example.org/licence"', 'url = "example.org"'),
                 "'licence': 'url' = 'example.org' is not allowed; expected an https:// URL",
                 id="licence without a URL"),
    pytest.param(_edit("tools = false", "tools = true"),
                 "'tools' = true on a stt rung", id="tools on an stt rung"),
    pytest.param(_edit("schema = 1", "schema = 2"), "'schema' = 2 is not supported", id="schema"),
    pytest.param(_edit("[[rung]]\nid = \"tiny\"", "[[rung]\nid = \"tiny\""),
                 "is not valid TOML", id="not TOML"),
])
def test_bad_ladder_data_is_a_clear_error(tmp_path, text, expected):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    message = str(caught.value)
    assert "my-ladder.toml" in message  # the file is named
    assert expected in message


def test_a_missing_ladder_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read the model ladder .*nowhere\.toml"):
        load_ladder(tmp_path / "nowhere.toml")


def test_the_default_ladder_is_the_resources_file():
    assert DEFAULT_LADDER.name == "ladder.toml" and DEFAULT_LADDER.parent.name == "resources"
