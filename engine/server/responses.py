"""The responses of one Realtime session: their ids, their turns, and their events.

A response is one assistant reply: ``response.created``; its message item (added with
the first words), the content part, transcript (or text) and audio deltas; the function
calls it made, each an item of its own with its arguments; then the closing ``.done``
events and ``response.done`` with its final status and every output item. Parley makes
one reply per user turn, so a response is bound to the engine's ``turn_id`` of the turn
it answers.

Every output item of a response that belongs to the conversation also goes to
``on_item(item, done)``, which records it and sends ``conversation.item.added`` /
``.done``; an out-of-band response (``conversation: "none"``) has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.backends.base import ToolCall
from engine.server import wire

#: on_item(response, item, done): an output item was added (done False) or finished.
ItemListener = Callable[["Response", dict, bool], None]


@dataclass
class Response:
    """One response in flight or done."""

    id: str
    item_id: str
    turn: int | None  # None until a typed message's turn id is known
    auto: bool  # created by the server for a committed audio turn
    client_event_id: str | None = None
    speak: bool = True  # audio and its transcript; False: text only
    in_conversation: bool = True  # False: out of band (conversation "none")
    metadata: dict | None = None
    transcript: list[str] = field(default_factory=list)
    audio_deltas: int = 0
    audio_bytes: int = 0  # PCM16 at 24 kHz sent so far
    claimed: bool = False  # a response.create asked for it (manual turns)
    cancel_requested: bool = False
    done: bool = False
    message_open: bool = False  # its message item was added
    output: list[dict] = field(default_factory=list)  # output items, in order

    @property
    def text(self) -> str:
        return "".join(self.transcript)

    @property
    def audio_ms(self) -> int:
        """Milliseconds of reply audio sent so far."""
        return self.audio_bytes * 1000 // (2 * wire.CLIENT_RATE)


class Responses:
    """Creates, feeds and closes responses; ``send`` takes each server event."""

    KEEP = 64  # done responses remembered, so late engine events for them are dropped

    def __init__(self, send: Callable[[dict], None], on_item: ItemListener,
                 conversation_id: str) -> None:
        self._send = send
        self._on_item = on_item
        self._conversation_id = conversation_id
        self._all: list[Response] = []

    def start(self, turn: int | None, auto: bool, client_event_id: str | None = None, *,
              speak: bool = True, in_conversation: bool = True,
              metadata: dict | None = None) -> Response:
        """A new in-progress response (``response.created`` is sent now)."""
        response = Response(wire.new_id("resp"), wire.new_id("item"), turn, auto, client_event_id,
                            speak, in_conversation, metadata)
        self._all.append(response)
        done = [r for r in self._all if r.done]
        for old in done[:max(0, len(done) - self.KEEP)]:
            self._all.remove(old)
        self._send(wire.event("response.created", response=self._object(response, "in_progress")))
        return response

    def _object(self, response: Response, status: str, **details) -> dict:
        return wire.response_object(
            response.id, list(response.output), status, speak=response.speak,
            metadata=response.metadata,
            conversation_id=self._conversation_id if response.in_conversation else None, **details)

    def for_turn(self, turn: int) -> Response | None:
        """The response answering ``turn``, done or not; None if there is none."""
        for response in reversed(self._all):
            if response.turn == turn:
                return response
        return None

    def by_item(self, item_id: str) -> Response | None:
        """The response whose message item is ``item_id``."""
        return next((r for r in reversed(self._all) if r.item_id == item_id), None)

    def active(self) -> list[Response]:
        """Responses not done yet, oldest first."""
        return [r for r in self._all if not r.done]

    def _where(self, response: Response) -> dict:
        return {"response_id": response.id, "item_id": response.item_id,
                "output_index": self._index(response, response.item_id), "content_index": 0}

    @staticmethod
    def _index(response: Response, item_id: str) -> int:
        return next((i for i, item in enumerate(response.output) if item["id"] == item_id),
                    len(response.output))

    def _open_message(self, response: Response) -> None:
        if response.message_open:
            return
        response.message_open = True
        item = wire.assistant_item(response.item_id, None, "in_progress", response.speak)
        index = len(response.output)
        response.output.append(item)
        self._send(wire.event("response.output_item.added", response_id=response.id,
                              output_index=index, item=item))
        if response.in_conversation:
            self._on_item(response, item, False)
        part = {"type": "audio", "transcript": ""} if response.speak else {"type": "text", "text": ""}
        self._send(wire.event("response.content_part.added", **self._where(response), part=part))

    def text(self, response: Response, text: str) -> None:
        """A clause of the reply: a transcript (or text) delta; clauses are joined by a space."""
        if response.done or not text:
            return
        self._open_message(response)
        delta = text if not response.transcript else " " + text
        response.transcript.append(delta)
        kind = "response.output_audio_transcript.delta" if response.speak else "response.output_text.delta"
        self._send(wire.event(kind, **self._where(response), delta=delta))

    def audio(self, response: Response, b64: str) -> None:
        """A piece of the reply's audio (base64 PCM16 at 24 kHz)."""
        if response.done or not response.speak:
            return
        self._open_message(response)
        response.audio_deltas += 1
        response.audio_bytes += len(b64) * 3 // 4 - b64[-2:].count("=")
        self._send(wire.event("response.output_audio.delta", **self._where(response), delta=b64))

    def calls(self, response: Response, calls: tuple[ToolCall, ...]) -> None:
        """The functions the reply called: an item each, its arguments, done."""
        if response.done:
            return
        for call in calls:
            item_id = wire.new_id("item")
            index = len(response.output)
            opening = wire.function_call_item(item_id, call.call_id, call.name, "", "in_progress")
            response.output.append(opening)
            self._send(wire.event("response.output_item.added", response_id=response.id,
                                  output_index=index, item=opening))
            if response.in_conversation:
                self._on_item(response, opening, False)
            where = {"response_id": response.id, "item_id": item_id, "output_index": index,
                     "call_id": call.call_id}
            self._send(wire.event("response.function_call_arguments.delta", **where,
                                  delta=call.arguments))
            self._send(wire.event("response.function_call_arguments.done", **where,
                                  name=call.name, arguments=call.arguments))
            item = wire.function_call_item(item_id, call.call_id, call.name, call.arguments,
                                           "completed")
            response.output[index] = item
            self._send(wire.event("response.output_item.done", response_id=response.id,
                                  output_index=index, item=item))
            if response.in_conversation:
                self._on_item(response, item, True)

    def finish(self, response: Response, status: str, *, reason: str | None = None,
               error: dict | None = None, parley: dict | None = None) -> None:
        """Close ``response`` with ``status`` (completed, cancelled, failed). Idempotent."""
        if response.done:
            return
        response.done = True
        if response.message_open:
            self._close_message(response, status)
        self._send(wire.event("response.done", response=self._object(
            response, status, reason=reason, error=error, parley=parley)))

    def _close_message(self, response: Response, status: str) -> None:
        transcript = response.text
        item = wire.assistant_item(response.item_id, transcript,
                                   "completed" if status == "completed" else "incomplete",
                                   response.speak)
        where = self._where(response)
        if response.speak:
            self._send(wire.event("response.output_audio.done", **where))
            self._send(wire.event("response.output_audio_transcript.done", **where,
                                  transcript=transcript))
            part = {"type": "audio", "transcript": transcript}
        else:
            self._send(wire.event("response.output_text.done", **where, text=transcript))
            part = {"type": "text", "text": transcript}
        self._send(wire.event("response.content_part.done", **where, part=part))
        response.output[where["output_index"]] = item
        self._send(wire.event("response.output_item.done", response_id=response.id,
                              output_index=where["output_index"], item=item))
        if response.in_conversation:
            self._on_item(response, item, True)
