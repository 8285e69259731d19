"""``/mcp``: Parley's MCP tools (``speak``, ``listen``, ``ask``) over the MCP
streamable-HTTP transport, on the realtime server's port and behind its request checks.

The MCP SDK serves the transport as an ASGI application (its
``StreamableHTTPSessionManager``); ``McpRoute`` hands it each aiohttp request through a
small bridge (``_asgi``): the request's body in, the answer streamed out as the SDK
writes it (JSON, or an SSE stream that stays open while a tool runs). The session
manager's task group lives in one task from the server's start to its shutdown.

Each tool call borrows a unit from the server's pool for its length, with the audio
devices ``devices()`` makes (``serve --mcp``: this machine's microphone and speaker),
and gives it back when the call ends: a realtime client can have it the moment after.
One call runs at a time (the devices are one microphone and one speaker); a second call
meanwhile, or a call that finds every unit busy, is a tool error saying so, not a wait.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, MutableMapping
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import web

from engine.audio.base import AudioSink, AudioSource
from engine.engine import Engine
from engine.mcp_server.voice import Voice
from engine.server.admission import Admission
from engine.server.pool import Lease, UnitPool

log = logging.getLogger("parley.server")

MCP_PATH = "/mcp"
#: How often a streamed answer looks whether its client is gone.
DISCONNECT_CHECK_S = 0.25
#: The name a tool call's unit is lent under (``GET /v1/pool``'s ``client``).
MCP_CLIENT = "MCP client (/mcp)"


@dataclass(frozen=True)
class McpDevices:
    """The microphone and speaker of one tool call's unit; ``on_listen`` is called when
    the call starts listening (a recording in place of the microphone plays then)."""

    source: AudioSource
    sink: AudioSink
    on_listen: Callable[[], None] | None = None


class McpRoute:
    """Serves the MCP tools at ``MCP_PATH`` on units of ``pool``, claimed through the
    server's ``admission`` (realtime clients waiting in line go first, and hear of a unit
    a call gives back); ``devices`` makes each call's microphone and speaker. Blocking
    work (a unit's start and stop) runs on ``executor``."""

    def __init__(self, engine: Engine, pool: UnitPool, admission: Admission,
                 executor: Executor, devices: Callable[[], McpDevices]) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from engine.mcp_server.tools import build_server

        self.engine = engine
        self.pool = pool
        self.admission = admission
        self.executor = executor
        self._devices = devices
        self._one_call = asyncio.Lock()
        server = build_server(self)
        # The server's RequestGuard checks Host and Origin for every route, this one too.
        server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=(
            TransportSecuritySettings(enable_dns_rebinding_protection=False)))
        self._manager = server.session_manager
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def register(self, app: web.Application) -> None:
        """Route ``MCP_PATH`` (every method) to the SDK; its sessions start with the
        application and end at its shutdown."""
        app.router.add_route("*", MCP_PATH, self._asgi)
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._shutdown)

    # ---------------------------------------------------------------- tool calls
    @asynccontextmanager
    async def lend(self) -> AsyncIterator[Voice]:
        """A ``Voice`` on a unit of the pool for one tool call (``VoiceLender``); the unit
        goes back when the call ends, also when it is cancelled."""
        from mcp.server.mcpserver.exceptions import ToolError

        if self._one_call.locked():
            raise ToolError("another MCP tool call is using this server's microphone and "
                            "speaker: call again when it has ended")
        async with self._one_call:
            try:
                # Shielded: a unit started for a call cancelled meanwhile must still go back.
                with anyio.CancelScope(shield=True):
                    devices = await self._blocking(self._devices)
                    lease = await self.admission.claim_now(MCP_CLIENT, devices.source,
                                                           devices.sink)
            except Exception as exc:  # the agent reads why; the log has the rest
                log.warning("starting a unit for an MCP tool call failed", exc_info=True)
                raise ToolError(f"the server could not start a pipeline for this call: "
                                f"{exc}") from None
            if lease is None:
                raise ToolError(f"all {self.pool.size} pipelines of this server are in use "
                                "(or clients wait for one); call again later")
            voice = Voice.on_unit(self.engine, lease.pipeline, lease.unit,
                                  on_listen=devices.on_listen)
            try:
                yield voice
            finally:
                with anyio.CancelScope(shield=True):  # a cancelled call frees its unit too
                    await self._blocking(self._give_back, voice, lease)
                self.admission.unit_freed()

    def _give_back(self, voice: Voice, lease: Lease) -> None:
        voice.close()  # waits for the call's thread, which sees its stop within 0.25 s
        self.pool.release(lease)

    async def _blocking(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, functools.partial(fn, *args))

    # ---------------------------------------------------------------- the session manager
    async def _start(self, app: web.Application) -> None:
        started = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(started, self._stop))
        await started

    async def _run(self, started: asyncio.Future, stop: asyncio.Event) -> None:
        # The manager's task group is entered and left in this one task (anyio's rule).
        try:
            async with self._manager.run():
                started.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    async def _shutdown(self, app: web.Application) -> None:
        if self._stop is not None and self._task is not None:
            self._stop.set()  # cancels the sessions' tasks: open streams end
            await asyncio.gather(self._task, return_exceptions=True)
        # The SSE library polls for a uvicorn's exit on each loop it streamed on, forever;
        # this loop closes after the server stops, so its poller ends here.
        watchers = [task for task in asyncio.all_tasks()
                    if getattr(task.get_coro(), "__qualname__", "") == "_shutdown_watcher"]
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    # ---------------------------------------------------------------- the ASGI bridge
    async def _asgi(self, request: web.Request) -> web.StreamResponse:
        """Run the SDK's ASGI handler on ``request``; its answer, streamed as written."""
        body = await request.read()  # bounded by the application's client_max_size
        answered = asyncio.Event()
        response: web.StreamResponse | None = None
        delivered = False
        left = False  # the client went away mid-answer: the rest is dropped, as ASGI servers do

        async def receive() -> MutableMapping[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            # Then the client's leaving (or the answer's end), as an ASGI server says it.
            while not answered.is_set() and not _gone(request):
                try:
                    await asyncio.wait_for(answered.wait(), DISCONNECT_CHECK_S)
                except TimeoutError:
                    pass
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal response, left
            if left:
                return
            try:
                await _forward(message)
            except ConnectionError:
                left = True
                answered.set()

        async def _forward(message: MutableMapping[str, Any]) -> None:
            nonlocal response
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for name, value in message.get("headers", ()):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
                await response.prepare(request)
            elif message["type"] == "http.response.body" and response is not None:
                if message.get("body"):
                    await response.write(message["body"])
                if not message.get("more_body", False):
                    await response.write_eof()
                    answered.set()

        try:
            await self._manager.handle_request(_scope(request), receive, send)
        finally:
            answered.set()
        if response is None:  # the SDK failed before answering (its log says why)
            return web.json_response({"error": {"type": "server_error", "code": "mcp_failed",
                                                "message": "the MCP request failed",
                                                "param": None}}, status=500)
        return response


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _scope(request: web.Request) -> dict:
    """The ASGI ``http`` scope of an aiohttp request."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.partition("?")[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"), "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if peer else None, "server": tuple(sock[:2]) if sock else None,
        "state": {},
    }
