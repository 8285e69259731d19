"""Parley engine: the voice pipeline, headless (no Qt).

The public API is ``Engine``, ``EngineConfig`` and ``load_config``::

    from engine import Engine, EngineConfig, load_config

They load on first use (PEP 562), so ``import engine.errors`` or ``import engine.config``
stays light: the pipeline, numpy and the backends are imported only by whoever asks for
``Engine``. ``docs/ARCHITECTURE.md`` shows the folders behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.config import EngineConfig, load_config
    from engine.engine import Engine

__all__ = ["Engine", "EngineConfig", "load_config"]

# Public name -> the module that defines it.
_EXPORTS = {
    "Engine": "engine.engine",
    "EngineConfig": "engine.config",
    "load_config": "engine.config",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module the first time the name is asked for."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
