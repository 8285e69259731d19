"""Running the realtime server: ``RealtimeServer`` on a loop, ``ServerThread`` in a thread.

``ServerThread`` is what the CLI, the app's Server panel and the benchmark use: it runs
the server on its own event loop in a background thread over an engine that is already
loaded. ``start`` returns once the server listens (or raises a ParleyError saying why
not: the port is in use, a TLS file cannot be used...), ``stop`` closes every
connection, stops their units and joins the thread. The engine stays loaded; its owner
closes it. With TLS settings the one listening socket speaks TLS only: the WebSocket
(``wss://``) and the HTTP routes (``https://``) alike.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from aiohttp import web

from engine.engine import Engine
from engine.errors import ParleyError
from engine.server.app import RealtimeApp
from engine.server.pool import UnitPool
from engine.server.server_settings import ServerSettings
from engine.server.tls import TlsCertificate, resolve_tls, server_context
from engine.server.waiting_room import WaitingRoom

if TYPE_CHECKING:
    from engine.server.mcp_route import McpDevices

log = logging.getLogger("parley.server")

SHUTDOWN_TIMEOUT_S = 5.0


class RealtimeServer:
    """The aiohttp server over ``engine``'s pool of units; ``start``/``stop`` on one loop.
    ``mcp_devices``: also serve the MCP tools at ``/mcp``, each call on a unit of the pool
    with the devices it makes (``engine.server.mcp_route``)."""

    def __init__(self, engine: Engine, settings: ServerSettings, first_unit: int = 0,
                 mcp_devices: Callable[[], McpDevices] | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.mcp_devices = mcp_devices
        self.pool = UnitPool(engine, settings.num_pipelines, first_unit,
                             waiting=WaitingRoom(settings.queue, settings.queue_timeout_s))
        # Unit starts and stops, typed messages and voice checks block: they run here,
        # never on the loop. Enough workers that every unit can start or stop at once.
        self.executor = ThreadPoolExecutor(max_workers=2 * settings.num_pipelines + 4,
                                           thread_name_prefix="parley-server")
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.tls: TlsCertificate | None = None  # set by start when the settings ask for TLS

    async def start(self) -> None:
        """Listen; a ParleyError if the address or a TLS file cannot be used."""
        try:  # a self-signed certificate may be made here: in the executor, not on the loop
            self.tls = await asyncio.get_running_loop().run_in_executor(
                self.executor, resolve_tls, self.settings)
            ssl_context = None if self.tls is None else server_context(self.tls)
        except ParleyError:
            self.executor.shutdown(wait=True)
            raise
        app = RealtimeApp(self.engine, self.pool, self.settings, self.executor,
                          self.mcp_devices).build()
        runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            self.executor.shutdown(wait=True)
            raise ParleyError(f"cannot listen on {self.settings.host} port {self.settings.port}: "
                              f"{exc.strerror or exc}") from None
        self._runner = runner
        self.port = site.port
        # Loaded now (its first client may have to wait ~0.1 s for it), so that a client's
        # semantic_vad can map to learned end of turn.
        why = await asyncio.get_running_loop().run_in_executor(
            self.executor, self.engine.offer_learned_end_of_turn)
        if why is not None:
            log.info("semantic_vad will map to silence: %s", why)

    @property
    def url(self) -> str:
        """``ws://host:port/v1/realtime`` (``wss://`` with TLS)."""
        return self.settings.url(self.port)

    @property
    def http_url(self) -> str:
        """``http://host:port/v1`` (``https://`` with TLS): the root of the HTTP routes."""
        return self.settings.http_url(self.port)

    async def stop(self) -> None:
        """Close every connection, stop every unit, stop listening. Idempotent."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        loop = asyncio.get_running_loop()
        for lease in self.pool.leases():  # a handler cut short by the shutdown timeout
            await loop.run_in_executor(self.executor, functools.partial(self.pool.release, lease))
        self.executor.shutdown(wait=True)


class ServerThread:
    """A ``RealtimeServer`` on its own event loop in a background thread."""

    def __init__(self, engine: Engine, settings: ServerSettings, first_unit: int = 0,
                 mcp_devices: Callable[[], McpDevices] | None = None) -> None:
        self.server = RealtimeServer(engine, settings, first_unit, mcp_devices)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """``ws://host:port/v1/realtime`` (the real port once started; ``wss://`` with TLS)."""
        return self.server.url

    @property
    def http_url(self) -> str:
        """``http://host:port/v1`` (``https://`` with TLS)."""
        return self.server.http_url

    @property
    def tls(self) -> TlsCertificate | None:
        """The certificate served with (its fingerprint, the CA file); None without TLS."""
        return self.server.tls

    @property
    def port(self) -> int | None:
        """The port listened on (the real one when settings asked for 0); None before start."""
        return self.server.port

    def start(self, timeout: float = 30.0) -> None:
        """Start listening; returns once clients can connect. ParleyError if it cannot."""
        if self._thread is not None:
            raise ParleyError("this server thread was started already")
        self._thread = threading.Thread(target=self._run, name="parley-server-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop(timeout)
            raise ParleyError(f"the realtime server did not start within {timeout:.0f} s")
        if self._error is not None or self.server.port is None:
            self._thread.join(timeout)
            raise self._error or ParleyError("the realtime server stopped while starting")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._stop = asyncio.Event()
            try:
                loop.run_until_complete(self.server.start())
            except ParleyError as exc:  # handed to start() in the caller's thread
                self._error = exc
                return
            except Exception as exc:  # an unexpected failure: logged, and handed on too
                log.exception("the realtime server failed to start")
                self._error = ParleyError(f"the realtime server failed to start: "
                                          f"{type(exc).__name__}: {exc}")
                return
            finally:
                self._ready.set()
            loop.run_until_complete(self._stop.wait())
            loop.run_until_complete(self.server.stop())
        except Exception:  # logged: the thread must end, and its loop be closed
            log.exception("the realtime server failed")
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def stop(self, timeout: float = 10.0) -> bool:
        """Close every connection and unit, stop the loop, join the thread. True if it ended."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return True
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop is closed already
                pass
        thread.join(timeout)
        return not thread.is_alive()

    def pool_status(self) -> dict:
        """``GET /v1/pool``'s document, from any thread."""
        return self.server.pool.status()
