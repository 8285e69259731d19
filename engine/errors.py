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
