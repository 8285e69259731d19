"""``make gpu-check``'s default path on the CPU, with tiny widths: the random Whisper is
converted for CTranslate2 and runs through Parley's faster-whisper backend (as ``auto``
loads it), the default LLM through the transformers backend, each on the device asked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.bench import gpu_default_path, gpu_models, random_weights


@pytest.fixture
def tiny_whisper(monkeypatch):
    """Whisper large-v3-turbo's config (128 mel bins, its vocabulary) at tiny widths."""
    real = random_weights.hub_config(random_weights.WHISPER)
    small = {**real, "d_model": 64, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
             "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
    monkeypatch.setattr(random_weights, "hub_config",
                        lambda name: small if name == random_weights.WHISPER else real)
    return small


def test_the_default_stt_is_faster_whisper_on_ctranslate2(tiny_whisper, tmp_path):
    pytest.importorskip("ctranslate2")
    source = random_weights.build_random_whisper(tmp_path / "whisper", layers=1)
    audio = np.zeros(16000 * 3, dtype=np.float32)
    doc = gpu_default_path.time_stt(source, "cpu", audio, runs=1, layers=1)
    assert (doc["backend"], doc["actual_device"]) == ("faster-whisper", "cpu")
    assert doc["compute_type"].startswith("int8")  # auto's CPU compute type (int8 weights)
    assert doc["model"] == str(tmp_path / "whisper-ct2")
    assert len(doc["fit_10s_s"]) == len(doc["full_30s_s"]) == 1
    # The conversion kept the 128 mel bins of large-v3 (faster-whisper reads them from the
    # preprocessor config it was given) and is made once.
    features = json.loads((tmp_path / "whisper-ct2" / "preprocessor_config.json").read_text())
    assert features["feature_size"] == 128
    assert gpu_models.build_ct2_whisper(source, 1) == tmp_path / "whisper-ct2"
    (check,) = gpu_default_path.checks({"stt": doc, "llm": {**doc, "backend": "transformers"}},
                                       "cpu")[:1]
    assert check == {"name": "default-path stt (faster-whisper) on cpu", "ok": True,
                     "detail": "ran on cpu"}
    wrong = gpu_default_path.checks({"stt": doc, "llm": {**doc, "backend": "transformers"}}, "cuda:0")
    assert [c["ok"] for c in wrong] == [False, False]


def test_the_default_llm_runs_on_the_transformers_backend(tmp_path):
    pytest.importorskip("transformers")
    name = gpu_models.check_stack("cpu")["llm"]
    folder = gpu_models.build_llm(tmp_path / name, name, layers=1)
    doc = gpu_default_path.time_llm(folder, "cpu", runs=1, max_new_tokens=4)
    assert (doc["backend"], doc["actual_device"]) == ("transformers", "cpu")
    assert len(doc["first_token_s"]) == 1 and doc["tokens_per_s"][0] > 0


def test_the_plan_names_the_default_cuda_path():
    text = gpu_default_path.plan("cuda")
    assert text == ("times the default path on cuda:0: faster-whisper on CTranslate2 (float16, "
                    "the random Whisper converted) at the fitted 10 s and the full 30 s window, "
                    "and Qwen3-4B-Instruct-2507 on the transformers backend (first token, tokens "
                    "per second)")
    cpu = gpu_default_path.plan("cpu")
    assert "(int8," in cpu and "SmolLM2-360M-Instruct" in cpu
