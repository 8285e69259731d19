"""``tools.mcp_servers``: the MCP servers whose tools the assistant may call.

In the config file each server is a TOML table::

    [[tools.mcp_servers]]
    name = "notes"                      # letters, digits, - and _; used as a prefix on collisions
    command = "uvx"                     # a stdio server: the command and its arguments
    args = ["notes-mcp", "--root", "~/Notes"]
    env = { NOTES_TOKEN = "${NOTES_TOKEN}" }

    [[tools.mcp_servers]]
    name = "home"
    url = "http://127.0.0.1:8123/mcp"   # a streamable-HTTP server
    headers = { Authorization = "Bearer ${HOME_TOKEN}" }

A flag or a saved setting gives the same list as JSON text. Secrets stay out of the file:
``${NAME}`` in a value of ``env`` or ``headers`` is replaced by Parley's environment
variable NAME when the server is connected (``resolve``), and a missing one is an error
naming it. This module imports nothing heavy: ``engine/config.py`` validates with it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError

KEY = "tools.mcp_servers"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYS = ("name", "command", "args", "env", "cwd", "url", "headers")


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), never both.
    ``env`` and ``headers`` values may name environment variables as ``${NAME}``."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command else "http"

    def as_dict(self) -> dict[str, Any]:
        """The spec as the config file writes it (empty fields left out)."""
        out: dict[str, Any] = {"name": self.name}
        if self.command:
            out["command"] = self.command
            if self.args:
                out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd:
                out["cwd"] = self.cwd
        else:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        return out


def mcp_servers_text(dotted: str, raw: Any) -> str:
    """The canonical JSON text of ``raw`` (a TOML array of tables, or JSON text; empty:
    no servers), checked; a ConfigError names the server, the key and what is allowed."""
    specs = parse_servers(raw, dotted)
    return json.dumps([spec.as_dict() for spec in specs], ensure_ascii=False) if specs else ""


def parse_servers(raw: Any, dotted: str = KEY) -> tuple[McpServerSpec, ...]:
    """The servers ``raw`` describes (see ``mcp_servers_text``)."""
    if isinstance(raw, str):
        if not raw.strip():
            return ()
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"'{dotted}' must be a JSON list of server objects; {exc}") from None
    if not isinstance(raw, list):
        raise ConfigError(f"'{dotted}' must be a list of servers ([[{dotted}]] tables in the config "
                          f"file, a JSON list elsewhere); got {raw!r}")
    specs: list[McpServerSpec] = []
    for index, item in enumerate(raw):
        spec = _server(item, f"{dotted}[{index}]")
        if any(s.name == spec.name for s in specs):
            raise ConfigError(f"'{dotted}': two servers are named {spec.name!r}; names must differ")
        specs.append(spec)
    return tuple(specs)


def _server(item: Any, where: str) -> McpServerSpec:
    if not isinstance(item, dict):
        raise ConfigError(f"'{where}' must be a table with name and command or url; got {item!r}")
    unknown = sorted(set(item) - set(_KEYS))
    if unknown:
        raise ConfigError(f"'{where}' has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_KEYS)}")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"'{where}.name' must be 1 to 32 letters, digits, - or _; got {name!r}")
    where = f"{where} ({name})"
    command, url = _text(item, "command", where), _text(item, "url", where)
    if bool(command) == bool(url):
        raise ConfigError(f"'{where}' needs exactly one of command (a stdio server) or url "
                          "(a streamable-HTTP server)")
    if url:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"'{where}.url' must be an http:// or https:// address; got {url!r}")
        for key in ("args", "env", "cwd"):
            if key in item:
                raise ConfigError(f"'{where}.{key}' is for a stdio server (command); this one has a url")
        return McpServerSpec(name, url=url, headers=_pairs(item, "headers", where))
    if "headers" in item:
        raise ConfigError(f"'{where}.headers' is for an HTTP server (url); this one has a command")
    args = item.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"'{where}.args' must be a list of strings; got {args!r}")
    return McpServerSpec(name, command=command, args=tuple(args), env=_pairs(item, "env", where),
                         cwd=_text(item, "cwd", where))


def _text(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise ConfigError(f"'{where}.{key}' must be a string; got {value!r}")
    return value.strip()


def _pairs(item: dict[str, Any], key: str, where: str) -> tuple[tuple[str, str], ...]:
    value = item.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ConfigError(f"'{where}.{key}' must be a table of strings (a secret as "
                          f"\"${{VARIABLE}}\"); got {value!r}")
    return tuple(sorted(value.items()))


def resolve(spec: McpServerSpec,
            environ: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``spec``'s env and headers with each ``${NAME}`` replaced from the environment; a
    ConfigError names the server, the key and the variable that is not set."""
    environ = dict(os.environ) if environ is None else environ

    def fill(key: str, field: str, value: str) -> str:
        def one(match: re.Match[str]) -> str:
            variable = match.group(1)
            if variable not in environ:
                raise ConfigError(f"MCP server {spec.name!r}: {key}.{field} needs the environment "
                                  f"variable {variable}, which is not set")
            return environ[variable]
        return _VARIABLE.sub(one, value)

    return ({k: fill("env", k, v) for k, v in spec.env},
            {k: fill("headers", k, v) for k, v in spec.headers})
