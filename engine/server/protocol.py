"""RealtimeSession: one client's Realtime conversation over one pipeline unit.

Client events (JSON text) are checked and turned into actions on the unit and its
``StreamSource``; the unit's engine events become server events. No HTTP here: the
transport hands in text (``handle_text``) and takes events out (``send``), so the
protocol can be tested with fakes.

Everything runs on the event loop thread. Calls that may block (``say``, ``apply``,
``interrupt``, a voice check on the TTS model) go through ``run_blocking`` (an executor).
Engine events, reply audio and the source's markers come from stage threads; the
transport hops them onto the loop (``call_soon_threadsafe``) before calling
``on_event`` / ``on_audio`` / ``on_marker``. A turn's events arrive in the order the
stages emitted them, so the session can follow a turn without locks:

- ``UserSpeaking(started)``: ``input_audio_buffer.speech_started`` and a user item id.
- ``UserSpeaking(ended)`` at the turn's commit: ``speech_stopped``, ``committed``, the
  user item, and a new response (Parley answers every committed turn).
- Partial and final transcripts: the input transcription's deltas and ``completed``.
- ``ReplyText``, reply audio, ``TurnFinished``: the response's deltas and ``done``.
- ``TurnCancelled`` (barge-in): every active response ends ``cancelled``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from engine.audio.base import InputMarker
from engine.config import EndOfTurn, EngineConfig
from engine.errors import ConfigError
from engine.pipeline.control import CancelReason
from engine.pipeline.events import (EngineError, Event, FinalTranscript, PartialTranscript, ReplyText,
                                    TurnCancelled, TurnFinished, UserSpeaking)
from engine.pipeline.metrics import Figure, Mark, Metrics
from engine.report import figure_json, turn_dict
from engine.server import wire
from engine.server.limits import TokenBucket
from engine.server.responses import Response, Responses
from engine.server.server_settings import ServerSettings
from engine.server.validation import INVALID_VALUE, ClientError, expect, session_change, user_text

if TYPE_CHECKING:
    from engine.server.stream_audio import StreamSource

log = logging.getLogger("parley.server")

MAX_PENDING_ITEMS = 64  # typed messages waiting for response.create


class Unit(Protocol):
    """What a session needs of a ``PipelineUnit``."""

    config: EngineConfig

    def apply(self, config: EngineConfig, models: dict) -> None: ...
    def say(self, text: str) -> int: ...
    def interrupt(self) -> None: ...


class RealtimeSession:
    """See the module doc. ``attach`` it to a unit before feeding it client text."""

    # Set by ``attach``, before the first client event is handled.
    _unit: Unit
    _source: StreamSource
    _base: EngineConfig

    def __init__(self, send: Callable[[dict], None], settings: ServerSettings,
                 run_blocking: Callable[..., Awaitable[Any]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.id = wire.new_id("sess")
        self._send = send
        self._settings = settings
        self._blocking = run_blocking
        self._clock = clock
        self._bucket = TokenBucket(settings.max_events_per_s, clock=clock)
        self._dropped = 0
        self._last_rate_error = -1e9
        self.responses = Responses(send)
        self._check_voice: Callable[[str], None] | None = None
        self._metrics: Metrics | None = None
        self._unit_number = -1
        self._parley: dict = {}
        self._markers: deque[tuple[InputMarker, str | None]] = deque()
        self._speaking: int | None = None  # the turn the VAD is in (speech not yet committed)
        self._clearing: int | None = None  # a turn a client clear is throwing away
        self._items: dict[int, str] = {}  # turn -> user item id
        self._partial_sent: dict[int, str] = {}  # turn -> transcript deltas sent so far
        self._last_item: str | None = None
        self._pending_items: list[tuple[str, str]] = []  # typed (item id, text) not answered
        self._claims_ahead = 0  # response.create for a commit the VAD has not reached yet
        self._saying = 0  # say() calls whose turn id is not known yet
        self._orphans: dict[int, list[Callable[[], None]]] = {}
        self.closed = False
        self._handlers = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
        }

    # ------------------------------------------------------------------ lifecycle
    def attach(self, unit: Unit, source: StreamSource, *, unit_number: int,
               check_voice: Callable[[str], None] | None = None, metrics: Metrics | None = None,
               parley: dict | None = None) -> None:
        """Serve on ``unit`` (fed by ``source``, a StreamSource); sends ``session.created``.

        ``check_voice(voice)`` raises ConfigError for a voice the TTS model lacks (it is
        called in the executor); ``metrics`` is the engine's (turn timelines);
        ``parley``: what the server tells the client about itself (notes, placements).
        """
        self._unit, self._source, self._check_voice = unit, source, check_voice
        self._unit_number, self._metrics = unit_number, metrics
        self._base = unit.config
        self._parley = dict(parley or {})
        self._send(wire.event("session.created", session=self._session_object()))

    def close(self) -> None:
        """The client left: drop whatever the engine still sends."""
        self.closed = True

    def _session_object(self) -> dict:
        config = self._unit.config
        parley = {**self._parley, "unit": self._unit_number,
                  "live_transcription": config.turns.live_transcription}
        return wire.session_object(self.id, config, parley)

    def error(self, code: str, message: str, param: str | None = None,
              client_event_id: str | None = None, kind: str = wire.INVALID_REQUEST) -> None:
        """Send an ``error`` event."""
        self._send(wire.error_event(code, message, param=param, client_event_id=client_event_id,
                                    kind=kind))

    # ------------------------------------------------------------------ client events
    async def handle_text(self, data: str) -> None:
        """One client message: limits, parsing, dispatch. Never raises for bad input."""
        if not self._bucket.take():
            self._rate_limited()
            return
        size = len(data.encode("utf-8", "surrogatepass"))
        if size > self._settings.max_message_bytes:
            self.error("message_too_large", f"the message has {size} bytes; the limit is "
                       f"{self._settings.max_message_bytes} (send audio in smaller appends)")
            return
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            self.error("invalid_json", "the message is not valid JSON")
            return
        if not isinstance(message, dict):
            self.error("invalid_json", "a client event must be a JSON object")
            return
        event_id = message.get("event_id")
        if event_id is not None and not isinstance(event_id, str):
            self.error(INVALID_VALUE, "'event_id' must be a string", "event_id")
            event_id = None
        kind = message.get("type")
        if not isinstance(kind, str):
            self.error(INVALID_VALUE, "'type' must be a string naming the event", "type", event_id)
            return
        handler = self._handlers.get(kind)
        if handler is None:
            shown = kind if len(kind) <= 64 else kind[:64] + "..."
            self.error("unknown_event_type", f"unknown event type {shown!r}; Parley handles "
                       f"{', '.join(self._handlers)}", "type", event_id)
            return
        try:
            await handler(message, event_id)
        except ClientError as exc:
            self.error(exc.code, exc.message, exc.param, event_id)
        except Exception:  # one bad event must not end the session, nor reach others (logged)
            log.exception("session %s: handling %s failed", self.id, kind)
            self.error("server_error", f"the server failed on this {kind} event; the session "
                       "goes on", None, event_id, kind=wire.SERVER_ERROR)

    def _rate_limited(self) -> None:
        self._dropped += 1
        now = self._clock()
        if now - self._last_rate_error >= 1.0:  # one error a second, however fast the flood
            self._last_rate_error = now
            self.error("rate_limit_exceeded", f"more than {self._settings.max_events_per_s:g} "
                       f"events per second: {self._dropped} event(s) dropped")
            self._dropped = 0

    async def _session_update(self, message: dict, event_id: str | None) -> None:
        change = session_change(message.get("session"), self._base)
        config = change.apply_to(self._unit.config)
        await self._blocking(self._apply, config, change.voice)
        self._send(wire.event("session.updated", session=self._session_object()))

    def _apply(self, config: EngineConfig, voice: str | None) -> None:
        """In an executor: the voice is checked by the TTS model itself, then applied."""
        if voice is not None and self._check_voice is not None:
            try:
                self._check_voice(voice)
            except ConfigError as exc:
                raise ClientError(INVALID_VALUE, str(exc), "session.audio.output.voice") from None
        self._unit.apply(config, {})

    async def _append(self, message: dict, event_id: str | None) -> None:
        audio = expect(message.get("audio"), "string", "audio")
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise ClientError("invalid_audio", "'audio' is not valid base64", "audio") from None
        if len(pcm) % 2:
            raise ClientError("invalid_audio", f"'audio' holds {len(pcm)} bytes: PCM16 audio has "
                              "an even number of bytes", "audio")
        if not self._source.push_pcm16(pcm):
            raise ClientError("input_audio_buffer_overflow",
                              f"more than {self._settings.max_buffer_s:g} s of audio wait for the "
                              "pipeline: this audio was dropped", "audio")

    async def _commit(self, message: dict, event_id: str | None) -> None:
        self._markers.append((InputMarker.COMMIT, event_id))
        self._source.commit()

    async def _clear(self, message: dict, event_id: str | None) -> None:
        self._markers.append((InputMarker.CLEAR, event_id))
        self._source.clear()

    async def _item_create(self, message: dict, event_id: str | None) -> None:
        item = expect(message.get("item"), "object", "item")
        text = user_text(item)
        if len(self._pending_items) >= MAX_PENDING_ITEMS:
            raise ClientError("too_many_items", f"{MAX_PENDING_ITEMS} messages already wait for "
                              "response.create")
        item_id = item.get("id") if isinstance(item.get("id"), str) and item["id"] else wire.new_id("item")
        self._pending_items.append((item_id, text))
        done = wire.user_item(item_id, [{"type": "input_text", "text": text}])
        self._send(wire.event("conversation.item.added", previous_item_id=self._last_item, item=done))
        self._send(wire.event("conversation.item.done", previous_item_id=self._last_item, item=done))
        self._last_item = item_id

    async def _response_create(self, message: dict, event_id: str | None) -> None:
        active = self.responses.active()
        if not self._pending_items:
            unclaimed = [r for r in active if r.auto and not r.claimed]
            if unclaimed:  # a committed audio turn is answered already: this is its response
                unclaimed[0].claimed = True
                return
            if any(marker is InputMarker.COMMIT for marker, _ in self._markers):
                self._claims_ahead += 1  # its commit is still on its way through the VAD
                return
            raise ClientError("no_input", "Parley answers the user: add a message "
                              "(conversation.item.create) or commit audio first")
        if active:
            raise ClientError("conversation_already_has_active_response",
                              f"response {active[0].id} is in progress; cancel it first")
        text = "\n".join(t for _i, t in self._pending_items)
        self._pending_items.clear()
        response = self.responses.start(None, False, event_id)
        self._saying += 1
        try:
            turn = await self._blocking(self._unit.say, text)
        except BaseException:
            self.responses.finish(response, "failed", error={"type": wire.SERVER_ERROR,
                                                             "code": "server_error",
                                                             "message": "the message was not taken"})
            raise
        finally:
            self._saying -= 1
        response.turn = turn
        for replay in self._orphans.pop(turn, []):
            replay()
        if not self._saying:
            self._orphans.clear()

    async def _response_cancel(self, message: dict, event_id: str | None) -> None:
        active = self.responses.active()
        if not active:
            raise ClientError("response_cancel_not_active", "no response is in progress")
        for response in active:
            response.cancel_requested = True
        await self._blocking(self._unit.interrupt)
        for response in active:
            self.responses.finish(response, "cancelled", reason="client_cancelled")

    # ------------------------------------------------------------------ engine side
    def on_marker(self, marker: InputMarker) -> None:
        """The VAD reached a commit or clear, after all the audio sent before it."""
        if self.closed or not self._markers:
            return
        kind, event_id = self._markers.popleft()
        if kind is InputMarker.COMMIT:
            if self._speaking is None:
                if self._claims_ahead:
                    self._claims_ahead -= 1
                self.error("input_audio_buffer_commit_empty", "no speech was heard since the "
                           "last commit: nothing to commit", None, event_id)
            return  # the VAD now ends the turn: UserSpeaking(ended) follows
        if self._speaking is not None:
            self._clearing = self._speaking
        self._send(wire.event("input_audio_buffer.cleared"))

    def on_audio(self, turn: int, b64: str) -> None:
        """Reply audio of ``turn`` (base64 PCM16 at 24 kHz)."""
        self._for_turn(turn, lambda r: self.responses.audio(r, b64))

    def on_event(self, event: Event) -> None:
        """An engine event of this session's unit."""
        if self.closed:
            return
        if isinstance(event, UserSpeaking):
            (self._speech_started if event.started else self._speech_ended)(event.turn_id)
        elif isinstance(event, PartialTranscript):
            self._partial(event)
        elif isinstance(event, FinalTranscript):
            self._final(event)
        elif isinstance(event, ReplyText):
            self._for_turn(event.turn_id, lambda r: self.responses.text(r, event.text))
        elif isinstance(event, TurnFinished):
            record = event.record
            self._for_turn(record.turn_id, lambda r: self.responses.finish(
                r, "completed", parley=_turn_info(record)))
        elif isinstance(event, TurnCancelled):
            self._cancelled(event)
        elif isinstance(event, EngineError):
            self.error("engine_error", f"{event.stage}: {event.message}", kind=wire.SERVER_ERROR)
            for response in self.responses.active():
                self.responses.finish(response, "failed", error={
                    "type": wire.SERVER_ERROR, "code": "engine_error",
                    "message": f"{event.stage}: {event.message}"})

    def _for_turn(self, turn: int, action: Callable[[Response], None]) -> None:
        if self.closed:
            return
        response = self.responses.for_turn(turn)
        if response is not None:
            action(response)
        elif self._saying:  # a typed message's turn id is on its way back from say()
            held = self._orphans.setdefault(turn, [])
            if len(held) < 4096:
                held.append(lambda: self._for_turn(turn, action))

    @property
    def _manual(self) -> bool:
        return self._unit.config.turns.end_of_turn is EndOfTurn.MANUAL

    def _audio_ms(self, turn: int, mark: Mark) -> int:
        """Milliseconds of session audio before ``mark`` of ``turn`` (real-time streaming)."""
        record = self._metrics.turn(self._unit_number, turn) if self._metrics else None
        t_first = self._source.t_first
        if t_first is None:
            return 0
        # The VAD may mark the end of speech just after it said so: then it is about now.
        t = record.marks[mark] if record is not None and mark in record.marks else time.perf_counter()
        return max(0, round((t - t_first) * 1000))

    def _speech_started(self, turn: int) -> None:
        resumed = turn in self._items
        self._speaking = turn
        if resumed:
            return  # speech resumed inside the grace: the same turn and item go on
        self._items[turn] = wire.new_id("item")
        if len(self._items) > 64:
            for old in sorted(self._items)[:-32]:
                del self._items[old]
        if not self._manual:
            self._send(wire.event("input_audio_buffer.speech_started", item_id=self._items[turn],
                                  audio_start_ms=self._audio_ms(turn, Mark.SPEECH_START)))

    def _speech_ended(self, turn: int) -> None:
        self._speaking = None
        if self._clearing == turn:
            self._clearing = None
            self._items.pop(turn, None)
            return
        item_id = self._items.setdefault(turn, wire.new_id("item"))
        if not self._manual:
            self._send(wire.event("input_audio_buffer.speech_stopped", item_id=item_id,
                                  audio_end_ms=self._audio_ms(turn, Mark.SPEECH_END)))
        self._send(wire.event("input_audio_buffer.committed", item_id=item_id,
                              previous_item_id=self._last_item))
        item = wire.user_item(item_id, [{"type": "input_audio", "transcript": None}])
        self._send(wire.event("conversation.item.added", previous_item_id=self._last_item, item=item))
        self._last_item = item_id
        response = self.responses.start(turn, True)
        if self._claims_ahead:
            self._claims_ahead -= 1
            response.claimed = True

    def _partial(self, event: PartialTranscript) -> None:
        item_id = self._items.get(event.turn_id)
        if event.turn_id not in self._partial_sent and len(self._partial_sent) >= 16:
            self._partial_sent.clear()  # turns that never got a final transcript
        sent = self._partial_sent.get(event.turn_id, "")
        stable = event.stable
        # Deltas only ever append: send the newly confirmed words, never a guess.
        if item_id is None or not stable.startswith(sent) or len(stable) <= len(sent):
            return
        self._partial_sent[event.turn_id] = stable
        self._send(wire.event("conversation.item.input_audio_transcription.delta", item_id=item_id,
                              content_index=0, delta=stable[len(sent):]))

    def _final(self, event: FinalTranscript) -> None:
        item_id = self._items.get(event.turn_id)
        self._partial_sent.pop(event.turn_id, None)
        if item_id is None:
            return
        record = self._metrics.turn(self._unit_number, event.turn_id) if self._metrics else None
        marks = record.marks if record else {}
        seconds = (marks[Mark.SPEECH_END] - marks[Mark.SPEECH_START]
                   if Mark.SPEECH_END in marks and Mark.SPEECH_START in marks else 0.0)
        self._send(wire.event("conversation.item.input_audio_transcription.completed",
                              item_id=item_id, content_index=0, transcript=event.text,
                              usage={"type": "duration", "seconds": round(max(0.0, seconds), 3)}))

    def _cancelled(self, event: TurnCancelled) -> None:
        if event.reason == CancelReason.CLEARED:
            self._items.pop(event.turn_id, None)
            self._partial_sent.pop(event.turn_id, None)
            return
        if event.reason != CancelReason.BARGE_IN:
            return  # a reopened turn goes on as the same item; its response is not made yet
        for response in self.responses.active():  # barge-in cancels every reply in flight
            reason = "client_cancelled" if response.cancel_requested else "turn_detected"
            self.responses.finish(response, "cancelled", reason=reason)


def _turn_info(record) -> dict:
    """What Parley measured of a turn, for ``response.done``'s ``parley`` field."""
    info = turn_dict(record)
    info["llm_history_turns"] = figure_json(Figure.LLM_HISTORY_TURNS,
                                            record.value(Figure.LLM_HISTORY_TURNS))
    return info
