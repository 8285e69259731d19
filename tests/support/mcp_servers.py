"""Real MCP servers, written with the official ``mcp`` SDK, for the tests of Parley as an
MCP client (``engine/tools/mcp_client.py``).

Run one with ``python -m tests.support.mcp_servers stdio`` (over its stdin and stdout)
or ``python -m tests.support.mcp_servers http PORT`` (streamable HTTP on 127.0.0.1:PORT,
path ``/mcp``). Its tools:

- ``read_note`` (read-only) and ``delete_note`` (destructive), ``touch_note`` (no hints);
- ``token`` (read-only): the ``NOTES_TOKEN`` environment variable (stdio) or the
  ``Authorization`` header the request came with (HTTP);
- ``crash`` (read-only) ends the process; ``hang`` (read-only) never answers;
  ``garbage`` (read-only, stdio) answers with a result that is not a tool result;
- ``picture`` (read-only): text, a structured result and an image; ``long_text``: many
  characters;
- ``grow`` (read-only) adds the tool ``extra`` and says the list changed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
#: A 1x1 PNG, base64.
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
         "AAAABJRU5ErkJggg==")


def notes_server(name: str = "notes") -> MCPServer:
    """The notes server (see the module doc)."""
    server = MCPServer(name)
    notes = {"shopping": "eggs, milk and bread"}

    @server.tool(annotations=READ_ONLY, description="Read one of the user's notes.")
    def read_note(title: str) -> str:
        return notes.get(title, f"there is no note {title!r}")

    @server.tool(annotations=DESTRUCTIVE, description="Delete one of the user's notes.")
    def delete_note(title: str) -> str:
        notes.pop(title, None)
        return f"deleted {title}"

    @server.tool(description="Mark a note as seen (no hints: could do anything).")
    def touch_note(title: str) -> str:
        return f"touched {title}"

    @server.tool(annotations=READ_ONLY, description="The token this server was given.")
    def token(ctx: Context) -> str:
        headers = ctx.headers
        if headers is not None:
            return headers.get("authorization", "none")
        return os.environ.get("NOTES_TOKEN", "none")

    @server.tool(annotations=READ_ONLY, description="End the server's process.")
    def crash() -> str:
        sys.stdout.flush()
        os._exit(3)

    @server.tool(annotations=READ_ONLY, description="Never answer.")
    def hang() -> str:
        time.sleep(3600)
        return "late"

    @server.tool(annotations=READ_ONLY, description="Answer with something that is not a tool result.")
    async def garbage(ctx: Context) -> str:
        # The answer to this very request, malformed, straight onto the wire: the SDK
        # serves it from a duplicate of the stdout the process started with (Linux's
        # /proc finds it); the server's own answer never comes.
        request = ctx.request_id
        wire_id = int(request) if str(request).isdigit() else request
        line = json.dumps({"jsonrpc": "2.0", "id": wire_id,
                           "result": {"content": "not a list of blocks"}}) + "\n"
        fds = [int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2]
        wire = next(fd for fd in fds if _link(fd) == _WIRE)
        os.write(wire, line.encode())
        await anyio.sleep(3600)
        return "late"

    @server.tool(annotations=READ_ONLY, description="A picture of the garden.")
    def picture() -> CallToolResult:
        return CallToolResult(content=[TextContent(text="the garden at noon"),
                                       ImageContent(data=PIXEL, mime_type="image/png")],
                              structured_content={"flowers": 12})

    @server.tool(annotations=READ_ONLY, description="A very long text.")
    def long_text(characters: int) -> str:
        return ("word " * (characters // 5 + 1))[:characters]

    @server.tool(annotations=READ_ONLY, description="Add the tool 'extra'.")
    async def grow(ctx: Context) -> str:
        server.add_tool(_extra, name="extra", description="A tool added later.",
                        annotations=READ_ONLY)
        try:
            await ctx.notify_tools_changed()
        except Exception:  # noqa: BLE001 - a handshake-era session has no listen bus
            pass
        try:
            await ctx.session.send_tool_list_changed()
        except Exception:  # noqa: BLE001 - a 2026 session has no standing notifications
            pass
        return "grown"

    return server


#: What the process's stdout was when it started (the stdio server's wire).
_WIRE = ""


def _link(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _extra() -> dict[str, Any]:
    return {"extra": True}


def stdio_server(name: str = "notes", **env: str) -> dict[str, Any]:
    """A ``[[tools.mcp_servers]]`` entry running the stdio server of this module."""
    entry: dict[str, Any] = {"name": name, "command": sys.executable,
                             "args": ["-m", "tests.support.mcp_servers", "stdio"], "cwd": str(_ROOT)}
    if env:
        entry["env"] = env
    return entry


class HttpNotes:
    """The notes server over streamable HTTP in a process of its own, on 127.0.0.1;
    ``url`` is its endpoint. ``close`` ends the process."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen([sys.executable, "-m", "tests.support.mcp_servers", "http",
                                         str(self.port)], cwd=_ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"the HTTP notes server did not listen on port {self.port}")

    def close(self) -> None:
        from tests.support.processes import end_process

        end_process(self.process)


def check_speak_and_ask(speak, asked) -> None:
    """The results of Parley's own MCP tools ``speak`` (words played for over a second)
    and ``ask`` (jfk.flac as the microphone: its words heard back), as a client gets them."""
    from tests.support.transcripts import normalize

    assert not speak.is_error, speak.content
    assert speak.structured_content["played"] is True
    assert speak.structured_content["duration_s"] > 1.0
    assert not asked.is_error, asked.content
    answer = asked.structured_content
    assert answer["timed_out"] is False and answer["question_played"] is True
    assert "ask not what your country can do for you" in normalize(answer["answer"]), answer


def main(argv: list[str]) -> None:
    """``stdio`` or ``http PORT``."""
    global _WIRE
    _WIRE = _link(1)
    server = notes_server(os.environ.get("NOTES_NAME", "notes"))
    if argv[:1] == ["http"]:
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
