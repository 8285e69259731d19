"""A machine for the doctor's tests: ``healthy_probes()`` is a Linux box with one NVIDIA GPU,
every library installed and working, a microphone, a speaker, a display and a reachable
hub, all of it made of readings (nothing is imported, run or asked). A test replaces the
one probe its failure path needs with ``dataclasses.replace``."""

from __future__ import annotations

from types import ModuleType

from engine.audio.sd_devices import AudioDevice
from engine.doctor.probes import Probes
from engine.doctor.readings import (AudioScan, ConfiguredDevice, CpuReading, Ct2Reading, GpuReading,
                                    NvidiaSmi, OrtReading, QtAnswer, TorchReading)
from engine.runtime.devices import Device, DeviceInfo

GIB = 2**30
GB = 10**9
GPU = GpuReading(0, "NVIDIA H200", 141 * GIB, 120 * GIB)
VERSIONS = {"parley": "0.1.0", "numpy": "2.3.0", "torch": "2.8.0+cu128", "ctranslate2": "4.6.0",
            "onnxruntime-gpu": "1.22.0", "faster-whisper": "1.2.0", "transformers": "4.56.0",
            "PySide6-Essentials": "6.11.0", "sounddevice": "0.5.2"}
MIC = AudioDevice(0, "USB Microphone", "ALSA", 1, 48000.0, True)
SPEAKER = AudioDevice(1, "Speakers", "ALSA", 2, 48000.0, True)


def fake_import(name: str) -> ModuleType:
    """An import that always works and loads nothing."""
    return ModuleType(name)


def refuse(*args):
    """A probe that must not run in this test."""
    raise AssertionError(f"this probe must not run here (called with {args})")


def healthy_devices(cuda: bool = True) -> list[DeviceInfo]:
    """What device discovery lists on the healthy machine (``cuda=False``: without the GPU)."""
    gpu = (DeviceInfo(Device("cuda", 0), GPU.name, True, total_bytes=GPU.total_bytes,
                      free_bytes=GPU.free_bytes)
           if cuda else DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found"))
    return [DeviceInfo(Device("cpu"), "AMD EPYC 9654", True, total_bytes=64 * GIB, free_bytes=40 * GIB), gpu,
            DeviceInfo(Device("mps"), "Apple GPU (Metal)", False, "MPS exists only on macOS"),
            DeviceInfo(Device("mlx"), "MLX", False, "mlx is not installed (pip install 'parley[mlx]')")]


def healthy_probes() -> Probes:
    """The healthy Linux GPU machine (see the module docstring)."""
    return Probes(
        env={"DISPLAY": ":0"}, system="Linux", machine="x86_64", release="6.8.0", frozen=False,
        python=lambda: {"version": "3.11.9", "implementation": "CPython", "executable": "/usr/bin/python3"},
        in_virtualenv=lambda: True, pointer_bits=lambda: 64,
        installed=lambda name: True, import_module=fake_import, version=VERSIONS.get,
        package_dir=lambda name: None, run=lambda args, timeout: None, load_library=lambda name: "",
        disk_usage=lambda path: (500 * GB, 100 * GB, 400 * GB), folder_bytes=lambda path: 3 * GB,
        hub_head=lambda url, timeout: "", model_download_bytes=lambda model, timeout: 2 * GB,
        cpu=lambda: CpuReading("AMD EPYC 9654", "x86_64", 32, 16,
                               frozenset({"avx", "avx2", "fma", "f16c", "avx512f"}), 64 * GIB, 40 * GIB),
        mac=lambda: None,
        nvidia_smi=lambda: NvidiaSmi("570.86.15", (GPU,)),
        torch=lambda: TorchReading("2.8.0+cu128", "12.8", 91002, True, (GPU,)),
        ct2=lambda: Ct2Reading("4.6.0", 1, ("float16", "int8", "int8_float16")),
        ort=lambda: OrtReading("1.22.0", ("CUDAExecutionProvider", "CPUExecutionProvider")),
        mlx=lambda: None,
        devices=healthy_devices,
        calibration=lambda kind: None,  # not measured: auto keeps its defaults by name
        audio=lambda config: AudioScan("PortAudio V19.7.0", "", (MIC,), (SPEAKER,),
                                       (ConfiguredDevice("input", "default", MIC.label),
                                        ConfiguredDevice("output", "default", SPEAKER.label))),
        qt=lambda env: QtAnswer("6.11.0", "xcb", ("offscreen", "wayland", "xcb")),
    )
