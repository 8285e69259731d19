"""The benchmark's Realtime client: one WebSocket per client, over aiohttp.

``RealtimeClient`` connects to ``/v1/realtime``, streams an ``Utterance`` at real time
and hands every event to a ``TurnTracker`` (``engine.bench.clients``, which touches no
network); ``concurrent_turns`` runs several at once from the same instant. aiohttp is
what the server itself needs (``parley[server]``), so the benchmark adds no dependency.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.bench.clients import (CHUNK_S, CLIENT_RATE, REFUSED_CODE, TRY_AGAIN_LATER, BenchRunError,
                                  SessionRefused, TurnResult, TurnTracker, Utterance, deadlines,
                                  retry_after, speech_end_time, turn_result)

if TYPE_CHECKING:
    import aiohttp  # imported where a client connects: the bench runs without the server extra

#: Sent once after ``session.created`` (the client waits for ``session.updated``): audio
#: in and out as PCM16 at 24 kHz. Turn detection is left as the server has it (its own
#: server VAD, with the settings ``serve`` was started with).
SESSION_UPDATE = {
    "type": "session.update",
    "session": {
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": CLIENT_RATE}},
                  "output": {"format": {"type": "audio/pcm", "rate": CLIENT_RATE}}},
    },
}


class RealtimeClient:
    """One WebSocket connection to ``/v1/realtime``; ``async with`` it.

    ``clock`` is ``time.perf_counter`` (the tests may pass another); every received event
    goes to ``tracker`` with its arrival time.
    """

    def __init__(self, url: str, client: int = 0, connect_timeout: float = 30.0,
                 session_update: dict | None = SESSION_UPDATE,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.url = url
        self.client = client
        self.connect_timeout = connect_timeout
        self.session_update = session_update
        self.clock = clock
        self.tracker = TurnTracker()
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._closed: str | None = None
        self.close_code: int | None = None  # the server's, once it closed the socket
        self.stream_origin: float | None = None  # when the first stream of the session began

    async def __aenter__(self) -> RealtimeClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _fail(self, what: str) -> BenchRunError:
        return BenchRunError(f"client {self.client}: {what}")

    async def connect(self) -> None:
        """Open the socket, wait for ``session.created``, update the session.

        A full server is a ``SessionRefused`` (a BenchRunError): see that class."""
        await self._open()
        self._reader = asyncio.create_task(self._read())
        try:
            await self.wait_until(lambda: self.tracker.session_created, self.connect_timeout,
                                  "session.created")
        except BenchRunError as exc:
            if REFUSED_CODE in self.tracker.error_codes or self.close_code == TRY_AGAIN_LATER:
                await self.close()
                raise SessionRefused(str(exc), REFUSED_CODE) from None
            raise
        if self.session_update is not None:
            await self.send(self.session_update)
            await self.wait_until(lambda: self.tracker.session_updated, self.connect_timeout,
                                  "session.updated")

    async def _open(self) -> None:
        """The WebSocket connection itself; an HTTP 503 is a ``SessionRefused``."""
        import aiohttp

        self._session = aiohttp.ClientSession()
        try:
            # aiohttp declares ClientWSTimeout's fields with attr.ib(type=...), which
            # pyright does not read as parameters.
            timeout = aiohttp.ClientWSTimeout(ws_close=5.0)  # pyright: ignore[reportCallIssue]
            self._ws = await self._session.ws_connect(self.url, timeout=timeout, max_msg_size=0,
                                                      autoping=True)
        except aiohttp.WSServerHandshakeError as exc:
            await self.close()
            if exc.status == 503:
                wait = retry_after((exc.headers or {}).get("Retry-After"))
                raise SessionRefused(f"client {self.client}: the server answered 503 (full)",
                                     "http_503", wait) from None
            raise self._fail(f"cannot connect to {self.url}: HTTP {exc.status} {exc.message}") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            await self.close()
            raise self._fail(f"cannot connect to {self.url}: {exc}") from None

    async def _read(self) -> None:
        import aiohttp

        ws = self._socket()
        try:
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    try:
                        event = json.loads(msg.data)
                    except ValueError:
                        self.tracker.errors.append(f"a message that is not JSON: {msg.data[:80]!r}")
                    else:
                        if isinstance(event, dict):
                            self.tracker.feed(self.clock(), event)
                elif msg.type is aiohttp.WSMsgType.ERROR:
                    self._closed = f"the connection failed: {ws.exception()}"
                    break
                self._changed.set()
        finally:
            self.close_code = ws.close_code
            if self._closed is None:
                self._closed = f"the server closed the connection (code {ws.close_code})"
            self._changed.set()

    async def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Until ``done()``; a server error, a closed socket or the timeout raise."""
        deadline = self.clock() + timeout
        while True:
            if self.tracker.errors:
                raise self._fail(f"server error: {self.tracker.errors[0]}")
            if done():
                return
            if self._closed is not None:
                raise self._fail(f"{self._closed} while waiting for {what}")
            left = deadline - self.clock()
            if left <= 0:
                raise self._fail(f"timed out after {timeout:.0f} s waiting for {what}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    async def send(self, event: dict) -> None:
        if self._closed is not None:
            raise self._fail(self._closed)
        try:
            await self._socket().send_str(json.dumps(event))
        except (ConnectionError, RuntimeError) as exc:
            raise self._fail(f"cannot send {event.get('type')}: {exc}") from None

    async def stream(self, utterance: Utterance, start: float,
                     chunk_s: float = CHUNK_S) -> tuple[list[float], int]:
        """Send ``utterance`` paced by ``deadlines`` from ``start`` (a ``clock`` time).

        Returns (when each chunk was sent, how many went out more than one chunk late).
        """
        if self.stream_origin is None:
            self.stream_origin = start
        chunks = utterance.chunks(chunk_s)
        sent, late = [], 0
        for chunk, due in zip(chunks, deadlines(start, chunks, utterance.rate)):
            wait = due - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            elif -wait > chunk_s:
                late += 1
            if self.tracker.errors:
                raise self._fail(f"server error: {self.tracker.errors[0]}")
            await self.send({"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(chunk).decode("ascii")})
            sent.append(self.clock())
        return sent, late

    async def turn(self, utterance: Utterance, start: float, timeout: float,
                   chunk_s: float = CHUNK_S) -> TurnResult:
        """Stream the utterance from ``start``, wait (``timeout`` s after the stream's end)
        for the reply to be done, and measure it. A later turn of the session is measured
        from its own start (``stream_origin``)."""
        sent, late = await self.stream(utterance, start, chunk_s)
        offset = start - (self.stream_origin if self.stream_origin is not None else start)

        def done() -> bool:
            end_t = speech_end_time(self.tracker, utterance, sent, chunk_s, offset)[0]
            return self.tracker.complete(end_t)

        await self.wait_until(done, timeout, f"the reply to {Path(utterance.name).name}")
        return turn_result(self.client, self.tracker, utterance, sent, late, chunk_s, offset)

    def _socket(self) -> aiohttp.ClientWebSocketResponse:
        if self._ws is None:
            raise self._fail("not connected (connect first)")
        return self._ws

    async def close(self) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        if self._session is not None:
            await self._session.close()
        self._ws = self._session = self._reader = None


async def concurrent_turns(url: str, utterance: Utterance, clients: int, timeout: float,
                           connect_timeout: float = 30.0, chunk_s: float = CHUNK_S,
                           session_update: dict | None = SESSION_UPDATE,
                           before_close: Callable[[], object] | None = None,
                           client_type: type[RealtimeClient] | None = None) -> list[TurnResult]:
    """``clients`` connections at once, each streaming ``utterance`` from the same instant.

    All connect first; the streams start together 0.2 s after the last one is ready.
    ``before_close()`` (if given) runs after every reply is done and before any socket
    closes, while every unit is still held (``bench serve`` samples memory there). Any
    client's failure fails the lot (the others are closed). ``client_type`` is the client
    class (default ``RealtimeClient``; ``engine.bench.openai_client`` has the openai one).
    """
    make = client_type or RealtimeClient
    conns = [make(url, i, connect_timeout, session_update) for i in range(clients)]
    try:
        await asyncio.gather(*(c.connect() for c in conns))
        start = time.perf_counter() + 0.2
        results = await asyncio.gather(*(c.turn(utterance, start, timeout, chunk_s) for c in conns))
        if before_close is not None:
            before_close()
        return list(results)
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


async def get_json(url: str, timeout: float = 10.0) -> dict:
    """GET ``url`` and parse its JSON body (``/v1/pool``)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as reply:
                reply.raise_for_status()
                return await reply.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        raise BenchRunError(f"GET {url} failed: {exc}") from None
