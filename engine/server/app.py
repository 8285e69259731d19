"""The aiohttp application: ``/v1/realtime`` (WebSocket), ``GET /v1/pool``, the OpenAI
HTTP API on the same models (``engine.server.openai_routes``) and the web page at ``/``
(``engine.server.page``).

Before any route runs, a request is checked: a browser ``Origin`` not allowed with
``--allow-origin`` is refused (403), and when an API key is set a request without
``Authorization: Bearer <key>`` (compared in constant time) is refused (401), before the
WebSocket upgrade. Neither the key nor the header is ever logged or echoed.

The web page (``engine.server.page``, ``GET /``) is served without the key; its own
origin is allowed without ``--allow-origin`` when the page was loaded by an address or a
name of this machine (``same_origin``; a name someone else's DNS points here, a DNS
rebinding, is not one). A browser cannot set a header on a WebSocket, so the key is also
taken as the subprotocol ``openai-insecure-api-key.<key>`` beside ``realtime``, as
OpenAI's browser clients send it; the answer then names ``realtime`` as the protocol.

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

A refusal is logged once per client address and reason per minute (``RefusalLog``), not
once per try.

Engine events, reply audio and markers arrive on stage threads and reach the session only
through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hmac
import ipaddress
import json
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor

from aiohttp import WSCloseCode, WSMsgType, web

from engine.backends.base import model_of
from engine.backends.voices import openai_voice
from engine.engine import Engine
from engine.pipeline.events import Event
from engine.recording import uses_bundled_stack
from engine.server.pool import UnitPool
from engine.server.protocol import RealtimeSession
from engine.server.session_update import Capabilities
from engine.server.server_settings import ServerSettings
from engine.server.stream_audio import StreamSink, StreamSource

log = logging.getLogger("parley.server")

OUTBOX_LIMIT_BYTES = 64 * 1024 * 1024  # a client this far behind in reading is dropped
CLOSE_TIMEOUT_S = 3.0  # how long a close waits for the client's closing frame
RETRY_AFTER_DEFAULT_S = 5  # a full pool's Retry-After before any session has ended
RETRY_AFTER_MIN_S = 2
RETRY_AFTER_MAX_S = 30  # a refusal is cheap (no upgrade, no unit): asking again soon is fine
REFUSAL_LOG_PERIOD_S = 60.0
KEY_SUBPROTOCOL = "openai-insecure-api-key"  # a browser's key, as OpenAI's browser clients send it
REALTIME_SUBPROTOCOL = "realtime"


def _refuse(status: int, code: str, message: str, kind: str = "invalid_request_error",
            headers: dict[str, str] | None = None) -> web.Response:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response({"error": {"type": kind, "code": code, "message": message,
                                        "param": None}}, status=status, headers=headers)


class RefusalLog:
    """Logs a refusal at most once per client address and reason per ``period_s``: a
    client retrying in a loop must not flood the log. The next line says how many were
    held back."""

    def __init__(self, period_s: float = REFUSAL_LOG_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, max_addresses: int = 4096) -> None:
        self.period_s = period_s
        self._clock = clock
        self._max = max_addresses
        # (address, reason) -> (logged at, refusals held back since)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def refused(self, address: str, reason: str, message: str, *args,
                exc_info: bool = False) -> bool:
        """Log ``message % args`` unless ``address`` was refused for ``reason`` within the
        period; True if it was logged."""
        now = self._clock()
        key = (address, reason)
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.period_s:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        if seen is None and len(self._seen) >= self._max:  # forget addresses quiet for a period
            self._seen = {a: v for a, v in self._seen.items() if now - v[0] < self.period_s}
            if len(self._seen) >= self._max:
                self._seen.clear()
        held = seen[1] if seen is not None else 0
        self._seen[key] = (now, 0)
        more = f" ({held} more from {address} not logged since)" if held else ""
        log.warning(message + "%s", *args, more, exc_info=exc_info)
        return True


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


def _key_matches(header: str, key: str) -> bool:
    scheme, _, token = header.partition(" ")
    # compare_digest runs in constant time for equal lengths: no timing leak of the key.
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


def subprotocol_key(header: str) -> str | None:
    """The key a browser sent in ``Sec-WebSocket-Protocol`` as
    ``openai-insecure-api-key.<key>``; None without one."""
    for token in header.split(","):
        name, dot, value = token.strip().partition(".")
        if dot and name == KEY_SUBPROTOCOL:
            return value
    return None


def has_key(request: web.Request, key: str) -> bool:
    """True if ``request`` carries ``key``: the Authorization header, or (a browser's
    WebSocket) the key subprotocol."""
    if _key_matches(request.headers.get("Authorization", ""), key):
        return True
    sent = subprotocol_key(request.headers.get("Sec-WebSocket-Protocol", ""))
    return sent is not None and hmac.compare_digest(sent.encode(), key.encode())


def same_origin(request: web.Request, origin: str, own_names: frozenset[str]) -> bool:
    """True if ``origin`` is the server's own (the page it served), reached by one of
    ``own_names`` or an IP address: a DNS name that is not this machine's could be a
    rebinding (another site's name pointed at this server), so it needs --allow-origin."""
    host = request.host
    if origin != f"{request.scheme}://{host}":
        return False
    name = host.rpartition(":")[0] if not host.endswith("]") and ":" in host else host
    name = name.strip("[]").lower()
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in own_names


def guard(settings: ServerSettings):
    """The middleware that checks the origin and the API key of every request."""
    from engine.server.page import is_page_path
    from engine.server.tls import machine_names

    own_names = frozenset(n.lower() for n in (*machine_names(), settings.host))

    @web.middleware
    async def check(request: web.Request, handler):
        origin = request.headers.get("Origin")
        if (origin is not None and origin not in settings.allow_origins
                and not same_origin(request, origin, own_names)):
            log.warning("refused a request from origin %r (not allowed by --allow-origin)",
                        origin[:200])
            return _refuse(403, "origin_not_allowed", "this origin may not use the server; "
                           "start it with --allow-origin ORIGIN")
        if settings.api_key and not is_page_path(request.path) and not has_key(request, settings.api_key):
            log.warning("refused a request from %s: missing or wrong API key", request.remote)
            return _refuse(401, "invalid_api_key", "missing or wrong API key: send "
                           "'Authorization: Bearer <key>' (a browser's WebSocket: the "
                           f"subprotocol '{KEY_SUBPROTOCOL}.<key>')")
        return await handler(request)

    return check


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
                 executor: Executor) -> None:
        self.engine = engine
        self.pool = pool
        self.settings = settings
        self.executor = executor
        self.connections: set[web.WebSocketResponse] = set()
        self.refusals = RefusalLog()
        self.lengths = SessionLengths()

    def build(self) -> web.Application:
        """The application: the guard middleware, the routes, the shutdown hook."""
        app = web.Application(middlewares=[guard(self.settings)],
                              client_max_size=self.settings.hard_message_bytes)
        app.router.add_get("/v1/realtime", self.realtime)
        app.router.add_get("/v1/pool", self.pool_status)
        # The OpenAI HTTP API on the same models (one Parley can serve another), behind
        # the same guard.
        from engine.server.openai_routes import OpenAiRoutes

        OpenAiRoutes(self.engine).register(app)
        from engine.server.page import WebPage

        WebPage().register(app)
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
        try:
            try:
                lease = await self._blocking(self.pool.claim, client, source, sink)
            except Exception:  # noqa: BLE001 - this client only; logged with its traceback
                self.refusals.refused(address, "pipeline_start_failed", "starting a unit for %s "
                                      "failed (answered 500)", client, exc_info=True)
                return _refuse(500, "pipeline_start_failed", "the server could not start a "
                               "pipeline for this session; its log says why", kind="server_error")
            if lease is None:
                return self._full(address, client)
            try:
                await ws.prepare(request)
            except Exception:  # the client left mid-upgrade: its unit goes back at once
                log.info("the WebSocket upgrade for %s failed: releasing unit %d", client, lease.unit)
                await self._blocking(self.pool.release, lease)
                raise
            self.connections.add(ws)
            await self._serve(ws, session, lease, source, loop)
        finally:
            self.connections.discard(ws)
            await outbox.close()
        return ws

    def _full(self, address: str, client: str) -> web.Response:
        """503 for a client the pool has no unit for, with when to try again."""
        now = time.perf_counter()
        retry = self.lengths.retry_after([now - lease.claimed_at for lease in self.pool.leases()])
        self.refusals.refused(address, "session_limit_reached", "refused %s: all %d pipelines "
                              "are in use (answered 503, Retry-After %d s)", client,
                              self.pool.size, retry)
        return _refuse(503, "session_limit_reached", f"all {self.pool.size} pipelines are in use; "
                       f"try again in {retry} s", headers={"Retry-After": str(retry)})

    async def _serve(self, ws, session: RealtimeSession, lease, source, loop) -> None:
        on_event = _hop(loop, session.on_event)
        unit = lease.unit

        def listen(event: Event) -> None:  # on stage threads: filter, then hop
            if event.unit == unit:
                on_event(event)

        unsubscribe = self.engine.subscribe(listen)
        try:
            session.attach(lease.pipeline, source, unit_number=unit, voice_for=self._voice_for,
                           metrics=self.engine.metrics, parley=self._parley_info(),
                           capabilities=self._capabilities(lease.pipeline))
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    await session.handle_text(message.data)
                elif message.type is WSMsgType.BINARY:
                    session.error("invalid_json", "binary frames carry no Realtime events: send "
                                  "JSON text")
                elif message.type is WSMsgType.ERROR:
                    log.info("unit %d: connection error: %s", unit, ws.exception())
                    break
        finally:
            session.close()
            unsubscribe()
            self.lengths.ended(time.perf_counter() - lease.claimed_at)
            await self._blocking(self.pool.release, lease)

    async def _on_shutdown(self, app: web.Application) -> None:
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutting down")
                               for ws in list(self.connections)), return_exceptions=True)
