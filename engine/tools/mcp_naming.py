"""The names and ``Tool`` entries of the MCP servers' tools (``engine/tools/mcp_client.py``
connects them): a tool keeps its server's name for it unless that name is taken, then it
is ``server__tool``; a tool asks first unless it says it is read-only."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from engine.backends.base import ToolSpec
from engine.tools.registry import MCP_SOURCE, Tool, ToolInfo

if TYPE_CHECKING:
    from engine.tools.mcp_client import McpServers, McpTool

log = logging.getLogger("parley.tools.mcp")

#: Between a server's name and its tool's, where two tools share a name.
SEPARATOR = "__"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


def offered_name(name: str) -> str:
    """``name`` as a function name the LLM APIs accept (letters, digits, _ and -, 64 at most)."""
    return _NOT_NAME.sub("_", name)[:64] or "_"


def name_tools(listed: tuple[McpTool, ...], taken: Collection[str]) -> dict[str, McpTool]:
    """The servers' tools by the name the model is offered: the tool's own name, or
    ``server__tool`` where it would collide with a tool of ``taken`` (built-in or the
    user's) or with another server's tool of the same name; those keep their names."""
    plain = Counter(offered_name(tool.name) for tool in listed)
    out: dict[str, McpTool] = {}
    for tool in listed:
        name = offered_name(tool.name)
        if name in taken or plain[name] > 1:
            name = offered_name(f"{tool.server}{SEPARATOR}{tool.name}")
        if name in out or name in taken:
            log.warning("MCP server %s: the tool %r is left out: its name %r is taken",
                        tool.server, tool.name, name)
            continue
        out[name] = tool
    return out


def mcp_tools(servers: McpServers, taken: Mapping[str, Tool],
              timeout_s: Callable[[], float]) -> dict[str, Tool]:
    """The servers' tools as the runner calls them (named by ``name_tools``): a tool is
    taken to change something, and asks first, unless it says it is read-only."""
    tools: dict[str, Tool] = {}
    for name, tool in name_tools(servers.listings(), taken).items():
        def run(arguments: Mapping[str, Any], tool: McpTool = tool) -> str:
            return servers.call(tool.server, tool.name, dict(arguments), timeout_s())
        tools[name] = Tool(ToolInfo(name, tool.description, not tool.read_only, MCP_SOURCE + tool.server),
                           ToolSpec(name, tool.description, tool.input_schema), run)
    return tools
