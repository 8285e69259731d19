"""Admission: a unit for each new WebSocket connection, or a place in the waiting room.

A connection takes a free unit at once when nobody waits. Otherwise, with ``--queue N``,
it is admitted (the upgrade succeeds) and waits in ``engine.server.waiting_room``'s line:
nothing is sent to it; its client events are held (audio is dropped: nobody listens
yet); its pings are answered, since its socket is read all along. When a unit frees,
the first in line takes it and the server goes on as for a client that just connected
(``session.created``, then the held events). A client that leaves while waiting leaves
the line; one whose wait runs out gets an ``error`` event (``queue_timeout``) and the
close code 1013 (try again later).

A client that asks for it (``?parley_queue_events=1`` on the URL: Parley's web page) is
told its place in line, ``parley.queue.waiting``, when it joins and whenever it moves up.
No other client gets it: openai-agents reports an event type it does not know as an
error.

Everything here runs on the server's event loop; ``claim`` runs in the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from engine.audio.base import AudioSink, AudioSource
from engine.server import wire
from engine.server.pool import Lease, UnitPool
from engine.server.waiting_room import HeldEvents, Ticket, WaitingRoom

log = logging.getLogger("parley.server")

#: The URL's query parameter (``=1``) by which a client asks to be told its place in line.
QUEUE_EVENTS_PARAM = "parley_queue_events"
#: Messages that end a WebSocket's reading: the client left (or the server closes it).
_GONE = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


@dataclass(frozen=True)
class TurnedAway:
    """A waiting client the server gives up on; its ``error`` event was sent already."""

    code: WSCloseCode
    reason: str


class Admission:
    """Lends ``pool``'s units to connections in their order of arrival, keeping those
    that find every unit busy in ``room`` (see the module doc)."""

    def __init__(self, pool: UnitPool, room: WaitingRoom,
                 run_blocking: Callable[..., Awaitable[Any]]) -> None:
        self.pool = pool
        self.room = room
        self._blocking = run_blocking
        self._nudges: dict[Ticket, asyncio.Event] = {}  # set: try to take a unit now

    async def claim_now(self, client: str, source: AudioSource, sink: AudioSink) -> Lease | None:
        """A unit for a new connection, or None when every unit is busy or others wait
        (they go first). Raises what starting the unit raised."""
        if len(self.room):
            return None
        return await self._blocking(self.pool.claim, client, source, sink)

    def join(self, client: str) -> Ticket | None:
        """A place in line for ``client``; None when the line is full (or has no places)."""
        ticket = self.room.join(client)
        if ticket is not None:
            self._nudges[ticket] = asyncio.Event()
            log.info("%s waits for a pipeline (place %d in line)", client, self.room.position(ticket))
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """``ticket`` is out of the line (served, gone, turned away): those behind it move
        up, and the next first in line tries for a unit. Idempotent."""
        self.room.leave(ticket)
        if self._nudges.pop(ticket, None) is not None:
            for nudge in self._nudges.values():
                nudge.set()

    def unit_freed(self) -> None:
        """A unit went back to the pool: the first in line tries to take it."""
        first = self.room.first()
        if first is not None and first in self._nudges:
            self._nudges[first].set()

    async def wait(self, ws: web.WebSocketResponse, ticket: Ticket, held: HeldEvents,
                   send: Callable[[dict], None], source: AudioSource, sink: AudioSink, *,
                   announce: bool = False) -> Lease | TurnedAway | None:
        """Hold the upgraded ``ws`` until ``ticket`` gets a unit: the lease, a TurnedAway
        (time ran out, the client sent too much, the unit failed to start; ``send`` has
        sent the error event), or None when the client left. ``ticket`` leaves the line
        either way. ``announce``: tell the client its place as it changes."""
        nudge = self._nudges[ticket]
        nudge.set()  # a unit may have freed between the failed claim and the join
        receiving: asyncio.Task | None = None
        told = None  # the place the client was last told
        try:
            while True:
                if nudge.is_set():
                    nudge.clear()
                    if self.room.first() is ticket:
                        try:
                            lease = await self._blocking(self.pool.claim, ticket.client, source, sink)
                        except Exception:  # this client only: logged with its traceback
                            log.exception("starting a unit for %s (waited %.1f s) failed",
                                          ticket.client, self.room.waited(ticket))
                            send(wire.error_event("pipeline_start_failed", "the server could not "
                                                  "start a pipeline for this session; its log says "
                                                  "why", kind=wire.SERVER_ERROR))
                            return TurnedAway(WSCloseCode.INTERNAL_ERROR, "pipeline start failed")
                        if lease is not None:
                            log.info("%s waited %.1f s for unit %d", ticket.client,
                                     self.room.waited(ticket), lease.unit)
                            return lease
                place = self.room.position(ticket)
                if announce and place is not None and place != told:
                    told = place
                    send(wire.event("parley.queue.waiting", position=place, length=len(self.room),
                                    waited_s=round(self.room.waited(ticket), 3),
                                    timeout_s=self.room.timeout_s))
                left = self.room.time_left(ticket)
                if left <= 0:
                    timeout = self.room.timed_out(ticket, self.pool.size)
                    log.info("%s left the line: %s", ticket.client, timeout.message)
                    send(wire.error_event(timeout.code, timeout.message))
                    return TurnedAway(WSCloseCode.TRY_AGAIN_LATER, "queue timeout")
                if receiving is None:
                    receiving = asyncio.ensure_future(ws.receive())
                woken = asyncio.ensure_future(nudge.wait())
                try:
                    await asyncio.wait((receiving, woken), timeout=left,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                if receiving.done():
                    message, receiving = receiving.result(), None
                    if message.type in _GONE:
                        log.info("%s left the line after %.1f s", ticket.client, self.room.waited(ticket))
                        return None
                    if message.type in (WSMsgType.TEXT, WSMsgType.BINARY) and not held.hold(message.data):
                        send(wire.error_event("too_many_waiting_events", held.too_many()))
                        return TurnedAway(WSCloseCode.POLICY_VIOLATION, "too many events while waiting")
        finally:
            if receiving is not None:
                await _stop_receiving(receiving, held)
            self.leave(ticket)


async def _stop_receiving(receiving: asyncio.Task, held: HeldEvents) -> None:
    """End a pending ``receive``. Cancelling it loses no message (aiohttp's queue pops a
    message only once it is delivered); one delivered already is held for the session."""
    if not receiving.done():
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        return
    if receiving.cancelled() or receiving.exception() is not None:
        return
    message = receiving.result()
    if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
        held.hold(message.data)
