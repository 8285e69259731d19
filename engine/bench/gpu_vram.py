"""The VRAM meter against ``torch.cuda.mem_get_info`` while each model loads.

The meter (``engine.runtime.memory.sample_memory``, what the Performance tab draws) shows
torch's allocated bytes as a device's use, and the driver's view (``mem_get_info``: total
less free) beside it. The driver's view also holds the CUDA context, torch's cached but
unallocated blocks, cuBLAS workspaces and anything a library allocates outside torch
(CTranslate2, onnxruntime), so the two differ; this module measures by how much, per
model, as the STT, LLM and TTS models load one after another onto one device through the
model registry, with a sampler reading both every 20 ms to catch the load's peak.

On a CPU there is no ``mem_get_info``: the meter's reading is the process's RSS, and the
reference columns are None.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from engine.bench.sampler import PeriodicSampler
from engine.config import EngineConfig
from engine.runtime.devices import DeviceInfo

STAGES_MEASURED = ("stt", "llm", "tts")  # the VAD runs on the CPU wherever the rest is


def snapshot(device: str) -> dict[str, int | None]:
    """The meter's reading of ``device`` and, on CUDA, the driver's, read back to back."""
    from engine.runtime.memory import sample_memory

    readings = {r.device: r for r in sample_memory({device})}
    reading = readings.get(device, readings["cpu"])
    out: dict[str, int | None] = {"meter_used": reading.used_bytes,
                                  "meter_reserved": reading.extra.get("reserved"),
                                  "meter_device_used": reading.extra.get("device_used"),
                                  "meter_peak": reading.extra.get("peak"),
                                  "mem_get_info_used": None, "total": reading.total_bytes}
    if device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info(int(device.partition(":")[2] or 0))
        out["mem_get_info_used"] = total - free
    return out


class LoadWatch(PeriodicSampler):
    """The highest meter and driver readings of one device while a model loads."""

    def __init__(self, device: str, interval: float = 0.02) -> None:
        super().__init__(interval, "gpu-check-vram")
        self.device = device
        self.peaks: dict[str, int] = {}
        self.samples = 0

    def sample(self) -> None:
        self.samples += 1
        for key, value in snapshot(self.device).items():
            if value is not None and key != "total":
                self.peaks[key] = max(self.peaks.get(key, 0), value)


def _delta(after: dict, before: dict, key: str) -> int | None:
    if after.get(key) is None or before.get(key) is None:
        return None
    return after[key] - before[key]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _reset_peak(device: str) -> None:
    """Restart torch's peak counter, so a backend's ``memory_bytes`` (the device's peak
    allocation) covers this load only, not the build before it."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def _record(stage: str, placement, model, seconds: float, before: dict, after: dict,
            watch: LoadWatch) -> dict:
    used = _delta(after, before, "meter_used")
    driver = _delta(after, before, "mem_get_info_used")
    peak_driver = watch.peaks.get("mem_get_info_used")
    return {
        "stage": stage, "backend": placement.backend, "model": Path(placement.model).name,
        "device": str(placement.device), "actual_device": model.actual_device,
        "load_s": round(seconds, 3), "weights_bytes": model.weights_bytes,
        "memory_bytes": model.memory_bytes(), "peak_allocated": after["meter_peak"],
        "meter": {"used_delta": used, "reserved_delta": _delta(after, before, "meter_reserved"),
                  "peak_used_delta": watch.peaks.get("meter_used", after["meter_used"])
                  - before["meter_used"]},
        "mem_get_info": None if driver is None else {
            "used_delta": driver,
            "peak_used_delta": None if peak_driver is None else peak_driver - before["mem_get_info_used"]},
        "not_seen_by_meter_bytes": None if driver is None or used is None else driver - used,
        "after": {"meter_used": after["meter_used"], "mem_get_info_used": after["mem_get_info_used"]},
        "samples": watch.samples,
    }


def measure_loads(config: EngineConfig, device: str, devices: list[DeviceInfo]) -> dict:
    """Load the STT, LLM and TTS of ``config`` onto ``device`` one by one, the meter and
    the driver read before, during and after each; then free them and read again."""
    from engine.models.model_registry import ModelRegistry
    from engine.models.placement import resolve_placements

    config = config.with_overrides({"device": device})
    placements = resolve_placements(config, devices)
    registry = ModelRegistry()
    _sync(device)
    baseline = snapshot(device)
    models: list[dict] = []
    acquired = []
    try:
        for stage in STAGES_MEASURED:
            placement, options = placements[stage], config.stage_config(stage)
            _reset_peak(device)
            before = snapshot(device)
            watch = LoadWatch(device)
            started = time.perf_counter()
            with watch:
                model = registry.acquire(placement, options)
                acquired.append((placement, options))
                _sync(device)
            seconds = time.perf_counter() - started
            after = snapshot(device)
            models.append(_record(stage, placement, model, seconds, before, after, watch))
        loaded = snapshot(device)
    finally:
        for placement, options in acquired:
            registry.release(placement, options)
        del acquired
        gc.collect()
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
    released = snapshot(device)
    return {"device": device, "baseline": baseline, "loaded": loaded, "released": released,
            "models": models,
            "note": "meter_used is what the meter shows (torch's allocated bytes on a GPU, the "
                    "RSS on a CPU); mem_get_info_used is the driver's total less free (CUDA "
                    "context, torch's cache and non-torch allocations included, and other "
                    "processes on a shared GPU); memory_bytes is the backend's own figure "
                    "(the LLM: the device's peak allocation, every model's)"}


def checks(vram: dict) -> list[dict]:
    """Pass/fail lines: each model on the device asked for; on CUDA, the meter sees each
    model's weights and never shows more than the driver does."""
    out = []
    for m in vram["models"]:
        out.append({"name": f"{m['stage']} placed on {m['device']}",
                    "ok": m["actual_device"] == m["device"],
                    "detail": f"the model reports {m['actual_device']}"})
        if m["mem_get_info"] is None:
            continue
        weights, used = m["weights_bytes"] or 0, m["meter"]["used_delta"] or 0
        out.append({"name": f"the meter sees the {m['stage']} weights",
                    "ok": used >= 0.9 * weights,
                    "detail": f"meter +{used} bytes for {weights} bytes of weights"})
        after = m["after"]
        out.append({"name": f"the meter stays within mem_get_info after the {m['stage']} load",
                    "ok": after["meter_used"] <= after["mem_get_info_used"],
                    "detail": f"meter {after['meter_used']} bytes, driver {after['mem_get_info_used']}"})
    return out
