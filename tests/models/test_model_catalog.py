"""The model catalog: precision and size from the table, a name or the files on disk, the
expected speed class per device, and the full-precision warning on Apple Silicon."""

import json
import os

import pytest

from engine.backends import BackendRegistry
from engine.models.model_catalog import (FAST, KNOWN, MODERATE, SLOW, backend_profile,
                                          full_precision_warning, parameters_from_name,
                                          placement_notes, precision_from_config,
                                          precision_from_name, profile, speed_class)
from tests.support.hub import make_hub_repo

GB = 1_000_000_000


@pytest.mark.parametrize(("name", "precision"), [
    ("mlx-community/Qwen3-4B-Instruct-2507-4bit", "4-bit"),
    ("mlx-community/Qwen3-8B-4bit-DWQ-053125", "4-bit"),
    ("mlx-community/whisper-large-v3-turbo-q4", "4-bit"),
    ("org/Model-Q4_K_M.gguf", "4-bit"),
    ("org/model-int8", "8-bit"),
    ("mlx-community/Qwen2.5-7B-Instruct-bf16", "bf16"),
    ("mlx-community/csm-1b-fp16", "fp16"),
    ("org/model-float32", "fp32"),
    ("Qwen/Qwen3-4B-Instruct-2507", ""),  # nothing in the name: unknown
])
def test_precision_from_name(name, precision):
    assert precision_from_name(name) == precision


def test_parameters_from_name():
    assert parameters_from_name("mlx-community/Qwen3-4B-Instruct-2507-4bit") == 4e9
    assert parameters_from_name("Qwen/Qwen2.5-0.5B-Instruct") == 0.5e9
    assert parameters_from_name("/models/SmolLM2-135M-Instruct.Q4_1.gguf") == 135e6
    assert parameters_from_name("/models/Llama-8B.Q4_1.gguf") == 8e9
    assert parameters_from_name("org/whisper-large-v3-turbo") is None


def test_precision_from_config_prefers_the_quantization():
    assert precision_from_config({"quantization": {"group_size": 64, "bits": 4},
                                  "torch_dtype": "bfloat16"}) == "4-bit"
    assert precision_from_config({"quantization_config": {"bits": 8}}) == "8-bit"
    assert precision_from_config({"torch_dtype": "bfloat16"}) == "bf16"
    assert precision_from_config({"dtype": "float16"}) == "fp16"
    assert precision_from_config({"n_mels": 128}) == ""


def test_speed_class_follows_the_weight_bytes_per_device():
    assert speed_class(2 * GB, "mlx") == FAST
    assert speed_class(4 * GB, "mlx") == MODERATE
    assert speed_class(8 * GB, "mps") == SLOW
    assert speed_class(8 * GB, "cuda") == FAST  # a datacenter GPU reads it in milliseconds
    assert speed_class(GB, "cpu") == MODERATE
    assert speed_class(None, "mlx") is None and speed_class(GB, "remote") is None


def test_the_registry_mlx_defaults_are_the_fast_quantized_builds():
    registry = BackendRegistry()
    llm = profile(registry.get("llm", "mlx-lm").hub_model("mlx") or "")
    stt = profile(registry.get("stt", "mlx-whisper").hub_model("mlx") or "")
    assert llm.known and llm.precision == "4-bit" and llm.speed("mlx") == FAST
    assert stt.known and "turbo" in stt.name and stt.speed("mlx") == FAST
    # Every hub default of every backend has a table entry, so the model manager and the
    # notes can give its size and class.
    defaults = {m.split(":", 1)[0] for stage in ("stt", "llm", "tts")
                for spec in registry.specs(stage) for m in spec.hub_models.values()}
    assert defaults <= {m.repo for m in KNOWN}


def test_a_known_model_profile_and_its_texts():
    bf16 = profile("mlx-community/Qwen3-4B-Instruct-2507-bf16")
    assert (bf16.precision, bf16.size_bytes, bf16.speed_text()) == ("bf16", 8_050_000_000,
                                                                   "slow on MLX")
    assert bf16.summary("mlx") == "bf16, 8.1 GB, expected slow on MLX"
    whisper = profile("mobiuslabsgmbh/faster-whisper-large-v3-turbo")
    assert whisper.speed_text() == "fast on CUDA · moderate on CPU"


