"""A transparent WebSocket relay on loopback that keeps every message both ways: a test
points a third-party client at it (its own code unchanged) and reads afterwards what the
client sent and what the server answered.

``WsTap(upstream)`` listens on 127.0.0.1 (a port the OS picks) on its own thread and event
loop (aiohttp). Each connection to ``ws://127.0.0.1:PORT/<path>?<query>`` opens
``<upstream>/<path>?<query>`` with the client's ``Authorization`` header and relays text
and binary messages as they are, and the close code, in both directions. Text messages
that are JSON are recorded as ``Frame``s, in the order the relay saw them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from tests.support.loopback import LoopbackServer


@dataclass(frozen=True)
class Frame:
    """One JSON message through the relay: ``sender`` is ``client`` or ``server``."""

    at: float  # time.monotonic() when the relay received it
    sender: str
    event: dict

    @property
    def type(self) -> str:
        """The event's ``type`` ('' if it has none)."""
        return str(self.event.get("type", ""))


class WsTap(LoopbackServer):
    """The relay to ``upstream`` (``ws://127.0.0.1:P``). ``frames`` grows as messages pass."""

    name = "WebSocket relay"

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.frames: list[Frame] = []
        self.connections = 0
        self.start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def sent(self, sender: str, kind: str | None = None) -> list[dict]:
        """The events ``sender`` sent (of type ``kind`` if given), in order."""
        return [f.event for f in list(self.frames) if f.sender == sender and (kind is None or f.type == kind)]

    def kinds(self, sender: str) -> list[str]:
        """The types of the events ``sender`` sent, in order."""
        return [f.type for f in list(self.frames) if f.sender == sender]

    def errors(self) -> list[dict]:
        """The server's ``error`` events."""
        return self.sent("server", "error")

    # ------------------------------------------------------------------ the relay
    def routes(self, app) -> None:
        app.router.add_get("/{tail:.*}", self._relay)

    async def opened(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession()

    async def closing(self) -> None:
        await self._session.close()

    def _record(self, sender: str, data: str) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self.frames.append(Frame(time.monotonic(), sender, event))

    async def _relay(self, request):
        import aiohttp
        from aiohttp import web

        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        try:
            upstream = await self._session.ws_connect(self.upstream + request.path_qs, headers=headers,
                                                      max_msg_size=0, autoping=True)
        except aiohttp.WSServerHandshakeError as exc:
            return web.Response(status=exc.status, text=str(exc.message))
        client = web.WebSocketResponse(max_msg_size=0)
        await client.prepare(request)
        self.connections += 1

        async def pump(source, sink, sender: str) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._record(sender, message.data)
                    await sink.send_str(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break
            code = source.close_code or aiohttp.WSCloseCode.OK
            if not sink.closed:
                await sink.close(code=code)

        tasks = [asyncio.create_task(pump(client, upstream, "client")),
                 asyncio.create_task(pump(upstream, client, "server"))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not upstream.closed:
                await upstream.close()
            if not client.closed:
                await client.close()
        return client
