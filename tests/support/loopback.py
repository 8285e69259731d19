"""An aiohttp application on 127.0.0.1 (a free port) in its own thread and event loop:
the skeleton of the tests' own servers (the fault proxy, the chat server, the WebSocket tap).

A subclass adds its routes in ``routes``, may open and close what it needs on the
server's loop in ``opened``/``closing``, and calls ``start`` at the end of its
``__init__``; ``close`` stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import threading


class LoopbackServer:
    """See the module doc. ``port`` is set once it listens."""

    #: The thread's name, and the server's in failure messages.
    name = "loopback server"

    def __init__(self) -> None:
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def routes(self, app) -> None:
        """Add the routes to ``app`` (an ``aiohttp.web.Application``)."""
        raise NotImplementedError

    def app_options(self) -> dict:
        """Keyword arguments of the ``web.Application``."""
        return {}

    async def opened(self) -> None:
        """On the server's loop, before it listens (e.g. a client session)."""

    async def closing(self) -> None:
        """On the server's loop, after it stopped listening."""

    def start(self, timeout: float = 20.0) -> None:
        """Start the thread; returns once the server listens."""
        self._thread.start()
        if not self._ready.wait(timeout) or self.port is None:
            raise AssertionError(f"the {self.name} did not start: {self._start_error!r}")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported by start()'s wait
            self._start_error = exc
            self._ready.set()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        from aiohttp import web

        self._stop = asyncio.Event()
        await self.opened()
        app = web.Application(**self.app_options())
        self.routes(app)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
            await self.closing()

    def close(self) -> None:
        """Stop the server and join its thread. Idempotent."""
        if self._loop is not None and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop already ended
                pass
        if self._thread.is_alive():
            self._thread.join(15)
        assert not self._thread.is_alive(), f"the {self.name} did not stop"
