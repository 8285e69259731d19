"""onnxruntime placement shared by the ONNX backends (Silero VAD, Piper)."""

from __future__ import annotations

from engine.runtime.devices import Device
from engine.errors import DeviceError


def onnx_providers(stage: str, what: str, device: Device, available: list[str],
                   cuda_options: dict | None = None) -> list:
    """The execution providers for ``device``; a clear DeviceError when it cannot work."""
    if device.kind == "cpu":
        return ["CPUExecutionProvider"]
    if device.kind == "cuda":
        if "CUDAExecutionProvider" not in available:
            raise DeviceError(
                f"{stage} stage: onnxruntime has no CUDA provider (providers: "
                f"{', '.join(available)}); install onnxruntime-gpu or put {stage} on cpu")
        options = {"device_id": device.index or 0, **(cuda_options or {})}
        # CPU stays as the fallback for operators CUDA lacks; load() checks which one won.
        return [("CUDAExecutionProvider", options), "CPUExecutionProvider"]
    raise DeviceError(f"{stage} stage: {what} runs on cpu or cuda, not on {device}")


def onnx_actual_device(session) -> str:
    """Where a session really runs: ``cpu``, ``cuda:N``, or the provider's name."""
    provider = session.get_providers()[0]
    if provider == "CUDAExecutionProvider":
        options = session.get_provider_options().get(provider, {})
        return f"cuda:{int(options.get('device_id', 0))}"
    if provider == "CPUExecutionProvider":
        return "cpu"
    return provider
