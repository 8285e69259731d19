"""``Probes``: everything the doctor's checks read of the machine, as replaceable functions.

The defaults are the real probes (``engine.doctor.system``). A test, or the app, passes
others with ``dataclasses.replace``: a machine with no GPU is ``replace(Probes(),
nvidia_smi=lambda: None, torch=...)``; the app passes ``qt`` reading its own running Qt.
The checks never reach past their ``Probes`` to the machine, so what a test fakes is all
that a check sees.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from engine.config import EngineConfig
from engine.doctor import system as real
from engine.doctor.readings import (AudioScan, CommandOutput, CpuReading, Ct2Reading, MacReading,
                                    MlxReading, NvidiaSmi, OrtReading, QtAnswer, TorchReading)
from engine.runtime.devices import DeviceInfo, discover_devices
from engine.backends.ladder import Ladder, load_ladder
from engine.models.placement import CalibrationOf, machine_calibration


def _import(name: str) -> ModuleType:
    import importlib

    return importlib.import_module(name)


def _python() -> dict[str, str]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable}


@dataclass(frozen=True)
class Probes:
    """The doctor's view of the machine. Each field is one probe; ``engine.doctor.system``
    (imported as ``real``) says what the real one does."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    system: str = field(default_factory=platform.system)  # "Linux", "Darwin", "Windows"
    machine: str = field(default_factory=platform.machine)  # "x86_64", "arm64", "AMD64"
    release: str = field(default_factory=platform.release)
    #: The packaged app (PyInstaller sets ``sys.frozen``; a plain Python has no such attribute).
    frozen: bool = field(default_factory=lambda: bool(getattr(sys, "frozen", False)))
    python: Callable[[], dict[str, str]] = _python
    in_virtualenv: Callable[[], bool] = lambda: sys.prefix != sys.base_prefix
    pointer_bits: Callable[[], int] = lambda: 64 if sys.maxsize > 2**32 else 32
    #: Python packages: found without importing, imported, their distributions' versions.
    installed: Callable[[str], bool] = real.installed
    import_module: Callable[[str], ModuleType] = _import
    version: Callable[[str], str | None] = real.dist_version
    package_dir: Callable[[str], Path | None] = real.package_dir
    #: Programs, shared libraries and files.
    run: Callable[[Sequence[str], float], CommandOutput | None] = real.run_program
    load_library: Callable[[str], str] = real.load_library
    disk_usage: Callable[[Path], tuple[int, int, int]] = real.disk_usage
    folder_bytes: Callable[[Path], int] = real.folder_bytes
    #: The hub: one HEAD request, the download size of a model.
    hub_head: Callable[[str, float], str] = real.hub_head
    model_download_bytes: Callable[[str, float], int | None] = real.model_download_bytes
    #: Devices and the libraries that drive them (None: not installed / not there).
    cpu: Callable[[], CpuReading] = real.read_cpu
    mac: Callable[[], MacReading | None] = real.read_mac
    nvidia_smi: Callable[[], NvidiaSmi | None] = real.read_nvidia_smi
    torch: Callable[[], TorchReading | None] = real.read_torch
    ct2: Callable[[], Ct2Reading | None] = real.read_ct2
    ort: Callable[[], OrtReading | None] = real.read_ort
    mlx: Callable[[], MlxReading | None] = real.read_mlx
    devices: Callable[[], list[DeviceInfo]] = discover_devices  # what placement chooses among
    #: The model ladder and this machine's cached calibration of a device kind (None: not
    #: measured), what ``auto`` sizes the models by.
    ladder: Callable[[], Ladder] = load_ladder
    calibration: CalibrationOf = machine_calibration
    #: Sound and the desktop.
    audio: Callable[[EngineConfig], AudioScan] = real.scan_audio
    qt: Callable[[Mapping[str, str]], QtAnswer | None] = real.start_qt
