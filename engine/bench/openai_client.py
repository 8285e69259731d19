"""The official ``openai`` library as a ``bench serve`` client (``--client-library openai``).

``RealtimeClient`` speaks the protocol over aiohttp, which is what the server needs anyway;
this one drives the same server through ``AsyncOpenAI(...).realtime.connect()``, unmodified,
as an application built on OpenAI's SDK would: its URL, headers, event encoding and
connection handling. What it measures is the same: every event it receives goes, as the
library parsed it (``to_dict()``: the fields the server sent), to the same ``TurnTracker``
with its arrival time, and the recording is streamed on the same deadlines.

``openai`` is imported only when a client connects (``pip install openai``; it is in the
``remote`` and ``test`` extras).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from engine.bench.clients import BenchRunError, SessionRefused, retry_after
from engine.bench.realtime_client import RealtimeClient
from engine.errors import MissingDependencyError

if TYPE_CHECKING:
    from openai.resources.realtime.realtime import AsyncRealtimeConnection

#: The model name sent: Parley serves whatever it loaded, under any name.
MODEL = "parley"
#: The key sent where a server takes none (the library insists on one).
NO_KEY = "unused"


def require_openai_client() -> None:
    """MissingDependencyError with the pip command unless ``openai`` is installed."""
    import importlib.util

    if importlib.util.find_spec("openai") is None:
        raise MissingDependencyError("--client-library openai", "openai", "remote")


def split_url(url: str) -> tuple[str, str]:
    """``(base_url, websocket_base_url)`` for the library from a ``.../v1/realtime`` URL."""
    root = url.rstrip("/")
    if not root.endswith("/realtime") or not root.startswith(("ws://", "wss://")):
        raise BenchRunError(f"the openai client needs a ws(s)://HOST:PORT/v1/realtime URL, got {url!r}")
    ws_base = root[: -len("/realtime")]
    http_base = "http" + ws_base[2:]  # ws:// -> http://, wss:// -> https://
    return http_base, ws_base


class OpenAIRealtimeClient(RealtimeClient):
    """``RealtimeClient`` with the connection made and read by the ``openai`` library."""

    api_key: str = NO_KEY
    _conn: AsyncRealtimeConnection | None = None

    async def _open(self) -> None:
        """Connect through the library; an HTTP 503 is a ``SessionRefused``, as with the
        aiohttp client."""
        require_openai_client()
        from openai import AsyncOpenAI
        from websockets.exceptions import InvalidStatus

        http_base, ws_base = split_url(self.url)
        client = AsyncOpenAI(api_key=self.api_key, base_url=http_base, websocket_base_url=ws_base)
        # No proxy: websockets 15 would take one from the environment even for loopback.
        options = {"proxy": None}
        manager = client.realtime.connect(
            model=MODEL, websocket_connection_options=options)  # pyright: ignore[reportArgumentType]
        try:
            self._conn = await asyncio.wait_for(manager.enter(), self.connect_timeout)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 503:
                wait = retry_after(exc.response.headers.get("Retry-After"))
                raise SessionRefused(f"client {self.client}: the server answered 503 (full)",
                                     "http_503", wait) from None
            raise self._fail(f"cannot connect to {self.url}: HTTP {status}") from None
        except (TimeoutError, OSError) as exc:
            raise self._fail(f"cannot connect to {self.url}: {exc or type(exc).__name__}") from None

    async def _read(self) -> None:
        from openai import OpenAIError
        from websockets.exceptions import ConnectionClosed

        conn = self._connection()
        try:
            async for event in conn:
                # warnings=False: a union the library picked loosely (construct, not validate)
                # still dumps what was sent; its serializer warnings are only noise.
                self.tracker.feed(self.clock(), event.to_dict(warnings=False))
                self._changed.set()
            self.close_code = 1000
        except ConnectionClosed as exc:
            self.close_code = exc.rcvd.code if exc.rcvd is not None else None
        except (OpenAIError, ValueError) as exc:  # the library's own, a bad message: say which
            self._closed = f"the connection failed: {type(exc).__name__}: {exc}"
        finally:
            if self._closed is None:
                self._closed = f"the server closed the connection (code {self.close_code})"
            self._changed.set()

    async def send(self, event: dict) -> None:
        if self._closed is not None:
            raise self._fail(self._closed)
        from openai import OpenAIError
        from websockets.exceptions import ConnectionClosed

        try:
            await self._connection().send(event)  # pyright: ignore[reportArgumentType]
        except (ConnectionClosed, OpenAIError, OSError) as exc:
            raise self._fail(f"cannot send {event.get('type')}: {exc}") from None

    def _connection(self) -> AsyncRealtimeConnection:
        if self._conn is None:
            raise self._fail("not connected (connect first)")
        return self._conn

    async def close(self) -> None:
        from websockets.exceptions import ConnectionClosed

        if self._conn is not None:
            try:
                await self._conn.close()
            except (ConnectionClosed, OSError):  # already closed by the server: nothing to release
                pass
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        self._conn = self._reader = None
