"""The aiohttp application: ``/v1/realtime`` (WebSocket), ``GET /v1/pool``, the OpenAI
HTTP API on the same models (``engine.server.openai_routes``), the web page at ``/``
(``engine.server.page``) and, when asked for, the MCP tools at ``/mcp``
(``engine.server.mcp_route``).

Before any route runs, a request is checked (``engine.server.request_guard``): its
``Host`` must be a name of this machine (or given with ``--allow-host``), a browser
``Origin`` must be allowed, the HTTP routes answer CORS for allowed origins, and when an
API key is set a request without ``Authorization: Bearer <key>`` is refused (401; 429
once an address has sent too many wrong keys), before the WebSocket upgrade. Neither
the key nor the header is ever logged or echoed. A browser cannot set a header on a
WebSocket, so the key is also taken as the subprotocol ``openai-insecure-api-key.<key>``
beside ``realtime``, as OpenAI's browser clients send it; the answer then names
``realtime`` as the protocol.

Each WebSocket connection claims a unit from the pool before the upgrade, runs a
``RealtimeSession`` on it and returns the unit when the client leaves (or when the
upgrade fails). A connection the pool has no unit for is refused over plain HTTP, so a
client counts a failed connect and backs off:

- 503, ``Retry-After: S`` and ``{"error": {"type": "invalid_request_error", "code":
  "session_limit_reached", ...}}`` when every unit is in use. S is the typical time until
  a unit frees: the median length of recent sessions less how long the oldest current
  one has run, from ``RETRY_AFTER_MIN_S`` to ``RETRY_AFTER_MAX_S`` seconds
  (``RETRY_AFTER_DEFAULT_S`` before any session has ended).
- 500 with ``{"error": {"type": "server_error", "code": "pipeline_start_failed", ...}}``
  when starting a unit failed.

With ``--queue N`` a connection that finds every unit busy is upgraded instead and waits
in line for one (``engine.server.admission``); the 503 then means the line is full too.

A refusal is logged once per client address and reason per minute (``RefusalLog``), not
once per try.

A session is closed by the server once it has been idle for ``idle_timeout_s`` (no
speech and no client event but audio, a forgotten tab streaming silence; not while a
reply plays) or has lasted
``max_session_s``: an ``error`` event (``session_idle_timeout`` or ``session_expired``,
OpenAI's code for its own sessions' end) says why, then the WebSocket closes with 1001
(going away) and the unit is freed (``engine.server.limits.SessionLimits``). A client's
own ``idle_timeout_ms`` (``server_vad``) is OpenAI's: once the last reply has played and
that long has passed without speech, ``input_audio_buffer.timeout_triggered`` and a
response in which the model prompts the user to go on.

Engine events, reply audio and markers arrive on stage threads and reach the session only
through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import re
import statistics
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from aiohttp import WSCloseCode, WSMsgType, web

from engine.backends.base import model_of
from engine.backends.voices import openai_voice
from engine.engine import Engine
from engine.pipeline.events import (Event, FinalTranscript, PartialTranscript, ReplyText,
                                    ToolCallFinished, ToolCallsMade, ToolCallStarted,
                                    TurnCancelled, TurnFinished, UserSpeaking)
from engine.recording import uses_bundled_stack
from engine.server.admission import QUEUE_EVENTS_PARAM, Admission
from engine.server.pool import Lease, UnitPool
from engine.server.protocol import RealtimeSession
from engine.server.request_guard import REALTIME_PATH, RefusalLog, RequestGuard
from engine.server.request_guard import guard as guard  # the checks, for a bare app (tests)
from engine.server.request_guard import refusal as _refuse
from engine.server.request_guard import subprotocol_key as subprotocol_key
from engine.server.limits import SessionLimits
from engine.server.session_update import Capabilities
from engine.server.server_settings import ServerSettings
from engine.server import wire
from engine.server.stream_audio import StreamSink, StreamSource
from engine.server.waiting_room import HeldEvents

if TYPE_CHECKING:
    from engine.server.mcp_route import McpDevices

log = logging.getLogger("parley.server")

OUTBOX_LIMIT_BYTES = 64 * 1024 * 1024  # a client this far behind in reading is dropped
CLOSE_TIMEOUT_S = 3.0  # how long a close waits for the client's closing frame
RETRY_AFTER_DEFAULT_S = 5  # a full pool's Retry-After before any session has ended
RETRY_AFTER_MIN_S = 2
RETRY_AFTER_MAX_S = 30  # a refusal is cheap (no upgrade, no unit): asking again soon is fine
REALTIME_SUBPROTOCOL = "realtime"
BINARY_FRAME = "binary frames carry no Realtime events: send JSON text"
#: The close code of a session the server ended for its idle or length limit: the client
#: should not come straight back (OpenAI's Realtime API closes an expired session so).
SESSION_LIMIT_CLOSE = WSCloseCode.GOING_AWAY
#: How often a session's idle and length limits are looked at, at most.
LIMIT_CHECK_S = 1.0
#: How often a client's own idle timeout (``idle_timeout_ms``) is looked at.
NUDGE_CHECK_S = 0.1
#: Engine events that show the user is there.
_USER_ACTIVITY = (UserSpeaking, PartialTranscript, FinalTranscript)
#: Engine events of a reply under way, and of its turn's end.
_REPLYING = (ReplyText, ToolCallsMade, ToolCallStarted, ToolCallFinished)
_TURN_ENDS = (TurnFinished, TurnCancelled)
#: A client message that only carries audio: streamed silence is not activity.
_AUDIO_ONLY = re.compile(r'"type"\s*:\s*"input_audio_buffer\.append"')


class SessionLengths:
    """How long recent sessions held their unit: what a full pool's Retry-After says."""

    def __init__(self, keep: int = 32) -> None:
        self._recent: deque[float] = deque(maxlen=keep)

    def ended(self, seconds: float) -> None:
        self._recent.append(seconds)

    def retry_after(self, running_s: list[float]) -> int:
        """Whole seconds until a unit is likely free, given how long the current sessions
        have run: the median session length less the oldest's age, clamped."""
        if not self._recent:
            return RETRY_AFTER_DEFAULT_S
        left = statistics.median(self._recent) - max(running_s, default=0.0)
        return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, round(left))))


