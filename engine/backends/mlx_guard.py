"""A debug mode that catches MLX evaluation on a thread that does not hold the MLX lock.

MLX builds graphs lazily and computes when something evaluates them. The guard wraps
the Python entry points that evaluate — ``mx.eval``, ``mx.async_eval``, the ``mx.save*``
functions and ``array.item / tolist / __array__ / __float__ / __int__ / __bool__ /
__index__`` — so that each checks the caller holds the MLX lock first. A forgotten
``with mlx_lock.hold(...)`` then fails at the line that skipped it instead of as a rare
crash or a wrong lock meter.

Enable it with ``PARLEY_MLX_GUARD=1`` (``raise``) or ``PARLEY_MLX_GUARD=record`` (keep a
list, see ``violations()``) before the MLX backends load, or call ``enable_guard()``;
``disable_guard()`` puts the originals back. It costs a lock check per evaluation, so it
is for debugging and tests, not for normal use.

Not covered: conversions through the buffer protocol (``np.array(a)``, ``memoryview``),
which CPython 3.11 offers no Python-level hook for, and evaluation MLX's C++ code
starts on its own (inside an already-guarded call).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engine.errors import ConfigError, ParleyError
from engine.runtime import mlx_lock
from engine.runtime.mlx_lock import MlxLock

ENV = "PARLEY_MLX_GUARD"
_FUNCTIONS = ("eval", "async_eval", "save", "savez", "savez_compressed", "save_safetensors",
              "save_gguf")
_METHODS = ("item", "tolist", "__array__", "__float__", "__int__", "__bool__", "__index__")
_MODES = ("raise", "record")


class MlxLockViolation(ParleyError):
    """MLX evaluated on a thread that does not hold the MLX lock (guard mode ``raise``)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One evaluation outside the lock: which entry point, on which thread, from where."""

    entry: str  # "mx.eval", "array.item", ...
    thread: str
    where: str  # "file.py:123 in function" of the caller


class _Guard:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.originals: dict[tuple[object, str], tuple[object, bool]] = {}
        self.mode = "raise"
        self.mlx_lock: MlxLock | None = None
        self.violations: list[Violation] = []


_guard = _Guard()


def guard_enabled() -> bool:
    """True while the guard's wrappers are installed."""
    return bool(_guard.originals)


def violations() -> list[Violation]:
    """The violations recorded since the guard was enabled (mode ``record`` keeps going;
    mode ``raise`` records each one it raises for)."""
    with _guard.lock:
        return list(_guard.violations)


def _caller() -> str:
    frame = sys._getframe(3)  # 0: here, 1: _violation, 2: the wrapper, 3: the MLX caller
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"


def _held() -> bool:
    lock = _guard.mlx_lock
    return lock.held_by_current_thread() if lock else mlx_lock.held_by_current_thread()


def _violation(entry: str) -> None:
    found = Violation(entry, threading.current_thread().name, _caller())
    with _guard.lock:
        _guard.violations.append(found)
    if _guard.mode == "raise":
        raise MlxLockViolation(
            f"{entry} evaluated MLX work on thread {found.thread!r} without the MLX lock "
            f"(at {found.where}); wrap the call in `with mlx_lock.hold(stage, unit):`")


def _wrap(entry: str, original: Callable) -> Callable:
    def guarded(*args, **kwargs):
        if not _held():
            _violation(entry)
        return original(*args, **kwargs)

    guarded.__name__ = getattr(original, "__name__", entry.rpartition(".")[2])
    guarded.__doc__ = getattr(original, "__doc__", None)
    guarded.__wrapped__ = original
    return guarded


def enable_guard(mode: str = "raise", lock: MlxLock | None = None) -> None:
    """Install the wrappers. ``mode``: ``raise`` (MlxLockViolation) or ``record`` (only
    collect ``violations()``). ``lock``: the lock to check (default: any MlxLock, so
    models loaded with an injected lock pass too). Enabling again only changes mode and
    lock."""
    if mode not in _MODES:
        raise ConfigError(f"MLX guard mode {mode!r} is not one of: {', '.join(_MODES)}")
    import mlx.core as mx

    with _guard.lock:
        _guard.mode = mode
        _guard.mlx_lock = lock
        if _guard.originals:
            return
        _guard.violations.clear()
        targets = [(mx, name, f"mx.{name}") for name in _FUNCTIONS]
        targets += [(mx.array, name, f"array.{name}") for name in _METHODS]
        for owner, name, entry in targets:
            original = getattr(owner, name, None)
            if original is None:
                continue
            own = name in vars(owner)  # restore by deleting what was only inherited
            _guard.originals[(owner, name)] = (original, own)
            setattr(owner, name, _wrap(entry, original))


def disable_guard() -> None:
    """Put every original entry point back (no-op when the guard is off)."""
    with _guard.lock:
        for (owner, name), (original, own) in _guard.originals.items():
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        _guard.originals.clear()
        _guard.mlx_lock = None


@contextmanager
def guarded(mode: str = "raise", lock: MlxLock | None = None) -> Iterator[None]:
    """``with guarded(): ...`` enables the guard for the block, then restores MLX."""
    enable_guard(mode, lock)
    try:
        yield
    finally:
        disable_guard()


def enable_from_env() -> bool:
    """Enable the guard if ``PARLEY_MLX_GUARD`` asks for it; True when it is on.

    ``1``/``true``/``yes``/``raise``: raise; ``record``: record only; empty/``0``: off.
    """
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return guard_enabled()
    mode = "record" if value == "record" else "raise"
    if value not in ("1", "true", "yes", "on", "raise", "record"):
        raise ConfigError(f"{ENV}={value!r}: use 1 (raise), record, or 0 (off)")
    enable_guard(mode)
    return True
