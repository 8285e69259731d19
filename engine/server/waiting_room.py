"""The waiting room: clients that connect while every pipeline unit is busy wait in line.

``WaitingRoom`` is the line (first come, first served, ``capacity`` places, each wait
bounded by ``timeout_s``); ``HeldEvents`` keeps what a waiting client sends until its
session exists. No I/O and no event loop here: ``engine.server.admission`` holds the
WebSocket and asks these what to do, and tests drive them with a fake clock.

Why a line rather than a refusal: a full server answers 503 with ``Retry-After``, but
none of the Realtime clients checked (the ``openai`` client, openai-agents, pipecat,
livekit's OpenAI plugin) honours it; each fails or gives up. Each of them does tolerate
an accepted WebSocket on which ``session.created`` comes late: they send their
``session.update`` at once and wait for events with no deadline. So a waiting client is
admitted (the upgrade succeeds), hears nothing until a unit frees, and then gets
``session.created`` and its own held events applied, as if it had just connected.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

#: Client events that carry or act on input audio: dropped while waiting, since no
#: pipeline listens yet and speech from minutes ago must not be answered.
AUDIO_EVENTS = frozenset({"input_audio_buffer.append", "input_audio_buffer.commit",
                          "input_audio_buffer.clear"})
MAX_HELD_EVENTS = 256  # other client events a waiting client may send before its session


@dataclass(eq=False)
class Ticket:
    """One waiting client's place in line (compared by identity)."""

    number: int  # the order of arrival, for the log
    client: str
    joined_at: float  # the room's clock when it joined


@dataclass(frozen=True)
class QueueTimeout:
    """What a client whose wait ran out is told: the ``error`` event's code and message."""

    code: str
    message: str


class WaitingRoom:
    """A first-come-first-served line of at most ``capacity`` clients, each waiting at
    most ``timeout_s``.

    Only the first in line may take a unit that frees (``first``), so nobody is
    overtaken; a client that leaves, or whose time runs out, leaves the line. Thread-safe
    (``status`` is read off the event loop by ``GET /v1/pool``).
    """

    def __init__(self, capacity: int, timeout_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 0:
            raise ValueError(f"a waiting room holds 0 or more clients; got {capacity}")
        if not timeout_s > 0:
            raise ValueError(f"the queue timeout must be positive; got {timeout_s}")
        self.capacity = capacity
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._line: deque[Ticket] = deque()
        self._numbers = itertools.count(1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._line)

    def join(self, client: str) -> Ticket | None:
        """A place at the end of the line for ``client``; None when the line is full."""
        with self._lock:
            if len(self._line) >= self.capacity:
                return None
            ticket = Ticket(next(self._numbers), client, self._clock())
            self._line.append(ticket)
            return ticket

    def leave(self, ticket: Ticket) -> None:
        """``ticket`` is out of the line (served, gone or timed out); idempotent."""
        with self._lock:
            if ticket in self._line:
                self._line.remove(ticket)

    def first(self) -> Ticket | None:
        """Who takes the next unit that frees; None when nobody waits."""
        with self._lock:
            return self._line[0] if self._line else None

    def position(self, ticket: Ticket) -> int | None:
        """``ticket``'s place in line, 1 for the first; None when it is not in line."""
        with self._lock:
            for place, waiting in enumerate(self._line, start=1):
                if waiting is ticket:
                    return place
        return None

    def waited(self, ticket: Ticket) -> float:
        """Seconds ``ticket`` has waited."""
        return max(0.0, self._clock() - ticket.joined_at)

    def time_left(self, ticket: Ticket) -> float:
        """Seconds until ``ticket``'s wait runs out (0 or less: it has)."""
        return self.timeout_s - self.waited(ticket)

    def timed_out(self, ticket: Ticket, units: int) -> QueueTimeout:
        """What to tell ``ticket``'s client once its time ran out (``units``: the pool's size)."""
        return QueueTimeout("queue_timeout", f"waited {self.timeout_s:g} s for a free pipeline "
                            f"(all {units} in use); try again later (the server's --queue-timeout)")

    def status(self) -> dict:
        """The line as ``GET /v1/pool`` shows it: its size, limits and each client's wait."""
        now = self._clock()
        with self._lock:
            line = list(self._line)
        return {"capacity": self.capacity, "timeout_s": self.timeout_s, "length": len(line),
                "waiting": [{"position": place, "client": t.client,
                             "waited_s": round(max(0.0, now - t.joined_at), 3)}
                            for place, t in enumerate(line, start=1)]}


@dataclass
class HeldEvents:
    """A waiting client's messages, kept in order until its session exists.

    Audio events (``AUDIO_EVENTS``) are counted and dropped. Everything else is kept as
    it came (the session checks it when it replays it) up to ``max_events`` messages and
    ``max_bytes`` in all; ``hold`` says False past either, and the client is then
    disconnected, since a session event cannot be dropped without the client noticing.
    """

    max_bytes: int
    max_events: int = MAX_HELD_EVENTS
    messages: list[str | bytes] = field(default_factory=list)
    dropped_audio: int = 0
    _bytes: int = 0

    def hold(self, data: str | bytes) -> bool:
        """Keep (or drop, for audio) one client message; False when over the limits."""
        if isinstance(data, str) and _event_type(data) in AUDIO_EVENTS:
            self.dropped_audio += 1
            return True
        size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        if len(self.messages) >= self.max_events or self._bytes + size > self.max_bytes:
            return False
        self.messages.append(data)
        self._bytes += size
        return True

    def too_many(self) -> str:
        """The message of the ``error`` event sent when ``hold`` said False."""
        return (f"more than {self.max_events} events or {self.max_bytes} bytes sent while "
                "waiting for a free pipeline: wait for session.created before sending more")


def _event_type(text: str) -> str | None:
    """The ``type`` of a client event, or None when the text is not a JSON object with one
    (the session answers such a message with its own error once it replays it)."""
    if '"input_audio_buffer.' not in text:  # most events: no need to parse
        return None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    kind = message.get("type") if isinstance(message, dict) else None
    return kind if isinstance(kind, str) else None
