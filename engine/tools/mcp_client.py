"""MCP servers as tool sources (``tools.mcp_servers``), with the official ``mcp`` SDK.

``McpServers`` owns one asyncio event loop on its own thread (``parley-mcp``), started with
the first server and joined by ``close``; every connection lives there. Each server has a
task that enters the SDK's ``Client`` (a stdio command, or a streamable-HTTP URL with its
headers), lists the tools, then holds the connection open until it is closed: the SDK's
contexts are left in the task that entered them. The tool worker thread calls
``call``, which waits on the loop with the tool's timeout; nothing here runs on a stage
thread, the audio callback or the GUI.

A server that crashes, hangs past ``tools.timeout_s`` or answers with something that is
not a tool result ends that call with ``ToolRaised``/``ToolTimeout`` (the runner speaks its
apology and tells the model why); its connection is closed, and the next call starts it
again. A server saying its tool list changed (``notifications/tools/list_changed``, or a
2026-07-28 ``subscriptions/listen`` event) is listed again and ``on_change`` is called.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError
from engine.config_mcp import McpServerSpec, resolve
from engine.tools.registry import FAILED, NOT_CONNECTED, UP, McpServerStatus
from engine.tools.worker import ToolRaised, ToolTimeout

log = logging.getLogger("parley.tools.mcp")

#: The most a server is given to start and list its tools (its own calls: tools.timeout_s).
CONNECT_TIMEOUT_S = 30.0
#: How long ``close`` waits for the connections to end.
CLOSE_TIMEOUT_S = 10.0
INSTALL_HINT = "tools.mcp_servers needs the mcp package: pip install 'parley[mcp]'"


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server listed. ``read_only``: it says it changes nothing (its
    ``readOnlyHint``); any other tool asks before it runs."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool


def content_text(result: Any) -> str:
    """What the model is given of a ``CallToolResult``: its text blocks, its structured
    content (unless a text block already says the same), and images, audio and other
    media named in brackets, never their bytes."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{'an image' if kind == 'image' else 'a sound'} ({block.mime_type}), "
                         "not shown]")
        elif kind == "resource_link":
            parts.append(f"[a link to {block.name}: {block.uri}]")
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(text if isinstance(text, str) else
                         f"[a file {inner.uri} ({inner.mime_type or 'binary'}), not shown]")
        else:
            parts.append(f"[content of type {kind or 'unknown'}, not shown]")
    structured = result.structured_content
    if structured is not None:
        # A server sends its structured result as JSON text too (the SDK wraps a plain
        # value as {"result": ...} beside the value's text): said once is enough.
        said = [_json_or_text(part) for part in parts]
        wrapped = isinstance(structured, dict) and set(structured) == {"result"} and \
            str(structured["result"]) in parts
        if structured not in said and not wrapped:
            parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class _Connection:
    """One server's connection, owned by the task ``_own`` on the loop."""

    def __init__(self, spec: McpServerSpec, on_listed: Callable[[], None]) -> None:
        self.spec = spec
        self.tools: tuple[McpTool, ...] = ()
        self._on_listed = on_listed
        self._client: Any = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._relisting: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None  # referenced: the loop keeps tasks weakly

    @property
    def alive(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def open(self, timeout: float) -> None:
        """Connect and list the tools; a ConfigError says why not."""
        await self.close()
        self._stop = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._own(ready), name=f"mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self.close()
            raise ConfigError(f"MCP server {self.spec.name!r} did not start and list its tools "
                              f"within {timeout:g} s") from None

    async def _own(self, ready: asyncio.Future[None]) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client_of(stack))
                self._client = client
                await self._list()
                caps = client.server_capabilities.tools
                if caps is not None and caps.list_changed and client.protocol_version in _modern():
                    asyncio.get_running_loop().create_task(self._listen(client))
                ready.set_result(None)
                await self._stop.wait()
        except ConfigError as exc:
            if not ready.done():
                ready.set_exception(exc)
        except BaseException as exc:  # the server's fault, told to whoever waits
            if not ready.done():
                ready.set_exception(ConfigError(f"MCP server {self.spec.name!r} ({self._where()}) "
                                                f"could not be used: {_why(exc)}"))
            elif not self._stop.is_set():
                log.warning("MCP server %s ended: %s", self.spec.name, _why(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _client_of(self, stack: AsyncExitStack) -> Any:
        try:
            from mcp import Client, StdioServerParameters
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
        env, headers = resolve(self.spec)
        server: Any
        if self.spec.command:
            server = StdioServerParameters(command=self.spec.command, args=list(self.spec.args),
                                           env=env or None, cwd=self.spec.cwd or None)
        else:
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            server = streamable_http_client(self.spec.url, http_client=http)
        # No response cache: a listing must be fresh after a list-changed notice.
        return Client(server, message_handler=self._on_message, cache=None)

    def _where(self) -> str:
        return " ".join((self.spec.command, *self.spec.args)) if self.spec.command else self.spec.url

    async def _list(self) -> None:
        client = self._client
        if client is None:
            return
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever cannot hang the listing
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                hints = tool.annotations
                tools.append(McpTool(self.spec.name, tool.name, tool.description or tool.title or tool.name,
                                     dict(tool.input_schema or {"type": "object", "properties": {}}),
                                     bool(hints is not None and hints.read_only_hint)))
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tuple(tools)

    async def _on_message(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if type(root).__name__ == "ToolListChangedNotification":
            self._relist_soon()

    async def _listen(self, client: Any) -> None:
        """A 2026-07-28 server's list-changed events arrive on a listen stream."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._relist_soon()
        except Exception as exc:  # noqa: BLE001 - a lost stream: the next restart listens again
            log.info("MCP server %s: the list-changed stream ended: %s", self.spec.name, _why(exc))

    def _relist_soon(self) -> None:
        if self._relisting is None or self._relisting.done():
            self._relisting = asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        try:
            await asyncio.wait_for(self._list(), CONNECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the old list stays; logged
            log.warning("MCP server %s: listing its tools again failed: %s", self.spec.name, _why(exc))
            return
        self._on_listed()

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> str:
        """Run ``tool``; its result as text. Restarts a closed connection first."""
        name = self.spec.name
        if not self.alive:
            try:
                await self.open(CONNECT_TIMEOUT_S)
            except ConfigError as exc:
                raise ToolRaised(f"the MCP server {name!r} could not be started again: {exc}") from None
            self._on_listed()
        try:
            result = await asyncio.wait_for(self._client.call_tool(tool, arguments), timeout)
            text = content_text(result)
        except asyncio.CancelledError:  # the engine is stopping: the server may be mid-call
            self._abandon()
            raise
        except TimeoutError:
            self._abandon()
            raise ToolTimeout(f"the MCP server {name!r} did not answer {tool} within {timeout:g} s "
                              "(tools.timeout_s); it was stopped and starts again on the next call") from None
        except Exception as exc:  # noqa: BLE001 - crashed, or answered with garbage
            self._abandon()
            raise ToolRaised(f"the MCP server {name!r} failed while running {tool} ({_why(exc)}); "
                             "it starts again on the next call") from None
        if result.is_error:
            raise ToolRaised(f"{tool} (MCP server {name!r}) reported an error: {text}")
        return text

    async def close(self) -> None:
        """End the connection (a stdio server's process with it)."""
        task, self._task = self._task, None
        self._client = None
        if task is not None:
            self._stop.set()
            await _finish(task)
        if self._closing is not None:  # a connection abandoned after a failed call
            await self._closing

    def _abandon(self) -> None:
        """Close in the background: the failed call ends now, the next one reconnects."""
        task, self._task = self._task, None
        self._client = None
        if task is not None:
            self._stop.set()
            self._closing = asyncio.get_running_loop().create_task(_finish(task))


async def _finish(task: asyncio.Task[None]) -> None:
    """Wait for a connection's task to leave its contexts; cancel one that is stuck."""
    try:
        await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
    except (TimeoutError, Exception):  # noqa: BLE001 - a stuck exit is cancelled
        task.cancel()


def _modern() -> tuple[str, ...]:
    """The protocol versions whose list-changed events come on a listen stream."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return MODERN_PROTOCOL_VERSIONS


def _why(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _why(exc.exceptions[0])
    # One line, short: a validation error's full text is a page the model need not read.
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpServers:
    """The connections to ``tools.mcp_servers``; see the module doc. Thread-safe:
    ``configure`` and ``close`` run under the engine's lock, ``call`` on the tool worker
    thread, ``on_change`` on the loop's thread (it must not wait on the loop)."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._connections: dict[str, _Connection] = {}
        self._specs: tuple[McpServerSpec, ...] = ()  # the last configured, in config order
        self._faults: dict[str, str] = {}  # why a server failed at the last configure
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._halted = threading.Event()
        self._in_flight: set[concurrent.futures.Future[Any]] = set()

    def _submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="parley-mcp", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return self._submit(coroutine).result(timeout)

    def configure(self, specs: tuple[McpServerSpec, ...]) -> list[str]:
        """Connect the servers of ``specs`` (a running one whose spec is unchanged is kept;
        removed ones are closed), in parallel; why each one that failed could not be used.
        A failed server offers no tools until the next ``configure`` or call."""
        if not specs and not self._connections:
            return []
        return self._run(self._configure(specs), CONNECT_TIMEOUT_S + CLOSE_TIMEOUT_S + 5)

    async def _configure(self, specs: tuple[McpServerSpec, ...]) -> list[str]:
        wanted = {spec.name: spec for spec in specs}
        for name, connection in list(self._connections.items()):
            if wanted.get(name) != connection.spec:
                del self._connections[name]
                await connection.close()
        fresh = [self._connections.setdefault(spec.name, _Connection(spec, self._on_change))
                 for spec in specs
                 if spec.name not in self._connections or not self._connections[spec.name].alive]
        results = await asyncio.gather(*(c.open(CONNECT_TIMEOUT_S) for c in fresh), return_exceptions=True)
        faults = {c.spec.name: str(r) if isinstance(r, ConfigError) else
                  f"MCP server {c.spec.name!r}: {_why(r)}"
                  for c, r in zip(fresh, results, strict=True) if isinstance(r, BaseException)}
        self._specs, self._faults = specs, faults  # a server kept running has no fault
        return list(faults.values())

    def statuses(self) -> tuple[McpServerStatus, ...]:
        """Each server of the last ``configure``, in config order: up, failed (and why:
        the fault ``configure`` reported), or not connected (closed after a failed call)."""
        out: list[McpServerStatus] = []
        for spec in self._specs:
            connection, fault = self._connections.get(spec.name), self._faults.get(spec.name)
            if connection is not None and connection.alive:
                out.append(McpServerStatus(spec.name, UP))
            elif fault is not None:
                out.append(McpServerStatus(spec.name, FAILED, fault))
            else:
                out.append(McpServerStatus(spec.name, NOT_CONNECTED, "it starts again on the next call"))
        return tuple(out)

    def listings(self) -> tuple[McpTool, ...]:
        """Every tool the servers listed last, server by server in config order."""
        return tuple(tool for connection in list(self._connections.values()) for tool in connection.tools)

    def call(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """Run ``server``'s ``tool`` (on the loop) within ``timeout_s``; its result as text.
        Raises ToolTimeout or ToolRaised (see the module doc)."""
        connection = self._connections.get(server)
        if connection is None:
            raise ToolRaised(f"the MCP server {server!r} is not configured")
        if self._halted.is_set():
            raise ToolRaised(f"{tool} was not run: the engine is stopping")
        slack = CONNECT_TIMEOUT_S + CLOSE_TIMEOUT_S + 5  # a restart, and the close after a hang
        future = self._submit(connection.call(tool, arguments, timeout_s))
        self._in_flight.add(future)
        try:
            return future.result(timeout_s + slack)
        except concurrent.futures.CancelledError:
            raise ToolRaised(f"{tool} was stopped: the engine is stopping") from None
        except TimeoutError:
            raise ToolTimeout(f"the MCP server {server!r} did not answer {tool} in time") from None
        finally:
            self._in_flight.discard(future)

    def abort(self) -> None:
        """From any thread: a call in flight ends at once with ToolRaised (the engine is
        stopping), and later calls too until ``resume``."""
        self._halted.set()
        for future in list(self._in_flight):
            future.cancel()

    def resume(self) -> None:
        """Calls run again (the engine started again)."""
        self._halted.clear()

    def close(self) -> None:
        """Close every connection and join the loop's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._run(self._configure(()), CLOSE_TIMEOUT_S + 5)
        except Exception as exc:  # noqa: BLE001 - closing goes on; logged
            log.warning("closing the MCP servers failed: %s", _why(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

