"""What the user reads about a failure: a ParleyError's own message, anything else as
``Type: message``, and an out-of-memory error with the device's memory figures now
(``engine.runtime.memory``); ``ModelLoadError``, the load failure that carries them.

Here, not in ``engine.errors``, because the figures are read from the machine: the
errors everything shares import nothing of the engine.
"""

from __future__ import annotations

from engine.errors import ModelError, ParleyError, is_out_of_memory
from engine.runtime.memory import sample_memory


class ModelLoadError(ModelError):
    """A model could not be loaded (or warmed up): names the stage, model, device and cause.

    ``stage``, ``model``, ``backend`` and ``device`` let a front end offer another device;
    ``out_of_memory`` is True when the cause was the device running out of memory (the
    message then carries that device's memory figures).
    """

    def __init__(self, stage: str, model: str, backend: str, device: str,
                 cause: BaseException) -> None:
        self.stage, self.model, self.backend, self.device = stage, model, backend, device
        self.out_of_memory = is_out_of_memory(cause)
        reason = describe_failure(cause, device)
        if isinstance(cause, ParleyError) and model in reason and device in reason:
            message = reason  # the backend's message already names the model and device
        else:
            message = f"the {stage} model {model} ({backend}) could not be loaded on {device}: {reason}"
        super().__init__(message)


def _bytes(n: int | float | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def memory_figures(device: str | None) -> str:
    """``device``'s memory now (and the process's RAM), one line, for an out-of-memory report.

    Reads only what ``engine.runtime.memory.sample_memory`` reads: libraries already imported.
    """
    devices = {device} if device and device != "cpu" else set()
    try:
        readings = sample_memory(devices)
    except Exception:  # an OOM report must never fail on its own figures (logged)
        import logging

        logging.getLogger("parley.errors").warning("cannot read memory figures", exc_info=True)
        return "memory figures unavailable"
    parts = []
    for r in readings:
        extra = r.extra or {}
        if r.device == "cpu":
            parts.append(f"cpu: Parley uses {_bytes(r.used_bytes)} (RSS), "
                         f"{_bytes(r.available_bytes)} of {_bytes(r.total_bytes)} available")
        elif r.device.startswith("cuda"):
            used = extra.get("device_used")
            parts.append(f"{r.device}: {_bytes(used)} of {_bytes(r.total_bytes)} in use, "
                         f"{_bytes(r.available_bytes)} free; Parley allocated {_bytes(r.used_bytes)} "
                         f"(reserved {_bytes(extra.get('reserved'))}, peak {_bytes(extra.get('peak'))})")
        elif r.device == "mps":
            parts.append(f"mps: Parley allocated {_bytes(r.used_bytes)} of at most "
                         f"{_bytes(r.total_bytes)} (driver {_bytes(extra.get('driver'))})")
        elif r.device == "mlx":
            parts.append(f"mlx: {_bytes(r.used_bytes)} active, peak {_bytes(extra.get('peak'))}, "
                         f"cache {_bytes(extra.get('cache'))}")
        else:
            parts.append(f"{r.device}: {_bytes(r.used_bytes)} of {_bytes(r.total_bytes)}")
    if device and device != "cpu" and not any(r.device == device for r in readings):
        parts.insert(0, f"{device}: no figures (its library reports none)")
    return "; ".join(parts)


def describe_failure(exc: BaseException, device: str | None = None) -> str:
    """What the user reads about ``exc``: a ParleyError's own message, an out-of-memory
    error with ``device``'s memory figures, anything else as ``Type: message``."""
    if is_out_of_memory(exc):
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f" on {device}" if device else ""
        return f"out of memory{where} ({cause}); memory now: {memory_figures(device)}"
    if isinstance(exc, ParleyError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def release_cached_memory(device: str | None) -> None:
    """After an out-of-memory error on a CUDA device: give torch's cached blocks back, so
    the next turn has a chance. Never imports torch."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not device or not device.startswith("cuda"):
        return
    try:
        torch.cuda.empty_cache()
    except Exception:  # nothing more to do: the report was made (logged)
        import logging

        logging.getLogger("parley.errors").warning("torch.cuda.empty_cache failed", exc_info=True)