def test_an_unknown_model_is_profiled_from_its_files(tmp_path):
    folder = tmp_path / "my-llm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(4 * GB)  # sparse: the size is what counts
    found = profile(str(folder), devices=("mlx",))
    assert (found.precision, found.size_bytes, found.speed("mlx")) == ("bf16", 4 * GB, MODERATE)
    assert not found.known


def test_an_unknown_hub_model_is_profiled_from_its_cached_snapshot(tmp_path):
    repo = make_hub_repo(tmp_path, "someone/Tiny-LM", {"config.json": 1, "model.safetensors": 5000})
    snapshot = next((repo / "snapshots").iterdir())
    (snapshot / "config.json").write_text(json.dumps({"quantization": {"bits": 4, "group_size": 64}}))
    found = profile("someone/Tiny-LM", hub_cache=tmp_path)
    assert (found.precision, found.size_bytes, found.devices) == ("4-bit", 5000, ("mlx",))
    assert profile("someone/Not-Cached-7B-bf16", hub_cache=tmp_path).size_bytes == 14 * GB


def test_mlx_lm_runs_a_gguf_in_float32():
    big = backend_profile("mlx-lm", "/models/Llama-8B.Q4_1.gguf", "mlx")
    assert (big.precision, big.size_bytes, big.speed("mlx")) == ("fp32", 32 * GB, SLOW)
    assert backend_profile("mlx-lm", "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                           "mlx").speed("mlx") == FAST


def test_a_full_precision_llm_on_apple_silicon_warns_with_the_fix():
    warning = full_precision_warning("llm", "mlx-lm", "mlx", "mlx-community/Qwen3-4B-Instruct-2507-bf16")
    assert warning is not None
    assert warning.startswith("llm: warning: mlx-community/Qwen3-4B-Instruct-2507-bf16 is bf16 "
                              "(8.1 GB) on MLX, expected slow")
    assert "21-34 s" in warning and "mlx-community/Qwen3-4B-Instruct-2507-4bit" in warning
    mps = full_precision_warning("llm", "transformers", "mps", "Qwen/Qwen3-4B-Instruct-2507")
    assert mps is not None and "pip install 'parley[mlx]'" in mps
    gguf = full_precision_warning("llm", "mlx-lm", "mlx", "/models/Llama-8B.Q4_1.gguf")
    assert gguf is not None and "converted from GGUF to float32" in gguf


@pytest.mark.parametrize(("stage", "backend", "kind", "model"), [
    ("llm", "mlx-lm", "mlx", "mlx-community/Qwen3-4B-Instruct-2507-4bit"),  # quantized
    ("llm", "mlx-lm", "mlx", "/models/SmolLM2-135M-Instruct.Q4_1.gguf"),  # small: fast anyway
    ("llm", "transformers", "cuda", "Qwen/Qwen3-4B-Instruct-2507"),  # not Apple Silicon
    ("stt", "mlx-whisper", "mlx", "mlx-community/whisper-large-v3-mlx"),  # not an LLM
    ("llm", "mlx-lm", "mlx", "/models/unknown-folder"),  # precision unknown
])
def test_no_warning_where_precision_does_not_make_it_slow(stage, backend, kind, model):
    assert full_precision_warning(stage, backend, kind, model) is None


def test_placement_notes_say_what_auto_picked_on_mlx_only():
    notes = placement_notes("llm", "mlx-lm", "mlx", "mlx-community/Qwen3-4B-Instruct-2507-4bit",
                            auto=True, bundled=False)
    assert len(notes) == 1 and notes[0].startswith(
        "llm: auto picked mlx-community/Qwen3-4B-Instruct-2507-4bit for MLX")
    assert notes[0].endswith("4-bit, 2.3 GB, expected fast on MLX")
    assert placement_notes("llm", "mlx-lm", "mlx", "mlx-community/Qwen3-4B-Instruct-2507-4bit",
                           auto=False, bundled=False) == []
    assert placement_notes("stt", "faster-whisper", "cpu", "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
                           auto=True, bundled=False) == []
    assert placement_notes("llm", "mlx-lm", "mlx", os.devnull, auto=True, bundled=True) == []
