"""The assistant's own tools (issue 22): the registry, the built-ins (clock, timers,
calculator, history search), the user's module in a worker process, the runner and the
timer clock. ``Engine`` wires them (``engine/tools/host.py``); the public names are
``ToolSupport``, ``ToolInfo`` and ``Timer``, loaded on first use so the worker process
imports only what it runs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.tools.registry import ToolInfo, ToolSupport
    from engine.tools.timers import Timer

__all__ = ["Timer", "ToolInfo", "ToolSupport"]
_WHERE = {"ToolInfo": "engine.tools.registry", "ToolSupport": "engine.tools.registry",
          "Timer": "engine.tools.timers"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'engine.tools' has no attribute {name!r}")
