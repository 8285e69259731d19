"""Devices: parse ``cuda:1``, discover what is present, and check a placement.

Discovery imports torch and mlx only if they are installed, and only when asked: an
MLX-only stack never imports torch just to list devices.

``remote`` is a device too: an OpenAI-compatible server a stage's ``base_url`` names.
``engine.backends.remote_probe.discover_remote`` probes the endpoints a config names
(the backends sit above this module), reporting an endpoint that fails as unavailable
with the reason, like an absent GPU.
"""

from __future__ import annotations

import importlib.util
import platform
import re
from pathlib import Path
from dataclasses import dataclass

from engine.errors import DeviceError

DEVICE_KINDS = ("cpu", "cuda", "mps", "mlx", "remote")
_DEVICE_RE = re.compile(r"^(cpu|cuda|mps|mlx|remote)(?::(\d+))?$")


@dataclass(frozen=True, slots=True)
class Device:
    """A concrete device: ``kind`` plus an index for CUDA."""

    kind: str
    index: int | None = None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


CPU = Device("cpu")


def parse_device(text: str, field: str = "device") -> Device | None:
    """Parse a device string; ``auto`` gives None. Errors name ``field``."""
    text = text.strip().lower()
    if text == "auto":
        return None
    match = _DEVICE_RE.match(text)
    if not match:
        raise DeviceError(
            f"'{field}' = {text!r} is not a device; use auto, cpu, cuda, cuda:N, mps, mlx "
            "or remote"
        )
    kind, index = match.group(1), match.group(2)
    if kind == "cuda":
        return Device("cuda", int(index) if index is not None else 0)
    if index is not None and index != "0":
        raise DeviceError(f"'{field}' = {text!r}: only CUDA devices take an index")
    return Device(kind)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One discovered device, present or not, with why not."""

    device: Device
    name: str
    available: bool
    reason: str = ""
    total_bytes: int | None = None
    free_bytes: int | None = None
    stages: tuple[str, ...] = ()  # remote: the stages whose base_url names this endpoint

    @property
    def label(self) -> str:
        """Human label for dropdowns: ``cuda:0 — NVIDIA H200 (120.3 GiB free)``, or
        ``remote: gpu-box:8000 · vLLM · Qwen3-8B``."""
        if self.device.kind == "remote":
            return f"remote: {self.name}"
        text = f"{self.device} — {self.name}"
        if self.free_bytes is not None:
            text += f" ({self.free_bytes / 2**30:.1f} GiB free)"
        return text


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_info() -> DeviceInfo:
    import psutil

    mem = psutil.virtual_memory()
    name = _cpu_model() or platform.processor() or platform.machine() or "CPU"
    return DeviceInfo(CPU, name, True, total_bytes=mem.total, free_bytes=mem.available)


def _cuda_infos() -> list[DeviceInfo]:
    if platform.system() == "Darwin":
        return [DeviceInfo(Device("cuda", 0), "CUDA", False, "CUDA does not exist on macOS")]
    if not _installed("torch"):
        return [DeviceInfo(Device("cuda", 0), "CUDA", False, "torch is not installed")]
    if not _nvidia_driver_present():
        # Importing torch to learn this costs ~1.3 s of a start on a 2-core machine.
        return [DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found")]
    import torch

    if not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no NVIDIA GPU found"
        return [DeviceInfo(Device("cuda", 0), "CUDA", False, why)]
    infos = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        infos.append(
            DeviceInfo(Device("cuda", index), torch.cuda.get_device_name(index), True,
                       total_bytes=total, free_bytes=free)
        )
    return infos


def _nvidia_driver_present() -> bool:
    """Whether an NVIDIA driver is installed, told without importing torch: on Linux the
    kernel module's /proc entry (or a CUDA driver library), on Windows nvcuda.dll."""
    import ctypes.util

    if platform.system() == "Linux" and Path("/proc/driver/nvidia/version").exists():
        return True
    return ctypes.util.find_library("nvcuda" if platform.system() == "Windows" else "cuda") is not None


def _mps_info() -> DeviceInfo:
    device = Device("mps")
    if platform.system() != "Darwin":
        return DeviceInfo(device, "Apple GPU (Metal)", False, "MPS exists only on macOS")
    if not _installed("torch"):
        return DeviceInfo(device, "Apple GPU (Metal)", False, "torch is not installed")
    import torch

    if not torch.backends.mps.is_available():
        return DeviceInfo(device, "Apple GPU (Metal)", False, "this Mac has no MPS support")
    return DeviceInfo(device, "Apple GPU (Metal)", True,
                      total_bytes=torch.mps.recommended_max_memory())


def _mlx_info() -> DeviceInfo:
    device = Device("mlx")
    if not _installed("mlx"):
        return DeviceInfo(device, "MLX", False, "mlx is not installed (pip install 'parley[mlx]')")
    try:
        import mlx.core as mx
    except (ImportError, OSError) as exc:
        return DeviceInfo(device, "MLX", False, f"mlx does not import: {exc}")
    default = mx.default_device()
    name = f"MLX ({'Metal GPU' if default == mx.gpu else 'CPU'})"
    return DeviceInfo(device, name, True)


def discover_devices() -> list[DeviceInfo]:
    """Every local device kind Parley knows, present or not, in a stable order."""
    return [_cpu_info(), *_cuda_infos(), _mps_info(), _mlx_info()]


def check_placement(stage: str, device: Device, supported: tuple[str, ...], backend: str,
                    devices: list[DeviceInfo]) -> None:
    """Raise a DeviceError naming the stage unless ``device`` is present and supported."""
    if device.kind not in supported:
        raise DeviceError(
            f"{stage} stage: backend '{backend}' cannot run on {device}; "
            f"it runs on {', '.join(supported)}"
        )
    present = [str(d.device) for d in devices if d.available]
    if str(device) not in present:
        same_kind = [d.reason for d in devices if d.device.kind == device.kind and d.reason]
        why = same_kind[0] if same_kind else "not present"
        if device.kind == "cuda" and any(d.device.kind == "cuda" and d.available for d in devices):
            why = "no such GPU"
        raise DeviceError(
            f"{stage} stage: device '{device}' is not available ({why}); "
            f"devices present: {', '.join(present)}"
        )
