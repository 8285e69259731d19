"""The errors Parley shows to users: each says what was wrong and what is allowed."""

from __future__ import annotations

import sys
from collections.abc import Callable


class ParleyError(Exception):
    """Base of every error that reaches the user as a message, never as a traceback."""

    exit_code = 2


class ConfigError(ParleyError):
    """A configuration value or key is invalid. The message names the key."""


class DeviceError(ParleyError):
    """A stage was placed on a device that is not present or not supported."""


class MissingDependencyError(ParleyError):
    """An optional package is not installed; the message gives the pip command."""

    def __init__(self, what: str, package: str, extra: str, command: str | None = None) -> None:
        """``command`` replaces the default ``pip install 'parley[EXTRA]'`` where a package
        must be installed otherwise (e.g. without its dependencies)."""
        command = command or f"pip install 'parley[{extra}]'"
        super().__init__(f"{what} needs the Python package '{package}', which is not "
                         f"installed. Install it with: {command}")
        self.package = package
        self.extra = extra


class AudioInputError(ParleyError):
    """An input recording is missing, unreadable, empty or holds no speech."""


class AudioDeviceError(ParleyError):
    """A sound card could not be opened."""


class ModelError(ParleyError):
    """A model could not be found or loaded (missing folder, missing weights)."""


class NoSpeechError(AudioInputError):
    """The input held audio but no speech: no turn was taken."""

    exit_code = 3


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


# Substrings (lower case) by which libraries say that memory ran out: torch (CUDA, MPS),
# CTranslate2 ("CUDA failed with error out of memory"), ONNX Runtime ("Failed to allocate
# memory", "bad allocation"), cuBLAS/cuDNN, and the C library (ENOMEM).
_OOM_TEXT = ("out of memory", "outofmemory", "failed to allocate memory", "bad_alloc",
             "bad allocation", "cudaerrormemoryallocation", "alloc_failed", "cannot allocate memory",
             "not enough memory", "insufficient memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` says that a device (or the machine) ran out of memory."""
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(part in text for part in _OOM_TEXT)


def _bytes(n: int | float | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def memory_figures(device: str | None) -> str:
    """``device``'s memory now (and the process's RAM), one line, for an out-of-memory report.

    Reads only what ``engine.runtime.memory.sample_memory`` reads: libraries already imported.
    """
    from engine.runtime.memory import sample_memory

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


def run_command(command: Callable[[], int], prog: str = "parley-cli") -> int:
    """Run one command of the command line and return its exit status.

    The one exit block of ``parley-cli`` and its tools (``engine.cli.main``,
    ``engine.bench.lab``, ``engine.bench.serve``, ``engine.bench.soak``): a ParleyError
    becomes one line on stderr, ``prog: error: message`` (``prog: message`` for a
    NoSpeechError: a recording without speech is a result, not a fault), and its
    ``exit_code``; Ctrl-C becomes ``prog: interrupted`` and 130. Anything else is a bug
    and keeps its traceback. Lives here, not in ``engine.cli``, so that the bench tools
    can use it without importing the command line.
    """
    try:
        return command()
    except NoSpeechError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    except ParleyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
