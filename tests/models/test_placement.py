"""Placement: per-stage devices, auto choices, and the errors before any model loads."""

import pytest

from engine.backends import BackendRegistry, BackendSpec
from engine.config import EngineConfig
from engine.runtime.devices import Device, DeviceInfo, discover_devices, parse_device
from engine.errors import ConfigError, DeviceError, MissingDependencyError
from engine.runtime.hub import HubStatus
from engine.models.placement import resolve_placements

OFFLINE = HubStatus(offline=True)
CPU_ONLY = [DeviceInfo(Device("cpu"), "CPU", True),
            DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found"),
            DeviceInfo(Device("mps"), "Apple GPU", False, "MPS exists only on macOS"),
            DeviceInfo(Device("mlx"), "MLX", True)]
ONE_GPU = [DeviceInfo(Device("cpu"), "CPU", True),
           DeviceInfo(Device("cuda", 0), "NVIDIA H200", True, total_bytes=2**37, free_bytes=2**36),
           DeviceInfo(Device("mps"), "Apple GPU", False, "MPS exists only on macOS")]


def test_parse_device_strings():
    assert parse_device("auto") is None
    assert parse_device("cuda") == Device("cuda", 0)
    assert str(parse_device("CUDA:2")) == "cuda:2"
    with pytest.raises(DeviceError, match=r"'stt\.device' = 'gpu' is not a device"):
        parse_device("gpu", "stt.device")
    with pytest.raises(DeviceError, match="only CUDA devices take an index"):
        parse_device("mps:1")


def test_discovery_lists_every_kind_and_cpu_is_present():
    devices = discover_devices()
    assert [d.device.kind for d in devices][:1] == ["cpu"] and devices[0].available
    assert {d.device.kind for d in devices} == {"cpu", "cuda", "mps", "mlx"}
    assert all(d.available or d.reason for d in devices)


def test_offline_auto_picks_the_bundled_stack_on_cpu():
    placements = resolve_placements(EngineConfig(), CPU_ONLY, hub=OFFLINE)
    assert {s: p.backend for s, p in placements.items()} == {
        "vad": "silero", "stt": "faster-whisper", "llm": "onnx-genai", "tts": "piper"}
    assert all(str(p.device) == "cpu" for p in placements.values())
    assert placements["stt"].bundled and placements["llm"].bundled and placements["tts"].bundled
    assert placements["llm"].model.endswith(".gguf")
    assert any("bundled offline model" in n for p in placements.values() for n in p.notes)


def test_auto_llm_is_transformers_on_a_gpu_and_onnx_genai_on_the_cpu():
    on_gpu = resolve_placements(EngineConfig(), ONE_GPU, hub=OFFLINE)["llm"]
    assert (on_gpu.backend, str(on_gpu.device)) == ("transformers", "cuda:0")
    for asked in ({"device": "cpu"}, {"llm.device": "cpu"}):
        placed = resolve_placements(EngineConfig().with_overrides(asked), ONE_GPU, hub=OFFLINE)["llm"]
        assert (placed.backend, str(placed.device)) == ("onnx-genai", "cpu"), asked
    explicit = EngineConfig().with_overrides({"llm.backend": "transformers"})
    assert resolve_placements(explicit, CPU_ONLY, hub=OFFLINE)["llm"].backend == "transformers"


def test_global_device_and_per_stage_override():
    config = EngineConfig().with_overrides({"device": "cuda", "stt.model": "/models/whisper",
                                            "llm.model": "/models/lm", "tts.device": "cpu"})
    placements = resolve_placements(config, ONE_GPU, hub=OFFLINE)
    assert str(placements["stt"].device) == "cuda:0"
    assert str(placements["llm"].device) == "cuda:0"
    assert str(placements["tts"].device) == "cpu"
    assert str(placements["vad"].device) == "cpu"  # silero runs on the CPU only: noted
    assert any("cannot run on cuda:0" in n for n in placements["vad"].notes)


def test_missing_gpu_names_the_stage_and_the_devices_present():
    config = EngineConfig().with_overrides({"llm.device": "cuda:3"})
    with pytest.raises(DeviceError) as info:
        resolve_placements(config, CPU_ONLY, hub=OFFLINE)
    message = str(info.value)
    assert "llm stage" in message and "cuda:3" in message and "devices present: cpu, mlx" in message
    with pytest.raises(DeviceError, match=r"no such GPU.*cpu, cuda:0"):
        resolve_placements(config, ONE_GPU, hub=OFFLINE)


