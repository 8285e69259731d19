"""``parley-cli doctor``: every check on this machine (text and ``--json``), and each failure
path on a fake machine (``tests.support.doctor``): a missing or broken library, no GPU, a
full disk, an unreachable hub, no PortAudio, a Qt that cannot start, an Apple Silicon Mac
under Rosetta. Each failure asserts the problem's line and its fix.

No model loads and nothing leaves the machine: the hub is offline here (HF_HUB_OFFLINE=1),
and a fake machine's hub is a function.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json

import pytest

from engine.cli.doctor import run_doctor
from engine.cli.main import main
from engine.config import EngineConfig
from engine.doctor.readings import (AudioScan, ConfiguredDevice, Ct2Reading, MacReading, MlxReading,
                                    NvidiaSmi, QtAnswer, TorchReading)
from engine.doctor.report import Finding, Level, Report, Section, problem, render_text
from engine.doctor.run import SECTIONS, run_checks
from tests.support.doctor import GB, MIC, healthy_devices, healthy_probes, refuse

CONFIG = EngineConfig()


def _findings(report: Report, key: str, level: Level | None = None) -> list[Finding]:
    return [f for f in report.section(key).findings if level is None or f.level == level]


def _one(report: Report, key: str, level: Level, contains: str) -> Finding:
    found = [f for f in _findings(report, key, level) if contains in f.text]
    assert len(found) == 1, (contains, [f"{f.level}: {f.text}" for f in report.section(key).findings])
    return found[0]


# ---------------------------------------------------------------------- this machine
def test_doctor_on_this_machine_prints_every_section_and_exits_0():
    # In this process (the backends' libraries stay imported for the JSON test): seconds.
    out_buffer, err_buffer = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out_buffer), contextlib.redirect_stderr(err_buffer):
        status = main(["doctor"])
    assert status == 0, err_buffer.getvalue()
    out = out_buffer.getvalue()
    positions = [out.index(f"\n{title}\n") for title in SECTIONS.values()]
    assert positions == sorted(positions)  # every section, in order
    assert "this check failed" not in out  # no check broke on this machine
    assert "Nothing to fix." in out or "To fix:" in out
    # What this machine is: a CPU-only Linux box, offline, with the offline stack installed.
    assert "[ok] vad silero: imports" in out and "[ok] stt faster-whisper: imports" in out
    assert "offline (HF_HUB_OFFLINE=1)" in out
    assert "vad: silero" in out and "(bundled)" in out


def test_doctor_json_on_this_machine_parses_and_has_every_section(capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # stdout holds the JSON document alone
    assert data["schema"] == 1 and data["platform"]["python"].startswith("3.")
    assert [s["key"] for s in data["sections"]] == list(SECTIONS)
    for section in data["sections"]:
        assert section["findings"], section["key"]
        assert isinstance(section["facts"], dict) and section["title"] == SECTIONS[section["key"]]
        for finding in section["findings"]:
            assert finding["level"] in ("ok", "info", "warning", "problem")
            assert finding["fix"] or finding["level"] in ("ok", "info")
    listed = [(f["section"], f["text"]) for f in data["problems"]]
    assert listed == [(s["key"], f["text"]) for s in data["sections"] for f in s["findings"]
                      if f["level"] in ("warning", "problem")]
    facts = {s["key"]: s["facts"] for s in data["sections"]}
    assert facts["python"]["packages"]["parley"] is not None
    assert facts["cpu"]["logical_cores"] >= 1 and "avx2" in facts["cpu"]["features"]
    assert facts["hub"]["offline"] is True and facts["hub"]["reachable"] is None
    assert set(facts["placement"]["stages"]) == {"vad", "stt", "llm", "tts"}
    assert facts["disk"]["locations"][0]["free_bytes"] > 0


def test_help_documents_the_json_shape(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert '"schema": 1' in out and "--strict" in out
    for key in SECTIONS:
        assert f"\n  {key} " in out, key


# ---------------------------------------------------------------------- a fake machine
def test_a_healthy_machine_has_nothing_to_fix():
    report = run_checks(CONFIG, healthy_probes())
    assert [s.key for s in report.sections] == list(SECTIONS)
    assert report.needing_fix() == [], [f"{s.key}: {f.text}" for s, f in report.needing_fix()]
    assert "Nothing to fix." in render_text(report)
    _one(report, "cuda", Level.OK, "cuda:0 NVIDIA H200: 120.0 GiB free of 141.0 GiB")
    _one(report, "cuda", Level.OK, "cuBLAS 12 and cuDNN 9 load as ctranslate2 loads them")
    _one(report, "hub", Level.OK, "the hub (https://huggingface.co) answers")
    stt = report.section("placement").facts["stages"]["stt"]
    assert stt["device"] == "cuda:0" and stt["model"] == "mobiuslabsgmbh/faster-whisper-large-v3-turbo"
    assert any("cuda:0, the best device faster-whisper runs on" in why for why in stt["why"])
    _one(report, "disk", Level.INFO,
         "stt: mobiuslabsgmbh/faster-whisper-large-v3-turbo downloads on first load (2.0 GB)")


def test_a_missing_library_names_the_pip_command():
    missing = {"faster_whisper", "transformers", "mlx_whisper"}  # no local STT backend is left
    probes = dataclasses.replace(healthy_probes(), installed=lambda name: name not in missing)
    report = run_checks(CONFIG, probes)
    line = _one(report, "backends", Level.INFO, "stt faster-whisper: not installed (faster_whisper)")
    assert line.fix == "pip install 'parley[offline]'"
    stage = _one(report, "backends", Level.PROBLEM, "stt: no backend that runs on this computer imports")
    assert "(faster-whisper, transformers-whisper, mlx-whisper)" in stage.text
    assert stage.fix == "pip install 'parley[offline]'"
    _one(report, "backends", Level.INFO,
         "stt mlx-whisper: not installed (mlx_whisper); it is for Apple Silicon")
    _one(report, "backends", Level.OK, "stt openai: imports")  # a server is no local backend


def test_a_library_that_does_not_import_is_a_problem_with_its_error():
    def broken(name):
        if name == "faster_whisper":  # as its ctranslate2 fails when a library is missing
            raise OSError("libcudnn_ops.so.9: cannot open shared object file: No such file or directory")
        return healthy_probes().import_module(name)

    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), import_module=broken))
    line = _one(report, "backends", Level.PROBLEM, "stt faster-whisper: installed, but does not import")
    assert "import faster_whisper: OSError: libcudnn_ops.so.9: cannot open shared object file" in line.text
    assert line.fix.startswith("pip install --force-reinstall 'parley[offline]'")


def test_no_gpu_is_a_warning_and_auto_places_on_the_cpu():
    probes = dataclasses.replace(healthy_probes(), nvidia_smi=lambda: None,
                                 torch=lambda: TorchReading("2.8.0+cpu"), ct2=lambda: Ct2Reading("4.6.0"),
                                 devices=lambda: healthy_devices(cuda=False))
    report = run_checks(CONFIG, probes)
    line = _one(report, "cuda", Level.WARNING, "no NVIDIA GPU found")
    assert "every stage runs on the CPU" in line.text
    assert line.fix.startswith("if this machine has an NVIDIA GPU, install its driver")
    assert not _findings(report, "cuda", Level.PROBLEM)
    stt = report.section("placement").facts["stages"]["stt"]
    assert stt["device"] == "cpu"
    assert any("not cuda: no NVIDIA GPU found" in why for why in stt["why"])
    assert ("cuda", line) in [(s.key, f) for s, f in report.needing_fix()]


def test_a_gpu_with_a_cpu_only_torch_names_the_cuda_wheels():
    probes = dataclasses.replace(healthy_probes(), torch=lambda: TorchReading("2.8.0+cpu"))
    report = run_checks(CONFIG, probes)
    line = _one(report, "cuda", Level.PROBLEM, "torch 2.8.0+cpu is a CPU-only build")
    assert "--index-url https://download.pytorch.org/whl/cu128" in line.fix


def test_a_gpu_whose_driver_is_too_old_for_torch():
    probes = dataclasses.replace(healthy_probes(), nvidia_smi=lambda: NvidiaSmi("470.42"),
                                 torch=lambda: TorchReading("2.8.0+cu128", "12.8"),
                                 ct2=lambda: Ct2Reading("4.6.0", 0))
    report = run_checks(CONFIG, probes)
    line = _one(report, "cuda", Level.PROBLEM, "the NVIDIA driver is installed but no GPU answers")
    assert "reboot" in line.fix
    torch = _one(report, "cuda", Level.PROBLEM, "(built for CUDA 12.8) sees no GPU")
    assert "470.42" in torch.text and "update the NVIDIA driver to one for CUDA 12.8" in torch.fix


def test_missing_cudnn_for_ctranslate2_names_the_wheels_and_the_loader_path(tmp_path):
    errors = {"libcudnn.so.9": "libcudnn.so.9: cannot open shared object file: No such file or directory"}
    probes = dataclasses.replace(healthy_probes(), load_library=lambda name: errors.get(name, ""))
    line = _one(run_checks(CONFIG, probes), "cuda", Level.PROBLEM, "libcudnn.so.9 does not load")
    assert "needs cuBLAS for CUDA 12 and cuDNN 9" in line.text
    assert "faster-whisper fails on the GPU" in line.text
    assert line.fix == ("pip install nvidia-cublas-cu12 'nvidia-cudnn-cu12==9.*', then add the lib folders "
                        "of nvidia/cublas and nvidia/cudnn in site-packages to LD_LIBRARY_PATH")
    # The wheels installed, but not on the loader's path: the fix is the exact folders.
    folders = {"nvidia.cublas": tmp_path / "cublas", "nvidia.cudnn": tmp_path / "cudnn"}
    probes = dataclasses.replace(probes, package_dir=folders.get)
    line = _one(run_checks(CONFIG, probes), "cuda", Level.PROBLEM, "libcudnn.so.9 does not load")
    assert line.fix == (f"the pip wheels are installed but not on the loader's path: export "
                        f"LD_LIBRARY_PATH={tmp_path / 'cublas' / 'lib'}:{tmp_path / 'cudnn' / 'lib'}")


def test_an_old_ctranslate2_needs_cudnn_8_and_windows_names_its_dlls():
    probes = dataclasses.replace(healthy_probes(), system="Windows", machine="AMD64",
                                 ct2=lambda: Ct2Reading("4.4.0", 1, ("float16",)),
                                 load_library=lambda name: "" if "cublas" in name else f"{name} not found")
    line = _one(run_checks(CONFIG, probes), "cuda", Level.PROBLEM, "cuDNN 8")
    assert "cudnn_ops_infer64_8.dll, cudnn_cnn_infer64_8.dll do not load" in line.text
    assert "to PATH" in line.fix and "nvidia-cudnn-cu12==8.*" in line.fix


def test_a_full_disk_is_a_problem_with_where_to_move_the_cache():
    probes = dataclasses.replace(healthy_probes(), disk_usage=lambda path: (500 * GB, 499 * GB, 10**9))
    report = run_checks(CONFIG, probes)
    line = _one(report, "disk", Level.PROBLEM, "free on the disk of")
    assert "1.0 GB free" in line.text and "the models to download need" in line.text
    assert "HF_HUB_CACHE=" in line.fix and line.fix.startswith("free ")


def test_a_nearly_full_disk_with_nothing_to_download(tmp_path):
    for name in ("whisper", "llm"):
        (tmp_path / name).mkdir()
    (tmp_path / "voice.onnx").write_bytes(b"onnx")
    config = CONFIG.with_overrides({"stt.model": str(tmp_path / "whisper"),
                                    "llm.model": str(tmp_path / "llm"), "tts.backend": "piper",
                                    "tts.model": str(tmp_path / "voice.onnx")})
    probes = dataclasses.replace(healthy_probes(), model_download_bytes=refuse,
                                 disk_usage=lambda path: (500 * GB, 499.7 * GB, 300_000_000))
    report = run_checks(config, probes)
    assert report.section("disk").facts["needed_bytes"] == 0
    line = _one(report, "disk", Level.PROBLEM, "is nearly full: 300.0 MB free")
    assert "HF_HUB_CACHE=" in line.fix


def test_an_unreachable_hub_is_a_problem_and_offline_never_asks():
    env = {"DISPLAY": ":0"}  # not offline
    probes = dataclasses.replace(healthy_probes(), env=env, hub_head=lambda url, timeout: "timed out",
                                 model_download_bytes=refuse)
    report = run_checks(CONFIG, probes)
    line = _one(report, "hub", Level.PROBLEM, "the hub (https://huggingface.co) does not answer: timed out")
    assert "HF_HUB_OFFLINE=1" in line.fix and "HTTPS_PROXY" in line.fix
    assert report.section("hub").facts["reachable"] is False
    stt = report.section("placement").facts["stages"]["stt"]
    assert stt["bundled"] is True  # auto falls back to the bundled model, as a load would
    offline = dataclasses.replace(probes, env={"HF_HUB_OFFLINE": "1"}, hub_head=refuse)
    report = run_checks(CONFIG, offline)
    _one(report, "hub", Level.INFO, "offline (HF_HUB_OFFLINE=1)")
    assert report.section("hub").facts["reachable"] is None


def test_a_model_not_on_disk_while_offline_is_a_problem():
    probes = dataclasses.replace(healthy_probes(), env={"HF_HUB_OFFLINE": "1"})
    report = run_checks(CONFIG.with_overrides({"llm.model": "Qwen/Qwen3-4B-Instruct-2507"}), probes)
    line = _one(report, "disk", Level.PROBLEM, "llm: Qwen/Qwen3-4B-Instruct-2507 is not on this computer")
    assert "the hub is offline" in line.text and "8.1 GB" in line.text  # the catalog's size, offline
    assert "llm.model to a local folder" in line.fix


def test_no_portaudio_and_no_microphone():
    scan = AudioScan(missing="portaudio")
    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), audio=lambda config: scan))
    line = _one(report, "sound", Level.PROBLEM, "the PortAudio library is not installed")
    assert line.fix.startswith("sudo apt install libportaudio2")
    scan = AudioScan("PortAudio V19.7.0", "", (), (MIC,), (ConfiguredDevice("input", "USB", error="none"),))
    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), audio=lambda config: scan))
    line = _one(report, "sound", Level.PROBLEM, "no microphone found")
    assert "sound server" in line.fix


def test_a_configured_sound_device_that_is_not_there():
    scan = AudioScan("PortAudio V19.7.0", "", (MIC,), (MIC,),
                     (ConfiguredDevice("output", "Headset", error="no output device is called 'Headset'"),))
    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), audio=lambda config: scan))
    line = _one(report, "sound", Level.PROBLEM, "audio.output_device = 'Headset'")
    assert "--audio-output-device" in line.fix


def test_qt_not_installed_missing_xcb_library_and_no_display():
    probes = dataclasses.replace(healthy_probes(), installed=lambda name: name != "PySide6", qt=refuse)
    line = _one(run_checks(CONFIG, probes), "qt", Level.WARNING, "PySide6 is not installed")
    assert line.fix == "pip install 'parley[gui]'"
    answer = QtAnswer("6.11.0", "", ("xcb",),
                      "libxcb-cursor.so.0: cannot open shared object file: No such file or directory")
    line = _one(run_checks(CONFIG, dataclasses.replace(healthy_probes(), qt=lambda env: answer)), "qt",
                Level.PROBLEM, "needs libxcb-cursor.so.0")
    assert line.fix.startswith("sudo apt install libxcb-cursor0")
    answer = QtAnswer(error="ImportError: libEGL.so.1: cannot open shared object file: No such file")
    line = _one(run_checks(CONFIG, dataclasses.replace(healthy_probes(), qt=lambda env: answer)), "qt",
                Level.PROBLEM, "Qt needs libEGL.so.1, which is not installed")
    assert "provides libEGL.so.1" in line.fix
    answer = QtAnswer("6.11.0", "", ("xcb",), error="qt.qpa.xcb: could not connect to display")
    probes = dataclasses.replace(healthy_probes(), env={}, qt=lambda env: answer)
    line = _one(run_checks(CONFIG, probes), "qt", Level.WARNING, "Qt finds no display")
    assert "DISPLAY is not set" in line.text and "parley-cli" in line.fix


def test_qt_started_for_real_with_a_plugin_it_does_not_have():
    from engine.doctor.system import start_qt

    probes = dataclasses.replace(healthy_probes(), env={"QT_QPA_PLATFORM": "nosuchplugin"}, qt=start_qt)
    line = _one(run_checks(CONFIG, probes), "qt", Level.PROBLEM, "QT_QPA_PLATFORM=nosuchplugin")
    assert "offscreen" in line.fix  # the plugins Qt has, as it listed them


def test_apple_silicon_under_rosetta_and_without_mlx():
    mac = dataclasses.replace(healthy_probes(), system="Darwin", machine="x86_64",
                              mac=lambda: MacReading("Apple M2 Pro", "15.1", True))
    line = _one(run_checks(CONFIG, mac), "apple", Level.PROBLEM,
                "runs under Rosetta (x86_64) on Apple M2 Pro")
    assert "arm64 Python" in line.fix
    native = dataclasses.replace(mac, machine="arm64", mac=lambda: MacReading("Apple M2 Pro", "15.1", False),
                                 torch=lambda: TorchReading("2.8.0", mps_built=True, mps_available=True))
    report = run_checks(CONFIG, native)
    line = _one(report, "apple", Level.WARNING, "MLX is not installed")
    assert line.fix == "pip install 'parley[mlx]'"
    _one(report, "apple", Level.OK, "mps is available")
    _one(report, "cuda", Level.INFO, "CUDA does not exist on macOS")
    with_mlx = dataclasses.replace(native, mlx=lambda: MlxReading("0.29.0", True, "Device(gpu, 0)"))
    _one(run_checks(CONFIG, with_mlx), "apple", Level.OK, "MLX 0.29.0 computes on Device(gpu, 0) (Metal)")


def test_a_processor_without_avx2_and_a_32_bit_python():
    cpu = healthy_probes().cpu()
    probes = dataclasses.replace(healthy_probes(), pointer_bits=lambda: 32,
                                 cpu=lambda: dataclasses.replace(cpu, features=frozenset({"avx"})))
    report = run_checks(CONFIG, probes)
    line = _one(report, "cpu", Level.WARNING, "this processor has no AVX2")
    assert "bundled models" in line.fix
    _one(report, "python", Level.PROBLEM, "is a 32-bit build")


def test_both_onnxruntime_packages_installed():
    versions = {"onnxruntime": "1.22.0", "onnxruntime-gpu": "1.22.0"}
    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), version=versions.get))
    line = _one(report, "python", Level.PROBLEM, "both onnxruntime 1.22.0 and onnxruntime-gpu 1.22.0")
    assert line.fix.startswith("pip uninstall -y onnxruntime onnxruntime-gpu")


def test_a_check_that_raises_is_reported_and_the_others_still_run():
    def crash():
        raise RuntimeError("cpuinfo is unreadable")

    report = run_checks(CONFIG, dataclasses.replace(healthy_probes(), cpu=crash))
    line = _one(report, "cpu", Level.PROBLEM, "this check failed: RuntimeError: cpuinfo is unreadable")
    assert "parley-cli doctor --json" in line.fix
    assert [s.key for s in report.sections] == list(SECTIONS)


def test_strict_turns_a_problem_into_exit_status_1(capsys):
    args = argparse.Namespace(json=False, strict=True, verbose=False)
    probes = dataclasses.replace(healthy_probes(), audio=lambda config: AudioScan(missing="sounddevice"))
    assert run_doctor(args, CONFIG, probes) == 1
    out = capsys.readouterr().out
    assert "[PROBLEM] the Python package sounddevice is not installed" in out
    assert "      fix: pip install sounddevice" in out
    assert "To fix: 1 problem, 0 warnings" in out and "[PROBLEM] sound: the Python package" in out
    assert run_doctor(argparse.Namespace(json=False, strict=False, verbose=False), CONFIG, probes) == 0
    warned = dataclasses.replace(healthy_probes(), nvidia_smi=lambda: None, ct2=lambda: Ct2Reading("4.6.0"),
                                 torch=lambda: TorchReading("2.8.0+cpu"))
    assert run_doctor(args, CONFIG, warned) == 0  # warnings do not count
    capsys.readouterr()


def test_the_json_document_of_a_fake_machine(capsys):
    args = argparse.Namespace(json=True, strict=False, verbose=False)
    probes = dataclasses.replace(healthy_probes(), hub_head=lambda url, timeout: "Name or service not known")
    assert run_doctor(args, CONFIG, probes) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == [{"section": "hub", "level": "problem",
                                 "text": "the hub (https://huggingface.co) does not answer: Name or service "
                                         "not known",
                                 "fix": "check the network or the proxy (HTTPS_PROXY); to work without the "
                                        "hub, set HF_HUB_OFFLINE=1 (cached and bundled models only)"}]
    cuda = next(s for s in data["sections"] if s["key"] == "cuda")["facts"]
    assert cuda["driver"] == "570.86.15" and cuda["gpus"][0]["free_bytes"] == 120 * 2**30
    assert cuda["libraries"]["libcudnn.so.9"] == "loaded"


def test_a_warning_or_a_problem_needs_its_fix():
    with pytest.raises(ValueError, match="needs its fix"):
        problem("broken", "")
    section = Section("x", "X", (Finding(Level.INFO, "a fact"), problem("broken", "mend it")))
    assert section.worst == Level.PROBLEM


def test_a_local_model_that_does_not_exist(tmp_path):
    missing = str(tmp_path / "no-such-whisper")

    def size(model, timeout):  # a path is never asked of the hub
        return refuse(model) if model == missing else 2 * GB

    config = CONFIG.with_overrides({"stt.model": missing})
    report = run_checks(config, dataclasses.replace(healthy_probes(), model_download_bytes=size))
    line = _one(report, "disk", Level.PROBLEM, f"stt: the model {missing} does not exist")
    assert line.fix == "set stt.model to a model folder or file that exists, or to auto"
