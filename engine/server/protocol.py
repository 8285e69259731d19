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
- ``ReplyText``, reply audio, ``ToolCallsMade``, ``TurnFinished``: the response's deltas,
  its function-call items and ``done``.
- ``TurnCancelled`` (barge-in): every active response ends ``cancelled``.

A function call is sent no sooner than a moment after its turn's ``speech_stopped``
(``engine.server.pacing``: pipecat loses a tool result that comes in the same burst).

The conversation is kept as items (``engine.server.items``), each mirrored in the unit's
chat history, so ``conversation.item.retrieve``/``.delete``/``.truncate`` act on what the
LLM will read next. A ``response.create`` made while another response is in progress
waits for it (a client that answers a tool call before the reply's audio ended).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from engine.audio.base import InputMarker
from engine.config import EndOfTurn, EngineConfig
from engine.errors import ConfigError
from engine.measures import Figure, Mark
from engine.pipeline.chat_history import ChatHistory, ItemKind
from engine.pipeline.control import CancelReason
from engine.pipeline.events import (EngineError, Event, FinalTranscript, PartialTranscript, ReplyText,
                                    ToolCallsMade, TurnCancelled, TurnFinished, UserSpeaking)
from engine.pipeline.messages import PLAIN_REPLY, ReplyRequest
from engine.pipeline.metrics import Metrics
from engine.report import figure_json, turn_dict
from engine.server import wire
from engine.server.items import Conversation, HistoryKey, client_item
from engine.server.limits import TokenBucket
from engine.server.pacing import ToolCallPacing
from engine.server.response_create import ResponseSpec, response_spec
from engine.server.responses import Response, Responses
from engine.server.server_settings import ServerSettings
from engine.server.session_update import Capabilities, SessionChange, session_change
from engine.server.user_turns import UserTurns
from engine.server.validation import INVALID_VALUE, ClientError, expect

if TYPE_CHECKING:
    from engine.server.stream_audio import StreamSource

log = logging.getLogger("parley.server")

MAX_WAITING_CREATES = 4  # response.create calls waiting for the response in progress
MAX_DEPTH = 32  # JSON nesting an event may have (a tool's parameters schema included)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists and objects more than ``limit`` levels deep."""
    level = [value]
    for _ in range(limit + 1):
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x)
                 if isinstance(v, dict | list)] if level else []
        if not level:
            return False
    return True


class Unit(Protocol):
    """What a session needs of a ``PipelineUnit``."""

    config: EngineConfig
    chat_history: ChatHistory

    def apply(self, config: EngineConfig, models: dict) -> None: ...
    def say(self, text: str, request: ReplyRequest = PLAIN_REPLY) -> int: ...
    def interrupt(self) -> None: ...
    def set_reply_defaults(self, request: ReplyRequest) -> None: ...
    def truncate_reply(self, turn: int, seconds: float) -> str: ...


