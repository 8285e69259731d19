"""What the assistant's tools are: their public description (``ToolInfo``), whether the
loaded LLM may use them (``ToolSupport``), and the registry the runner calls them through.

A ``Tool`` pairs the ``ToolSpec`` the model is offered (``engine/backends/base.py``) with
how it runs: a built-in is a function called on the tool worker thread, a user tool is
called in the worker process (``engine/tools/worker.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.backends.base import ToolSpec
from engine.errors import ConfigError

BUILT_IN = "built-in"
#: How an MCP server's tool names its source: "MCP server <name>".
MCP_SOURCE = "MCP server "


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool as the user sees it: ``source`` is "built-in", the user module's name, or
    "MCP server <name>" (``server`` is then that name: the server that answers its calls);
    ``side_effects`` tools ask the confirmer first unless named in ``tools.trusted``.
    ``returns_history``: its result holds turns of the stored conversations, which a
    remote LLM's server receives, so it asks first too while the LLM is remote."""

    name: str
    description: str
    side_effects: bool
    source: str
    returns_history: bool = False

    @property
    def server(self) -> str:
        """The MCP server that runs this tool; empty for a built-in or a user tool."""
        return self.source[len(MCP_SOURCE):] if self.source.startswith(MCP_SOURCE) else ""


def asks_first(tool: ToolInfo, *, remote_llm: bool) -> bool:
    """Whether a call of ``tool`` needs the user's yes (unless ``tools.trusted`` names
    it): it has side effects, or it would send stored conversations to a remote LLM."""
    return tool.side_effects or (tool.returns_history and remote_llm)


#: ``McpServerStatus.state``: connected, its tools listed.
UP = "up"
#: ``McpServerStatus.state``: it could not be started or listed (``reason`` says why).
FAILED = "failed"
#: ``McpServerStatus.state``: not connected now (never tried, or closed after a failed
#: call: the next call starts it again).
NOT_CONNECTED = "not connected"


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    """One server of ``tools.mcp_servers`` as the engine last saw it: ``state`` is
    ``UP``, ``FAILED`` or ``NOT_CONNECTED``; ``reason`` says why it failed (or what
    happens next); its tools are those of ``ToolSupport.tools`` whose ``server`` is ``name``."""

    name: str
    state: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolSupport:
    """Whether the engine offers tools now. ``reason`` is empty when ``available``, else
    why not and what would enable them; ``tools`` lists the tools known (offered or not);
    ``remote_llm``: the LLM that reads the tools' results runs on a remote server;
    ``servers``: each MCP server of the applied ``tools.mcp_servers``, in config order."""

    available: bool
    reason: str
    tools: tuple[ToolInfo, ...] = ()
    remote_llm: bool = False
    servers: tuple[McpServerStatus, ...] = ()

    def server_tools(self, server: str) -> tuple[ToolInfo, ...]:
        """The tools MCP server ``server`` offers (as named for the model)."""
        return tuple(tool for tool in self.tools if tool.server == server)

    def asks_first(self, tool: ToolInfo) -> bool:
        """Whether ``tool`` asks before it runs with this LLM (unless trusted)."""
        return asks_first(tool, remote_llm=self.remote_llm)


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the runner can call: its description, the spec offered to the model, and
    ``run(arguments) -> result`` for a built-in (None: it runs in the worker process)."""

    info: ToolInfo
    spec: ToolSpec
    run: Callable[[Mapping[str, Any]], Any] | None = field(default=None, compare=False)


def trusted_names(text: str) -> tuple[str, ...]:
    """The names of ``tools.trusted`` (comma-separated; blanks ignored)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def check_trusted(text: str, tools: Mapping[str, Tool]) -> frozenset[str]:
    """The trusted names, each one a known tool; otherwise a ConfigError listing them."""
    names = trusted_names(text)
    unknown = [name for name in names if name not in tools]
    if unknown:
        known = ", ".join(sorted(tools)) or "none"
        raise ConfigError(f"tools.trusted names {', '.join(repr(n) for n in unknown)}, which "
                          f"{'is' if len(unknown) == 1 else 'are'} not a tool; the tools are: {known}")
    return frozenset(names)