def test_backend_that_cannot_run_on_the_device_is_refused():
    config = EngineConfig().with_overrides({"stt.backend": "faster-whisper", "stt.device": "mps"})
    with pytest.raises(DeviceError, match="stt stage: backend 'faster-whisper' cannot run on mps"):
        resolve_placements(config, CPU_ONLY, hub=OFFLINE)


def test_unknown_backend_lists_the_choices():
    config = EngineConfig().with_overrides({"tts.backend": "espeak"})
    with pytest.raises(ConfigError) as info:
        resolve_placements(config, CPU_ONLY, hub=OFFLINE)
    assert "'tts.backend' = 'espeak'" in str(info.value) and "piper" in str(info.value)


def test_missing_optional_package_gives_the_pip_command():
    registry = BackendRegistry((
        BackendSpec("vad", "silero", "engine.backends.vad.silero", ("silero_vad",), "offline", ("cpu",)),
        BackendSpec("stt", "mlx-whisper", "engine.backends.stt.mlx_whisper",
                    ("mlx_whisper_not_installed_here",), "mlx", ("mlx",)),
    ))
    config = EngineConfig().with_overrides({"stt.device": "mlx"})
    from engine.models.placement import _Resolver

    with pytest.raises(MissingDependencyError) as info:
        _Resolver(config, CPU_ONLY, registry, OFFLINE).resolve("stt")
    assert "pip install 'parley[mlx]'" in str(info.value)


def _mac_devices(monkeypatch):
    """What discovery reports on a Mac, through the real discovery code."""
    import platform

    import torch  # noqa: F401 - torch picks its libraries by platform when first imported: not a faked one
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    devices = [d for d in discover_devices() if d.device.kind != "mps"]
    return devices + [DeviceInfo(Device("mps"), "Apple GPU (Metal)", True)]


def _apple_silicon_with_cache(monkeypatch, tmp_path, *repos):
    """Apple Silicon simulated, with ``repos`` in the local Hugging Face cache (as after
    a first run)."""
    import engine.models.placement as placement_module

    monkeypatch.setattr(placement_module, "is_apple_silicon", lambda: True)
    for repo in repos:
        config_file = tmp_path / f"models--{repo.replace('/', '--')}" / "snapshots" / "abc" / "config.json"
        config_file.parent.mkdir(parents=True)
        config_file.write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    return _mac_devices(monkeypatch)


MAC_DEFAULTS = ("mlx-community/whisper-large-v3-turbo", "mlx-community/Qwen3-4B-Instruct-2507-4bit",
                "hexgrad/Kokoro-82M")


def test_apple_silicon_auto_picks_mlx_stages_and_kokoro_on_mps(monkeypatch, tmp_path):
    devices = _apple_silicon_with_cache(monkeypatch, tmp_path, *MAC_DEFAULTS)
    placements = resolve_placements(EngineConfig(), devices, hub=HubStatus(offline=True))
    assert (placements["stt"].backend, str(placements["stt"].device)) == ("mlx-whisper", "mlx")
    assert (placements["llm"].backend, str(placements["llm"].device)) == ("mlx-lm", "mlx")
    assert (placements["tts"].backend, str(placements["tts"].device)) == ("kokoro", "mps")


def test_apple_silicon_auto_picks_the_quantized_mlx_models_and_says_so(monkeypatch, tmp_path):
    devices = _apple_silicon_with_cache(monkeypatch, tmp_path, *MAC_DEFAULTS)
    placements = resolve_placements(EngineConfig(), devices, hub=HubStatus(offline=True))
    llm, stt = placements["llm"], placements["stt"]
    assert llm.model == "mlx-community/Qwen3-4B-Instruct-2507-4bit"
    assert stt.model == "mlx-community/whisper-large-v3-turbo"
    assert llm.notes == ("llm: auto picked mlx-community/Qwen3-4B-Instruct-2507-4bit for MLX: "
                         "Qwen3-4B Instruct 2507 in 4-bit, about a quarter of the bytes per "
                         "token of its bf16 build (8.1 GB); 4-bit, 2.3 GB, expected fast on MLX",)
    assert stt.notes == ("stt: auto picked mlx-community/whisper-large-v3-turbo for MLX: Whisper "
                         "large-v3 turbo (4 decoder layers instead of 32); fp16, 1.6 GB, "
                         "expected fast on MLX",)
    assert not any("warning" in n for p in placements.values() for n in p.notes)