class Outbox:
    """Server events for one WebSocket, sent in order by one writer task.

    ``put`` never waits, so callbacks on the loop can send without awaiting. A client
    that stops reading is disconnected once ``limit`` bytes wait for it.
    """

    def __init__(self, ws: web.WebSocketResponse, limit: int = OUTBOX_LIMIT_BYTES) -> None:
        self._ws = ws
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._pending = 0
        self._limit = limit
        self._closed = False
        self._closer: asyncio.Task | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def put(self, event: dict) -> None:
        """Queue ``event`` for the client (on the loop thread; never waits)."""
        if self._closed:
            return
        text = json.dumps(event)
        self._pending += len(text)
        if self._pending > self._limit:
            log.warning("a client stopped reading (%d bytes waiting): disconnecting it", self._pending)
            self._closed = True
            # Kept: the loop holds only a weak reference to a task.
            self._closer = asyncio.get_running_loop().create_task(
                self._ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"not reading"))
            return
        self._queue.put_nowait(text)

    async def _run(self) -> None:
        while True:
            text = await self._queue.get()
            if text is None:
                return
            self._pending -= len(text)
            if self._ws.closed:
                continue
            try:
                await self._ws.send_str(text)
            except (ConnectionError, RuntimeError):  # the client went away mid-send
                self._closed = True

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout``), then stop the writer."""
        self._closed = True
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()


class _Ending:
    """What ends a session on the server's side: its limits, and the outbox that must
    send the reason before the close."""

    def __init__(self, outbox: Outbox, limits: SessionLimits, sink: StreamSink) -> None:
        self.outbox = outbox
        self.limits = limits
        self.sink = sink  # whether reply audio sent is still playing
        self.closing = False  # the server is closing the session for a limit


def _hop(loop: asyncio.AbstractEventLoop, fn: Callable) -> Callable:
    """``fn`` made callable from any thread: it runs later on ``loop``."""

    def call(*args) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed while a stopping unit still emitted
            pass

    return call


class RealtimeApp:
    """Builds the aiohttp application over one engine and its pool."""

    def __init__(self, engine: Engine, pool: UnitPool, settings: ServerSettings,
                 executor: Executor, mcp_devices: Callable[[], McpDevices] | None = None) -> None:
        """``mcp_devices``: serve the MCP tools at ``/mcp`` on units with these devices
        (``engine.server.mcp_route``); None: no ``/mcp``."""
        self.engine = engine
        self.mcp_devices = mcp_devices
        self.pool = pool
        self.settings = settings
        self.executor = executor
        self.connections: set[web.WebSocketResponse] = set()
        self.refusals = RefusalLog()
        self.lengths = SessionLengths()
        self.admission = Admission(pool, pool.waiting, self._blocking)

    def build(self) -> web.Application:
        """The application: the request checks (``engine.server.request_guard``), the
        routes, the shutdown hook."""
        app = web.Application(client_max_size=self.settings.hard_message_bytes)
        RequestGuard(self.settings, refusals=self.refusals).install(app)
        app.router.add_get(REALTIME_PATH, self.realtime)
        app.router.add_get("/v1/pool", self.pool_status)
        # The OpenAI HTTP API on the same models (one Parley can serve another), behind
        # the same guard.
        from engine.server.openai_routes import OpenAiRoutes

        OpenAiRoutes(self.engine).register(app)
        from engine.server.page import WebPage

        WebPage().register(app)
        if self.mcp_devices is not None:  # imports the MCP SDK: only when it is served
            from engine.server.mcp_route import McpRoute

            McpRoute(self.engine, self.pool, self.admission, self.executor,
                     self.mcp_devices).register(app)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _blocking(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, functools.partial(fn, *args))

    async def pool_status(self, request: web.Request) -> web.Response:
        """``GET /v1/pool``: the units, their clients and the shared models, as JSON."""
        return web.json_response(await self._blocking(self.pool.status))

    def _voice_for(self, name: str) -> str:
        """The loaded TTS model's voice that a client's voice ``name`` stands for (OpenAI's
        names by the README's table); ConfigError if it has none (run in the executor)."""
        model = model_of(self.engine.models, "tts")
        voice = openai_voice(name, model.voices()) or name
        model.check_voice(voice)
        return voice

    def _capabilities(self, pipeline) -> Capabilities:
        """What this unit's models can do, for mapping a client's session."""
        return Capabilities(learned_end_of_turn=pipeline.turn_scorer is not None,
                            tool_support=model_of(self.engine.models, "llm").tool_support())

    def _parley_info(self) -> dict:
        engine = self.engine
        return {"notes": list(engine.notes), "bundled_stack": uses_bundled_stack(engine),
                "placements": engine.placement_dicts()}

    async def realtime(self, request: web.Request) -> web.StreamResponse:
        """``/v1/realtime``: claim a unit, upgrade, serve the session on it, give it back.
        Without a unit the answer is an HTTP error, before the upgrade (see the module doc)."""
        # A browser that offers subprotocols fails the connection unless one is chosen.
        ws = web.WebSocketResponse(max_msg_size=self.settings.hard_message_bytes, heartbeat=30.0,
                                   timeout=CLOSE_TIMEOUT_S, protocols=(REALTIME_SUBPROTOCOL,))
        if not ws.can_prepare(request):  # not a WebSocket handshake: its 400, before any unit starts
            await ws.prepare(request)
        loop = asyncio.get_running_loop()
        outbox = Outbox(ws)
        session = RealtimeSession(outbox.put, self.settings, self._blocking)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        client = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        address = str(peer[0]) if peer else "unknown"
        to_client = _hop(loop, session.on_audio)
        source = StreamSource(self.settings.max_buffer_s, on_marker=_hop(loop, session.on_marker))
        # Base64 in the sink's thread: the loop only forwards the text.
        sink = StreamSink(lambda turn, pcm: to_client(turn, base64.b64encode(pcm).decode("ascii")))
        ticket = None  # a place in the waiting room, when every unit is busy
        held = HeldEvents(max_bytes=self.settings.hard_message_bytes)  # sent while waiting
        queued: dict = {}
        try:
            try:
                lease = await self.admission.claim_now(client, source, sink)
            except Exception:  # noqa: BLE001 - this client only; logged with its traceback
                self.refusals.refused(address, "pipeline_start_failed", "starting a unit for %s "
                                      "failed (answered 500)", client, exc_info=True)
                return _refuse(500, "pipeline_start_failed", "the server could not start a "
                               "pipeline for this session; its log says why", kind="server_error")
            if lease is None and (ticket := self.admission.join(client)) is None:
                return self._full(address, client)
            try:
                await ws.prepare(request)
            except Exception:  # the client left mid-upgrade: its unit goes back at once
                if lease is not None:
                    log.info("the WebSocket upgrade for %s failed: releasing unit %d", client,
                             lease.unit)
                    await self._blocking(self.pool.release, lease)
                    self.admission.unit_freed()
                raise
            self.connections.add(ws)
            if ticket is not None:  # admitted to wait: the session starts when a unit frees
                outcome = await self.admission.wait(
                    ws, ticket, held, outbox.put, source, sink,
                    announce=request.query.get(QUEUE_EVENTS_PARAM) == "1")
                if not isinstance(outcome, Lease):  # it left, or was turned away (error sent)
                    if outcome is not None:
                        await outbox.close()
                        await ws.close(code=outcome.code, message=outcome.reason.encode())
                    return ws
                lease = outcome
                queued = {"queue": {"waited_s": round(self.pool.waiting.waited(ticket), 3),
                                    "dropped_audio_events": held.dropped_audio}}
            # The limits count from here: not from the unit's start, nor the wait in line.
            limits = SessionLimits(self.settings.idle_timeout_s, self.settings.max_session_s)
            await self._serve(ws, session, lease, source, loop, _Ending(outbox, limits, sink),
                              held, queued)
        finally:
            if ticket is not None:  # out of the line even if the upgrade failed
                self.admission.leave(ticket)
            self.connections.discard(ws)
            await outbox.close()
        return ws

    def _full(self, address: str, client: str) -> web.Response:
        """503 for a client the pool has no unit for, with when to try again."""
        now = time.perf_counter()
        retry = self.lengths.retry_after([now - lease.claimed_at for lease in self.pool.leases()])
        waiting = self.pool.waiting
        line = f" and the queue is full ({len(waiting)} waiting)" if waiting.capacity else ""
        self.refusals.refused(address, "session_limit_reached", "refused %s: all %d pipelines "
                              "are in use%s (answered 503, Retry-After %d s)", client,
                              self.pool.size, line, retry)
        return _refuse(503, "session_limit_reached", f"all {self.pool.size} pipelines are in "
                       f"use{line}; try again in {retry} s", headers={"Retry-After": str(retry)})

    async def _serve(self, ws, session: RealtimeSession, lease, source, loop,
                     ending: _Ending, held: HeldEvents, queued: dict) -> None:
        on_event = _hop(loop, session.on_event)
        unit = lease.unit

        def listen(event: Event) -> None:  # on stage threads: filter, then hop
            if event.unit == unit:
                if isinstance(event, _USER_ACTIVITY):
                    ending.limits.active()
                elif isinstance(event, _REPLYING):
                    ending.limits.replying()
                elif isinstance(event, _TURN_ENDS):
                    ending.limits.finished()
                on_event(event)

        unsubscribe = self.engine.subscribe(listen)
        watch = loop.create_task(self._watch_limits(ws, session, ending, unit))
        try:
            session.attach(lease.pipeline, source, unit_number=unit, voice_for=self._voice_for,
                           metrics=self.engine.metrics, parley={**self._parley_info(), **queued},
                           capabilities=self._capabilities(lease.pipeline),
                           check_language=model_of(self.engine.models, "stt").check_language)
            for data in held.messages:  # what the client sent while it waited, in order
                if isinstance(data, str):
                    await session.handle_text(data)
                else:
                    session.error("invalid_json", BINARY_FRAME)
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    if not _AUDIO_ONLY.search(message.data):
                        ending.limits.active()
                    await session.handle_text(message.data)
                elif message.type is WSMsgType.BINARY:
                    session.error("invalid_json", BINARY_FRAME)
                elif message.type is WSMsgType.ERROR:
                    log.info("unit %d: connection error: %s", unit, ws.exception())
                    break
        finally:
            if ending.closing:  # let its close handshake finish (bounded by the ws timeout)
                await asyncio.gather(watch, return_exceptions=True)
            else:
                watch.cancel()
            session.close()
            unsubscribe()
            self.lengths.ended(time.perf_counter() - lease.claimed_at)
            await self._blocking(self.pool.release, lease)
            self.admission.unit_freed()

    async def _watch_limits(self, ws: web.WebSocketResponse, session: RealtimeSession,
                            ending: _Ending, unit: int) -> None:
        """Prompt an idle user when the client asked for it (``idle_timeout_ms``), and
        close the session once its idle or length limit is reached: an ``error`` event
        says why (OpenAI's shape for an expired session), then the WebSocket closes with
        ``SESSION_LIMIT_CLOSE``, which ends ``_serve`` and frees the unit."""
        limits = ending.limits
        while (end := limits.ended(playing=ending.sink.is_playing)) is None:
            if limits.nudge_due(session.idle_timeout_ms, playing=ending.sink.is_playing):
                await self._prompt_idle_user(session, ending)
            wait = limits.next_check_s(LIMIT_CHECK_S)
            if session.idle_timeout_ms:
                wait = min(wait, NUDGE_CHECK_S)
            await asyncio.sleep(wait)
        log.info("unit %d: closing its session (%s)", unit, end.code)
        ending.closing = True
        session.error(end.code, end.message)
        await ending.outbox.close(timeout=CLOSE_TIMEOUT_S)  # the error event goes out first
        await ws.close(code=SESSION_LIMIT_CLOSE, message=end.code.encode())

    @staticmethod
    async def _prompt_idle_user(session: RealtimeSession, ending: _Ending) -> None:
        """What OpenAI's Realtime API does when ``idle_timeout_ms`` passes without speech:
        ``input_audio_buffer.timeout_triggered``, then a response, in which the model
        prompts the user to go on. The offsets count the session's time (a client streams
        its microphone all along); Parley adds no empty audio item, so ``item_id`` names
        none."""
        now_ms = round((time.monotonic() - ending.limits.started) * 1000)
        quiet_ms = session.idle_timeout_ms or 0
        ending.outbox.put(wire.event("input_audio_buffer.timeout_triggered",
                                     audio_start_ms=max(0, now_ms - quiet_ms), audio_end_ms=now_ms,
                                     item_id=wire.new_id("item")))
        await session.handle_text(json.dumps({"type": "response.create"}))

    async def _on_shutdown(self, app: web.Application) -> None:
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutting down")
                               for ws in list(self.connections)), return_exceptions=True)
