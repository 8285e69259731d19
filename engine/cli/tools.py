"""``parley-cli tools``: the assistant's tools tried by hand, without the LLM.

``tools list [--json]`` names every tool the settings give (the built-ins, the user's
module, each MCP server's), where it comes from and whether it asks first; ``tools call
NAME JSON`` runs one with those arguments and prints its result as the model would be
given it. The command is the user's own act, so a tool that would ask first runs without
asking. No model loads; an MCP server that cannot start is reported on stderr.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable

from engine.cli.output import write_json
from engine.config import EngineConfig
from engine.errors import ParleyError

AddConfigFlags = Callable[[argparse.ArgumentParser], None]


def add_tools_parser(sub, add_config_flags: AddConfigFlags) -> None:
    """``parley-cli tools`` and its subcommands."""
    tools = sub.add_parser("tools", help="list the assistant's tools, or call one without the LLM",
                           description="The tools the settings give: built-ins, tools.user_module "
                                       "and each server of tools.mcp_servers.")
    commands = tools.add_subparsers(dest="tools_command", required=True, metavar="{list,call}")
    listing = commands.add_parser("list", help="every tool, its source, and whether it asks first")
    listing.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_config_flags(listing)
    call = commands.add_parser("call", help="run one tool now (it does not ask first: you asked)")
    call.add_argument("name", metavar="NAME", help="the tool, as `tools list` names it")
    call.add_argument("arguments", metavar="JSON", nargs="?", default="{}",
                      help='its arguments as a JSON object, e.g. \'{"title": "shopping"}\' (default {})')
    add_config_flags(call)


def run_tools(args: argparse.Namespace, config: EngineConfig) -> int:
    """Run ``tools list`` or ``tools call``; 0, or a ParleyError (exit status 2) naming
    why the call failed."""
    from engine.pipeline.events import EngineError, EventHub
    from engine.tools.host import ToolHost
    from engine.tools.worker import ToolRaised, ToolTimeout

    events = EventHub()
    events.subscribe(lambda e: print(f"error: {e.message}", file=sys.stderr)
                     if isinstance(e, EngineError) else None)
    host = ToolHost(events, itertools.count(1).__next__)
    try:
        host.configure(config.tools, None)
        if args.tools_command == "list":
            support = host.support()
            rows = [{"name": t.name, "source": t.source, "server": t.server, "asks_first": t.side_effects,
                     "description": t.description} for t in support.tools]
            if args.json:
                write_json({"tools": rows})
            else:
                width = max((len(r["name"]) for r in rows), default=4)
                for row in rows:
                    asks = "asks first" if row["asks_first"] else "runs"
                    print(f"{row['name']:{width}}  {row['source']:20}  {asks:10}  {row['description']}")
            return 0
        try:
            print(host.call(args.name, args.arguments))
        except (ToolRaised, ToolTimeout) as exc:
            raise ParleyError(f"{args.name} failed: {exc}") from None
        return 0
    finally:
        host.close()
