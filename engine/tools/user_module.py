"""The user's own tools: ``tools.user_module`` is a ``.py`` file or a module name that
exposes ``TOOLS``, a list of JSON-schema descriptions in the OpenAI function format
(``name``, ``description``, ``parameters``, optional ``side_effects``; the
``{"type": "function", "function": {...}}`` wrapping is accepted too) and one function
per tool, of the same name, taking the arguments as keywords.

A tool is taken to have side effects (it asks before it runs) unless it declares
``side_effects: false``: Parley cannot see what a user's function does, so one that says
nothing is treated as one that could order the pizza.

``load_user_module`` runs in the tool worker process (``engine/tools/worker.py``): the
module's own imports and top-level code never run in the engine's process. Every fault
is a ``ToolModuleError`` naming the file and what is wrong, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


class ToolModuleError(ConfigError):
    """``tools.user_module`` cannot be used; the message names the file and the fault."""


@dataclass(frozen=True, slots=True)
class UserTool:
    """One tool of the user's module, as the engine's side learns it (picklable)."""

    name: str
    description: str
    parameters: dict[str, Any]
    side_effects: bool


def module_label(spec: str) -> str:
    """How the module is named to the user: its file's name, or the module name."""
    return Path(spec).name if spec.endswith(".py") else spec


def import_user_module(spec: str) -> tuple[ModuleType, str]:
    """The module ``spec`` names (a ``.py`` path or a module name) and its file's path."""
    spec = spec.strip()
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ToolModuleError(f"tools.user_module: the file {path} does not exist")
        name = f"parley_user_tools_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ToolModuleError(f"tools.user_module: {path} cannot be loaded as Python")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        where = str(path)
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - whatever the module raised, named for the user
            raise _import_failed(where, exc, where) from None
        return module, where
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name == spec or (exc.name and spec.startswith(exc.name + ".")):
            raise ToolModuleError(f"tools.user_module: there is no module named {spec!r} (give a "
                                  ".py file's path, or a module on the Python path)") from None
        raise ToolModuleError(f"tools.user_module: importing {spec} raised "
                              f"ModuleNotFoundError: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the module raised, named for the user
        raise _import_failed(spec, exc, None) from None
    return module, getattr(module, "__file__", None) or spec


def _import_failed(name: str, exc: Exception, file: str | None) -> ToolModuleError:
    """The error for a module that raised while imported: a syntax error's file and line,
    else what it raised."""
    if isinstance(exc, SyntaxError):
        return ToolModuleError(f"tools.user_module: {file or exc.filename} line {exc.lineno}: "
                               f"syntax error ({exc.msg})")
    return ToolModuleError(f"tools.user_module: importing {name} raised "
                           f"{type(exc).__name__}: {exc}")


def describe_tools(module: ModuleType, where: str) -> tuple[list[UserTool], dict[str, Callable[..., Any]]]:
    """The module's ``TOOLS`` checked, and the function of each; a ToolModuleError names
    the first fault (``where``: the file, for the message)."""
    tools = getattr(module, "TOOLS", None)
    if tools is None:
        raise ToolModuleError(f"tools.user_module: {where} has no TOOLS list")
    if not isinstance(tools, list | tuple) or not tools:
        raise ToolModuleError(f"tools.user_module: {where}: TOOLS must be a non-empty list of "
                              f"tool descriptions, not {type(tools).__name__}")
    described: list[UserTool] = []
    functions: dict[str, Callable[..., Any]] = {}
    for i, entry in enumerate(tools):
        tool = _describe(entry, f"{where}: TOOLS[{i}]")
        if tool.name in functions:
            raise ToolModuleError(f"tools.user_module: {where}: TOOLS[{i}] repeats the name {tool.name!r}")
        function = getattr(module, tool.name, None)
        if not callable(function):
            raise ToolModuleError(f"tools.user_module: {where}: TOOLS[{i}] describes {tool.name!r}, "
                                  f"but the module has no function {tool.name}()")
        described.append(tool)
        functions[tool.name] = function
    return described, functions


def _describe(entry: object, at: str) -> UserTool:
    wrapped = isinstance(entry, dict) and entry.get("type") == "function"
    if wrapped and isinstance(entry, dict) and isinstance(entry.get("function"), dict):
        entry = {**entry["function"], **({"side_effects": entry["side_effects"]}
                                          if "side_effects" in entry else {})}
    if not isinstance(entry, dict):
        raise ToolModuleError(f"tools.user_module: {at} must be a dict (name, description, "
                              f"parameters), not {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolModuleError(f"tools.user_module: {at}: 'name' must be a function name "
                              f"(letters, digits, _ or -; at most 64), not {name!r}")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise ToolModuleError(f"tools.user_module: {at} ({name}): 'description' must be text")
    parameters = entry.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object" \
            or not isinstance(parameters.get("properties", {}), dict):
        raise ToolModuleError(f"tools.user_module: {at} ({name}): 'parameters' must be a JSON "
                              "schema of type object with a 'properties' dict")
    side_effects = entry.get("side_effects", True)  # unknown: could act, so it asks
    if not isinstance(side_effects, bool):
        raise ToolModuleError(f"tools.user_module: {at} ({name}): 'side_effects' must be true or false")
    unknown = set(entry) - {"name", "description", "parameters", "side_effects", "strict"}
    if unknown:
        raise ToolModuleError(f"tools.user_module: {at} ({name}): unknown keys "
                              f"{', '.join(sorted(unknown))}; allowed: name, description, "
                              "parameters, side_effects")
    return UserTool(name, description, {"type": "object", "properties": {}, **parameters}, side_effects)


def load_user_module(spec: str) -> tuple[list[UserTool], dict[str, Callable[..., Any]]]:
    """Import ``spec`` and check its tools (in the worker process)."""
    module, where = import_user_module(spec)
    return describe_tools(module, where)