class RealtimeSession:
    """See the module doc. ``attach`` it to a unit before feeding it client text."""

    # Set by ``attach``, before the first client event is handled.
    _unit: Unit
    _source: StreamSource
    _base: EngineConfig

    def __init__(self, send: Callable[[dict], None], settings: ServerSettings,
                 run_blocking: Callable[..., Awaitable[Any]],
                 clock: Callable[[], float] = time.monotonic,
                 pacing: ToolCallPacing | None = None) -> None:
        self.id = wire.new_id("sess")
        self._send = send
        self._settings = settings
        self._blocking = run_blocking
        self._clock = clock
        self._bucket = TokenBucket(settings.max_events_per_s, clock=clock)
        self._dropped = 0
        self._last_rate_error = -1e9
        self.conversation = Conversation()
        self.responses = Responses(send, self._response_item, wire.new_id("conv"))
        self._voice_for: Callable[[str], str] | None = None
        self._check_language: Callable[[str | None], None] | None = None
        self._capabilities = Capabilities()
        self._defaults = PLAIN_REPLY  # the session's tools and output modalities
        self._session_notes: list[str] = []
        self._ignored: list[str] = []
        self._metrics: Metrics | None = None
        self._unit_number = -1
        self._parley: dict = {}
        self._markers: deque[tuple[InputMarker, str | None]] = deque()
        self._turns = UserTurns()  # each user turn's item and transcription state
        self._fresh_items = 0  # client items added since the last response.create
        self._waiting: deque[tuple[ResponseSpec, str | None]] = deque()
        self._tasks: set[asyncio.Task] = set()
        self._claims_ahead = 0  # response.create for a commit the VAD has not reached yet
        self._saying = 0  # say() calls whose turn id is not known yet
        self._orphans: dict[int, list[Callable[[], None]]] = {}
        self._pacing = pacing or ToolCallPacing(clock)
        self.closed = False
        #: server_vad's idle_timeout_ms: the server prompts an idle user (engine.server.app)
        self.idle_timeout_ms: int | None = None
        self._handlers = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.retrieve": self._item_retrieve,
            "conversation.item.delete": self._item_delete,
            "conversation.item.truncate": self._item_truncate,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
        }

    # ------------------------------------------------------------------ lifecycle
    def attach(self, unit: Unit, source: StreamSource, *, unit_number: int,
               voice_for: Callable[[str], str] | None = None, metrics: Metrics | None = None,
               parley: dict | None = None, capabilities: Capabilities | None = None,
               check_language: Callable[[str | None], None] | None = None) -> None:
        """Serve on ``unit`` (fed by ``source``, a StreamSource); sends ``session.created``.

        ``voice_for(name)`` is the loaded TTS's voice a client's voice name stands for
        (OpenAI's names are mapped), a ConfigError if it has none (called in the
        executor); ``metrics`` is the engine's (turn timelines); ``parley``: what the
        server tells the client about itself (notes, placements); ``capabilities``: what
        the models can do (learned end of turn, tools); ``check_language(code)``: a
        ConfigError where the loaded STT cannot transcribe a client's transcription
        language (called in the executor).
        """
        self._unit, self._source, self._voice_for = unit, source, voice_for
        self._check_language = check_language
        self._unit_number, self._metrics = unit_number, metrics
        self._capabilities = capabilities or Capabilities()
        self._base = unit.config
        self._parley = dict(parley or {})
        self._send(wire.event("session.created", session=self._session_object()))

    def close(self) -> None:
        """The client left: drop whatever the engine still sends."""
        self.closed = True
        self._pacing.drop()

    def _session_object(self) -> dict:
        config = self._unit.config
        parley = {**self._parley, "unit": self._unit_number,
                  "live_transcription": config.turns.live_transcription,
                  "tool_support": self._capabilities.tool_support,
                  "session_notes": list(self._session_notes), "ignored": list(self._ignored)}
        session = wire.session_object(self.id, config, parley, speak=self._defaults.speak,
                                      tools=self._defaults.tools,
                                      tool_choice=self._defaults.tool_choice)
        detection = session["audio"]["input"]["turn_detection"]
        if detection is not None and detection.get("type") == "server_vad":
            detection["idle_timeout_ms"] = self.idle_timeout_ms
        return session

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
            message = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            self.error("invalid_json", "the message is not valid JSON (NaN and Infinity are "
                       "not JSON numbers)")
            return
        if not isinstance(message, dict):
            self.error("invalid_json", "a client event must be a JSON object")
            return
        if _deeper_than(message, MAX_DEPTH):
            self.error("invalid_json", f"the event nests deeper than {MAX_DEPTH} levels")
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
        change = session_change(message.get("session"), self._base, self._capabilities)
        config = change.apply_to(self._unit.config)
        await self._blocking(self._apply, config, change)
        for problem in change.errors:  # each refused field alone; the rest is applied
            self.error(problem.code, problem.message, problem.param, event_id)
        defaults = self._defaults
        if change.speak is not None:
            defaults = replace(defaults, speak=change.speak)
        if change.tools is not None:
            defaults = replace(defaults, tools=change.tools)
        if change.tool_choice is not None:
            defaults = replace(defaults, tool_choice=change.tool_choice)
        self._defaults = defaults
        self._unit.set_reply_defaults(defaults)
        self._session_notes = change.notes
        self._ignored = change.ignored
        if change.idle_timeout is not None:
            self.idle_timeout_ms = change.idle_timeout.ms
        self._send(wire.event("session.updated", session=self._session_object()))

    def _apply(self, config: EngineConfig, change: SessionChange) -> None:
        """In an executor: the voice is mapped and checked by the TTS model, then applied."""
        if change.voice is not None and self._voice_for is not None:
            try:
                voice = self._voice_for(change.voice)
                config = config.with_overrides({"tts.voice": voice})
                if voice != change.voice:
                    change.notes.append(f"voice {change.voice!r} -> {voice}")
            except ConfigError as exc:
                change.errors.append(ClientError(INVALID_VALUE, str(exc), "session.audio.output.voice"))
        param = change.params.get("stt.language")
        if param is not None and self._check_language is not None:
            try:
                self._check_language(config.stt.language)
            except ConfigError as exc:  # a language the STT lacks: refused, the old one kept
                change.errors.append(ClientError(INVALID_VALUE, str(exc), param))
                config = replace(config, stt=replace(config.stt, language=self._unit.config.stt.language))
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

    # ------------------------------------------------------------------ items
    async def _item_create(self, message: dict, event_id: str | None) -> None:
        after = message.get("previous_item_id")
        if after is not None:
            expect(after, "string", "previous_item_id")
        if after is not None and after != "root" and after not in self.conversation:
            self.conversation.get(after, "previous_item_id")  # raises item_not_found
        wired, item = client_item(message.get("item"))
        if wired["id"] in self.conversation:
            raise ClientError("item_already_exists", f"an item with id {wired['id']!r} is in the "
                              "conversation already", "item.id")
        history_after = after if after is not None and after in self.conversation and \
            self.conversation.key(after).item_id is not None else None
        self._unit.chat_history.add(item, after=history_after)
        previous = self.conversation.add(wired, HistoryKey(item_id=wired["id"]),
                                         after=after if after != "root" else None)
        self._fresh_items += 1
        self._send(wire.event("conversation.item.added", previous_item_id=previous, item=wired))
        self._send(wire.event("conversation.item.done", previous_item_id=previous, item=wired))

    async def _item_retrieve(self, message: dict, event_id: str | None) -> None:
        item = self.conversation.get(message.get("item_id"))
        self._send(wire.event("conversation.item.retrieved", item=item))

    async def _item_delete(self, message: dict, event_id: str | None) -> None:
        item = self.conversation.get(message.get("item_id"))
        key = self.conversation.key(item["id"])
        self._unit.chat_history.delete(**key.lookup())
        self.conversation.remove(item["id"])
        self._send(wire.event("conversation.item.deleted", item_id=item["id"]))

    async def _item_truncate(self, message: dict, event_id: str | None) -> None:
        item = self.conversation.get(message.get("item_id"))
        content_index = message.get("content_index", 0)
        expect(content_index, "integer", "content_index")
        end_ms = expect(message.get("audio_end_ms"), "integer", "audio_end_ms")
        if end_ms < 0:
            raise ClientError(INVALID_VALUE, f"'audio_end_ms' must be 0 or more; got {end_ms}",
                              "audio_end_ms")
        key = self.conversation.key(item["id"])
        if item.get("role") != "assistant" or key.turn_id is None:
            raise ClientError(INVALID_VALUE, "only the audio of an assistant message Parley "
                              "spoke can be truncated", "item_id")
        response = self.responses.by_item(item["id"])
        heard_ms = None if response is None else response.audio_ms
        if heard_ms is not None and end_ms > heard_ms:
            log.info("session %s: truncate at %d ms of %d ms of audio: taken as the end",
                     self.id, end_ms, heard_ms)
            end_ms = heard_ms
        heard = await self._blocking(self._unit.truncate_reply, key.turn_id, end_ms / 1000)
        self.conversation.update(wire.assistant_item(item["id"], heard, "incomplete"))
        self._send(wire.event("conversation.item.truncated", item_id=item["id"],
                              content_index=content_index, audio_end_ms=end_ms))

    def _response_item(self, response: Response, item: dict, done: bool) -> None:
        """An output item of a response in the conversation: recorded, then announced."""
        if done:
            self.conversation.update(item)
            self._send(wire.event("conversation.item.done", item=item))
            return
        kind = ItemKind.ASSISTANT if item["type"] == "message" else ItemKind.FUNCTION_CALL
        key = HistoryKey(turn_id=response.turn, kind=kind, call_id=item.get("call_id"))
        previous = self.conversation.add(item, key)
        self._send(wire.event("conversation.item.added", previous_item_id=previous, item=item))

    # ------------------------------------------------------------------ responses
    async def _response_create(self, message: dict, event_id: str | None) -> None:
        spec = response_spec(message.get("response"), self._defaults, self.conversation,
                             self._capabilities.tool_support)
        fresh, self._fresh_items = self._fresh_items, 0
        active = self.responses.active()
        # Manual commits: Parley answers the committed turn by itself, so the client's
        # response.create for it is that response. With turn detection on, a create while
        # a reply runs is a new response (a tool's result, sent before its call's response
        # ended): it waits below.
        if self._manual and not fresh and not spec.has_input and spec.request.record:
            unclaimed = [r for r in active if r.auto and not r.claimed]
            if unclaimed:  # a committed audio turn is answered already: this is its response
                unclaimed[0].claimed = True
                unclaimed[0].metadata = spec.metadata or unclaimed[0].metadata
                return
            if any(marker is InputMarker.COMMIT for marker, _ in self._markers):
                self._claims_ahead += 1  # its commit is still on its way through the VAD
                return
        if active:  # the client answers before the reply in progress ended: it waits
            if len(self._waiting) >= MAX_WAITING_CREATES:
                raise ClientError("conversation_already_has_active_response",
                                  f"response {active[0].id} is in progress and "
                                  f"{len(self._waiting)} more wait; cancel it first")
            self._waiting.append((spec, event_id))
            return
        await self._start_response(spec, event_id)

    async def _start_response(self, spec: ResponseSpec, event_id: str | None) -> None:
        request = spec.request
        response = self.responses.start(None, False, event_id, speak=request.speak,
                                        in_conversation=request.record, metadata=spec.metadata)
        self._saying += 1
        try:
            turn = await self._blocking(self._unit.say, "", request)
        except BaseException:
            self.responses.finish(response, "failed", error={"type": wire.SERVER_ERROR,
                                                             "code": "server_error",
                                                             "message": "the reply was not started"})
            raise
        finally:
            self._saying -= 1
        response.turn = turn
        for replay in self._orphans.pop(turn, []):
            replay()
        if not self._saying:
            self._orphans.clear()

    async def _next_waiting(self) -> None:
        """A response ended: start the next one a client asked for meanwhile."""
        if self.closed or self.responses.active() or not self._waiting:
            return
        spec, event_id = self._waiting.popleft()
        try:
            await self._start_response(spec, event_id)
        except Exception:  # logged; the client got a failed response.done
            log.exception("session %s: a waiting response.create failed", self.id)

    async def _response_cancel(self, message: dict, event_id: str | None) -> None:
        active = self.responses.active()
        self._waiting.clear()
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
            if not self._turns.speaking:
                if self._claims_ahead:
                    self._claims_ahead -= 1
                self.error("input_audio_buffer_commit_empty", "no speech was heard since the "
                           "last commit: nothing to commit", None, event_id)
            return  # the VAD now ends the turn: UserSpeaking(ended) follows
        current = self._turns.current
        if current is not None and current.speaking:
            current.clearing = True
        self._send(wire.event("input_audio_buffer.cleared"))

    def on_audio(self, turn: int, b64: str) -> None:
        """Reply audio of ``turn`` (base64 PCM16 at 24 kHz)."""
        if self._pacing.holds(is_call=False):
            self._pacing.hold(lambda: self.on_audio(turn, b64))
            return
        self._for_turn(turn, lambda r: self.responses.audio(r, b64))

    def on_event(self, event: Event) -> None:
        """An engine event of this session's unit."""
        if self.closed:
            return
        if self._pacing.holds(is_call=isinstance(event, ToolCallsMade)):
            self._pacing.hold(lambda: self._on_event_now(event))
            return
        self._on_event_now(event)

    def _on_event_now(self, event: Event) -> None:
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
        elif isinstance(event, ToolCallsMade):
            self._for_turn(event.turn_id, lambda r: self.responses.calls(r, event.calls))
        elif isinstance(event, TurnFinished):
            record = event.record
            self._for_turn(record.turn_id, lambda r: self.responses.finish(
                r, "completed", parley=_turn_info(record)))
        elif isinstance(event, TurnCancelled):
            self._cancelled(event)
        elif isinstance(event, EngineError):
            self._engine_error(event)
        self._kick_waiting()

    def _engine_error(self, event: EngineError) -> None:
        """A stage failed: the responses in flight fail with the cause. With none in
        flight an ``error`` event says it (a client that takes every error as fatal then
        has nothing else to go by)."""
        message = f"{event.stage}: {event.message}"
        active = self.responses.active()
        if not active:
            self.error("engine_error", message, kind=wire.SERVER_ERROR)
        for response in active:
            self.responses.finish(response, "failed", error={
                "type": wire.SERVER_ERROR, "code": "engine_error", "message": message})

    def _kick_waiting(self) -> None:
        if self._waiting and not self.responses.active() and not self.closed:
            task = asyncio.get_running_loop().create_task(self._next_waiting())
            self._tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)

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
        resumed = self._turns.get(turn)
        if resumed is not None:  # speech resumed inside the grace: the same turn and item go on
            resumed.speaking = True
            self._turns.current = resumed
            return
        user = self._turns.start(turn)
        if not self._manual:
            self._send(wire.event("input_audio_buffer.speech_started", item_id=user.item_id,
                                  audio_start_ms=self._audio_ms(turn, Mark.SPEECH_START)))

    def _speech_ended(self, turn: int) -> None:
        if self._turns.current is not None:  # the VAD is in no turn now
            self._turns.current.speaking = False
        user = self._turns.get(turn)
        if user is not None and user.clearing:
            self._turns.drop(turn)
            return
        if user is None:
            user = self._turns.start(turn, speaking=False)
        item_id = user.item_id
        if not self._manual:
            self._send(wire.event("input_audio_buffer.speech_stopped", item_id=item_id,
                                  audio_end_ms=self._audio_ms(turn, Mark.SPEECH_END)))
            self._pacing.speech_stopped()
        item = wire.user_item(item_id, [{"type": "input_audio", "transcript": None}], "in_progress")
        previous = self.conversation.add(item, HistoryKey(turn_id=turn, kind=ItemKind.USER))
        self._send(wire.event("input_audio_buffer.committed", item_id=item_id,
                              previous_item_id=previous))
        self._send(wire.event("conversation.item.added", previous_item_id=previous, item=item))
        response = self.responses.start(turn, True)
        if self._claims_ahead:
            self._claims_ahead -= 1
            response.claimed = True

    def _partial(self, event: PartialTranscript) -> None:
        user = self._turns.get(event.turn_id)
        if user is None:
            return
        sent, stable = user.transcript_sent, event.stable
        # Deltas only ever append: send the newly confirmed words, never a guess.
        if not stable.startswith(sent) or len(stable) <= len(sent):
            return
        user.transcript_sent = stable
        self._send(wire.event("conversation.item.input_audio_transcription.delta",
                              item_id=user.item_id, content_index=0, delta=stable[len(sent):]))

    def _final(self, event: FinalTranscript) -> None:
        user = self._turns.get(event.turn_id)
        if user is None:
            return
        user.transcript_sent = ""
        item_id = user.item_id
        record = self._metrics.turn(self._unit_number, event.turn_id) if self._metrics else None
        marks = record.marks if record else {}
        seconds = (marks[Mark.SPEECH_END] - marks[Mark.SPEECH_START]
                   if Mark.SPEECH_END in marks and Mark.SPEECH_START in marks else 0.0)
        self._send(wire.event("conversation.item.input_audio_transcription.completed",
                              item_id=item_id, content_index=0, transcript=event.text,
                              usage={"type": "duration", "seconds": round(max(0.0, seconds), 3)},
                              **transcript_language(event)))
        item = wire.user_item(item_id, [{"type": "input_audio", "transcript": event.text}])
        self.conversation.update(item)
        self._send(wire.event("conversation.item.done", item=item))

    def _cancelled(self, event: TurnCancelled) -> None:
        if event.reason == CancelReason.CLEARED:
            user = self._turns.drop(event.turn_id)
            if user is not None and user.item_id in self.conversation:
                self.conversation.remove(user.item_id)
            return
        if event.reason != CancelReason.BARGE_IN:
            return  # a reopened turn goes on as the same item; its response is not made yet
        for response in self.responses.active():  # barge-in cancels every reply in flight
            reason = "client_cancelled" if response.cancel_requested else "turn_detected"
            self.responses.finish(response, "cancelled", reason=reason)


def transcript_language(event: FinalTranscript) -> dict:
    """Parley's fields of a transcription event beyond OpenAI's: the language the words
    were heard in (``input_audio_transcription.language``, or detected with none set) and,
    where Whisper detected it, its probability; nothing where the STT does not say."""
    if event.language is None:
        return {}
    fields: dict = {"language": event.language}
    if event.language_probability is not None:
        fields["language_probability"] = round(event.language_probability, 4)
    return fields


def _turn_info(record) -> dict:
    """What Parley measured of a turn, for ``response.done``'s ``parley`` field."""
    info = turn_dict(record)
    info["llm_history_turns"] = figure_json(Figure.LLM_HISTORY_TURNS,
                                            record.value(Figure.LLM_HISTORY_TURNS))
    return info