def test_a_bf16_mlx_llm_is_placed_with_a_warning(monkeypatch, tmp_path):
    devices = _apple_silicon_with_cache(monkeypatch, tmp_path, *MAC_DEFAULTS)
    config = EngineConfig().with_overrides({"llm.model": "mlx-community/Qwen3-4B-Instruct-2507-bf16"})
    llm = resolve_placements(config, devices, hub=HubStatus(offline=True))["llm"]
    assert (llm.backend, str(llm.device)) == ("mlx-lm", "mlx")
    assert len(llm.notes) == 1
    assert llm.notes[0].startswith("llm: warning: mlx-community/Qwen3-4B-Instruct-2507-bf16 is "
                                   "bf16 (8.1 GB) on MLX, expected slow")
    assert llm.notes[0].endswith("choose a 4-bit build such as "
                                 "mlx-community/Qwen3-4B-Instruct-2507-4bit (llm.model = auto picks it)")


def test_a_local_full_precision_mlx_folder_warns_and_a_quantized_one_does_not(monkeypatch, tmp_path):
    import json

    devices = _apple_silicon_with_cache(monkeypatch, tmp_path / "hub", *MAC_DEFAULTS)
    folder = tmp_path / "my-llm"
    folder.mkdir()
    with open(folder / "model.safetensors", "wb") as weights:
        weights.truncate(7_000_000_000)  # sparse: only its size is read
    config = EngineConfig().with_overrides({"llm.model": str(folder), "llm.device": "mlx"})
    (folder / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    llm = resolve_placements(config, devices, hub=OFFLINE)["llm"]
    assert any(f"{folder} is bf16 (7.0 GB) on MLX, expected slow" in n for n in llm.notes)
    (folder / "config.json").write_text(json.dumps({"quantization": {"bits": 4, "group_size": 64},
                                                    "torch_dtype": "bfloat16"}))
    assert resolve_placements(config, devices, hub=OFFLINE)["llm"].notes == ()


def test_a_mac_without_mlx_warns_about_the_bf16_llm_on_mps(monkeypatch, tmp_path):
    import dataclasses

    from engine.backends import _SPECS

    devices = _apple_silicon_with_cache(monkeypatch, tmp_path, *MAC_DEFAULTS,
                                        "Qwen/Qwen3-4B-Instruct-2507")
    no_mlx = tuple(dataclasses.replace(s, requires=("mlx_not_installed_here",))
                   if "mlx" in s.requires else s for s in _SPECS)
    llm = resolve_placements(EngineConfig(), devices, BackendRegistry(no_mlx),
                             hub=HubStatus(offline=True))["llm"]
    assert (llm.backend, str(llm.device), llm.model) == ("transformers", "mps",
                                                         "Qwen/Qwen3-4B-Instruct-2507")
    assert any(n.startswith("llm: warning: Qwen/Qwen3-4B-Instruct-2507 is bf16 (8.1 GB) on mps")
               and "pip install 'parley[mlx]'" in n for n in llm.notes)


def test_no_speed_notes_off_apple_silicon():
    placements = resolve_placements(EngineConfig(), ONE_GPU, hub=HubStatus(offline=True))
    notes = [n for p in placements.values() for n in p.notes]
    assert not any("auto picked" in n or "warning" in n for n in notes)


def test_cuda_on_macos_is_a_clear_error(monkeypatch):
    config = EngineConfig().with_overrides({"llm.device": "cuda"})
    with pytest.raises(DeviceError, match="llm stage: device 'cuda:0' is not available "
                                          r"\(CUDA does not exist on macOS\)"):
        resolve_placements(config, _mac_devices(monkeypatch), hub=OFFLINE)


def test_several_mlx_units_switch_live_transcription_off_and_say_why():
    from engine.engine import Engine

    config = EngineConfig().with_overrides({"llm.device": "mlx", "turns.live_transcription": "true"})
    engine = Engine(config, hub=OFFLINE)
    assert engine.mlx_in_use
    assert engine._unit_config(1).turns.live_transcription  # one unit: kept
    assert not engine._unit_config(2).turns.live_transcription
    assert any("live transcription is off: 2 pipeline units share the MLX lock" in n for n in engine.notes)
