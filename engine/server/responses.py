"""The responses of one Realtime session: their ids, their turns, and their events.

A response is one assistant reply: ``response.created``, its output item and audio
content part, transcript and audio deltas, then the closing ``.done`` events and
``response.done`` with its final status. Parley makes one reply per user turn, so a
response is bound to the engine's ``turn_id`` of the turn it answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.server import wire


@dataclass
class Response:
    """One response in flight or done."""

    id: str
    item_id: str
    turn: int | None  # None until a typed message's turn id is known
    auto: bool  # created by the server for a committed audio turn
    client_event_id: str | None = None
    transcript: list[str] = field(default_factory=list)
    audio_deltas: int = 0
    claimed: bool = False  # a response.create asked for it (manual turns)
    cancel_requested: bool = False
    done: bool = False


class Responses:
    """Creates, feeds and closes responses; ``send`` takes each server event."""

    KEEP = 64  # done responses remembered, so late engine events for them are dropped

    def __init__(self, send: Callable[[dict], None]) -> None:
        self._send = send
        self._all: list[Response] = []

    def start(self, turn: int | None, auto: bool, client_event_id: str | None = None) -> Response:
        """A new in-progress response (its opening events are sent now)."""
        response = Response(wire.new_id("resp"), wire.new_id("item"), turn, auto, client_event_id)
        self._all.append(response)
        done = [r for r in self._all if r.done]
        for old in done[:max(0, len(done) - self.KEEP)]:
            self._all.remove(old)
        rid, iid = response.id, response.item_id
        self._send(wire.event("response.created",
                              response=wire.response_object(rid, None, "in_progress")))
        self._send(wire.event("response.output_item.added", response_id=rid, output_index=0,
                              item=wire.assistant_item(iid, None, "in_progress")))
        self._send(wire.event("response.content_part.added", response_id=rid, item_id=iid,
                              output_index=0, content_index=0,
                              part={"type": "audio", "transcript": ""}))
        return response

    def for_turn(self, turn: int) -> Response | None:
        """The response answering ``turn``, done or not; None if there is none."""
        for response in reversed(self._all):
            if response.turn == turn:
                return response
        return None

    def active(self) -> list[Response]:
        """Responses not done yet, oldest first."""
        return [r for r in self._all if not r.done]

    def text(self, response: Response, text: str) -> None:
        """A clause of the reply: a transcript delta (clauses are joined by a space)."""
        if response.done or not text:
            return
        delta = text if not response.transcript else " " + text
        response.transcript.append(delta)
        self._send(wire.event("response.output_audio_transcript.delta", response_id=response.id,
                              item_id=response.item_id, output_index=0, content_index=0,
                              delta=delta))

    def audio(self, response: Response, b64: str) -> None:
        """A piece of the reply's audio (base64 PCM16 at 24 kHz)."""
        if response.done:
            return
        response.audio_deltas += 1
        self._send(wire.event("response.output_audio.delta", response_id=response.id,
                              item_id=response.item_id, output_index=0, content_index=0,
                              delta=b64))

    def finish(self, response: Response, status: str, *, reason: str | None = None,
               error: dict | None = None, parley: dict | None = None) -> None:
        """Close ``response`` with ``status`` (completed, cancelled, failed). Idempotent."""
        if response.done:
            return
        response.done = True
        rid, iid = response.id, response.item_id
        transcript = "".join(response.transcript)
        item_status = "completed" if status == "completed" else "incomplete"
        item = wire.assistant_item(iid, transcript, item_status)
        where = {"response_id": rid, "item_id": iid, "output_index": 0, "content_index": 0}
        self._send(wire.event("response.output_audio.done", **where))
        self._send(wire.event("response.output_audio_transcript.done", **where, transcript=transcript))
        self._send(wire.event("response.content_part.done", **where,
                              part={"type": "audio", "transcript": transcript}))
        self._send(wire.event("response.output_item.done", response_id=rid, output_index=0,
                              item=item))
        self._send(wire.event("response.done", response=wire.response_object(
            rid, item, status, reason=reason, error=error, parley=parley)))
