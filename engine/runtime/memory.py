"""Memory per device in use: CPU RSS and system available, CUDA, MPS, MLX.

Reads only libraries that are already imported: sampling memory never imports torch or
mlx on its own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """One device's memory: ``used`` by this process, ``total``, and device extras."""

    device: str
    used_bytes: int
    total_bytes: int | None
    available_bytes: int | None = None
    extra: dict[str, int] = field(default_factory=dict)


def sample_memory(devices: set[str]) -> tuple[MemoryReading, ...]:
    """Readings for ``cpu`` and each device string in ``devices`` (``cuda:0``, ``mps``, ``mlx``)."""
    import psutil

    vm = psutil.virtual_memory()
    readings = [MemoryReading("cpu", psutil.Process().memory_info().rss, vm.total, vm.available)]
    torch = sys.modules.get("torch")
    for device in sorted(devices):
        try:
            reading = _device_reading(device, torch)
        except (AttributeError, RuntimeError):  # a library half-imported by another thread
            reading = None
        if reading is not None:
            readings.append(reading)
    return tuple(readings)


def _device_reading(device: str, torch) -> MemoryReading | None:
    """One device's reading, or None if its library is not loaded here."""
    if device.startswith("cuda") and torch is not None and torch.cuda.is_available():
        index = int(device.partition(":")[2] or 0)
        free, total = torch.cuda.mem_get_info(index)
        return MemoryReading(device, torch.cuda.memory_allocated(index), total, free,
                             {"reserved": torch.cuda.memory_reserved(index),
                              "peak": torch.cuda.max_memory_allocated(index),
                              "device_used": total - free})
    if device == "mps" and torch is not None and torch.backends.mps.is_available():
        return MemoryReading("mps", torch.mps.current_allocated_memory(),
                             torch.mps.recommended_max_memory(),
                             extra={"driver": torch.mps.driver_allocated_memory()})
    if device == "mlx" and "mlx.core" in sys.modules:
        mx = sys.modules["mlx.core"]
        return MemoryReading("mlx", mx.get_active_memory(), None,
                             extra={"peak": mx.get_peak_memory(), "cache": mx.get_cache_memory()})
    return None


def torch_weights_bytes(module) -> int:
    """Bytes held by a torch module's parameters and buffers (where they live)."""
    tensors = [*module.parameters(), *module.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))


def file_bytes(*paths) -> int:
    """Size on disk of model files that are loaded whole (ONNX, CTranslate2)."""
    import os

    return int(sum(os.path.getsize(p) for p in paths if os.path.isfile(p)))
