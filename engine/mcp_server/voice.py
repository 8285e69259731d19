"""The one pipeline unit behind Parley's MCP tools: speak a text, hear the next turn.

``Voice`` starts a unit on a loaded ``Engine`` whose spoken turns get no reply
(``ReplyRequest(answer=False)``): the LLM stays silent, and a turn's words come back to
the tool that listens. ``speak`` voices a text without the LLM (``PipelineUnit.speak``)
and returns once it was played. One tool call runs at a time; the next waits for it.
A call ends early when its caller sets its ``stop`` event (the client cancelled it) or
the voice closes: speech in progress is cut off, and the call raises ``Stopped``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.audio.base import AudioSink, AudioSource
from engine.engine import Engine
from engine.errors import ConfigError, ParleyError
from engine.measures import Figure, Mark
from engine.pipeline.events import (EngineError, Event, FinalTranscript, TurnCancelled,
                                    TurnFinished)
from engine.pipeline.messages import ReplyRequest
from engine.units.unit import PipelineUnit

#: The unit's number among the engine's units (``parley-cli mcp`` runs only this one).
UNIT = 0
#: The longest a text may take to be spoken and played.
SPEAK_TIMEOUT_S = 600.0
#: The bounds of ``listen``'s ``timeout_s``.
LISTEN_MIN_S, LISTEN_MAX_S = 1.0, 600.0
#: The longest text ``speak`` takes, in characters.
MAX_TEXT_CHARS = 4000


class Stopped(ParleyError):
    """A call ended before its result: cancelled by its caller, or the server closing."""


@dataclass(frozen=True)
class Spoken:
    """What ``speak`` did: ``played`` False when the user spoke over it (``interrupted``)
    or a stage failed (``error``); ``duration_s`` is the audio made for it."""

    played: bool
    duration_s: float
    interrupted: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Heard:
    """What ``listen`` heard: the transcript of the user's next turn, or ``timed_out``
    when nobody spoke within the time allowed. ``speech_s``: how long they spoke."""

    transcript: str
    timed_out: bool
    waited_s: float
    speech_s: float | None = None


class Voice:
    """Speaks and listens on one unit of ``engine`` (loaded, not started) with ``source``
    as the microphone and ``sink`` as the speaker. ``on_listen`` is called each time a
    tool starts listening (a recording standing in for the microphone plays then).
    ``on_unit`` makes one on a unit that someone else started and stops (a server's pool)."""

    def __init__(self, engine: Engine, source: AudioSource, sink: AudioSink, *,
                 on_listen: Callable[[], None] | None = None) -> None:
        self._attach(engine, engine.start_unit(source, sink, UNIT), UNIT, on_listen)
        self._owns_unit = True

    @classmethod
    def on_unit(cls, engine: Engine, unit: PipelineUnit, number: int, *,
                on_listen: Callable[[], None] | None = None) -> Voice:
        """A voice on ``unit`` (started, numbered ``number`` in ``engine``), which its
        owner stops: ``close`` ends the call in progress but leaves the unit running."""
        voice = cls.__new__(cls)
        voice._attach(engine, unit, number, on_listen)
        voice._owns_unit = False
        return voice

    def _attach(self, engine: Engine, unit: PipelineUnit, number: int,
                on_listen: Callable[[], None] | None) -> None:
        self.engine = engine
        self._sink: AudioSink = unit.sink
        self._on_listen = on_listen
        self._busy = threading.Lock()
        self._closing = threading.Event()
        self._unit = unit
        self._number = number
        self._unit.set_reply_defaults(ReplyRequest(answer=False))

    def speak(self, text: str, stop: threading.Event | None = None) -> Spoken:
        """Say ``text`` on the speaker; returns once it was heard (or cut off)."""
        text = _words(text, "text")
        with self._busy, self._events(stop) as events:
            return self._speak(text, events)

    def listen(self, timeout_s: float, stop: threading.Event | None = None) -> Heard:
        """Wait up to ``timeout_s`` for the user's next spoken turn; its transcript."""
        timeout_s = _timeout(timeout_s)
        with self._busy, self._events(stop) as events:
            return self._listen(timeout_s, events)

    def ask(self, text: str, timeout_s: float,
            stop: threading.Event | None = None) -> tuple[Spoken, Heard]:
        """Say ``text``, then wait up to ``timeout_s`` for the answer. An answer that
        starts while the question plays cuts it off, and is the answer."""
        text, timeout_s = _words(text, "text"), _timeout(timeout_s)
        with self._busy, self._events(stop) as events:
            spoken = self._speak(text, events)
            if spoken.error is not None:
                return spoken, Heard("", timed_out=False, waited_s=0.0)
            return spoken, self._listen(timeout_s, events)

    def close(self) -> list[str]:
        """End the call in progress, stop the unit unless it was lent (``on_unit``; the
        sink writes its file); the names of threads that did not end."""
        self._closing.set()
        with self._busy:  # the call in progress sees the closing within a quarter second
            return self.engine.stop_unit(self._unit) if self._owns_unit else []

    def _events(self, stop: threading.Event | None) -> _Events:
        if self._closing.is_set():
            raise Stopped("Parley's MCP server is closing")
        return _Events(self.engine, self._number,
                       (self._closing, *(() if stop is None else (stop,))))

    def _speak(self, text: str, events: _Events) -> Spoken:
        turn = self._unit.speak(text, ends_turn=True)
        deadline = time.monotonic() + SPEAK_TIMEOUT_S
        while (event := events.next(deadline)) is not None:
            if isinstance(event, EngineError) and event.turn_id == turn:
                return Spoken(False, 0.0, error=f"{event.stage}: {event.message}")
            if isinstance(event, TurnCancelled) and event.turn_id == turn:
                return Spoken(False, _audio_s(self.engine, self._number, turn), interrupted=True)
            if isinstance(event, TurnFinished) and event.record.turn_id == turn:
                # Queued on the speaker: heard once it played out (or a barge-in cut it).
                while not self._sink.wait_idle(0.1) and time.monotonic() < deadline:
                    if events.stopped:
                        self._unit.interrupt()  # nobody waits for it any more: stop talking
                        raise Stopped("the call was cancelled while the text played")
                record = self.engine.metrics.turn(self._number, turn) or event.record
                return Spoken(not record.cancelled, _audio_s(self.engine, self._number, turn),
                              interrupted=record.cancelled)
        if events.stopped:
            self._unit.interrupt()  # nobody waits for it any more: stop talking
            raise Stopped("the call was cancelled before the text was spoken")
        raise ParleyError(f"the text was not spoken within {SPEAK_TIMEOUT_S:.0f} s")

    def _listen(self, timeout_s: float, events: _Events) -> Heard:
        if self._on_listen is not None:
            self._on_listen()
        started = time.monotonic()
        deadline = started + timeout_s
        while (event := events.next(deadline)) is not None:
            if isinstance(event, FinalTranscript) and event.text.strip():
                record = self.engine.metrics.turn(self._number, event.turn_id)
                speech_s = None
                if record is not None and Mark.SPEECH_START in record.marks \
                        and Mark.SPEECH_END in record.marks:
                    speech_s = round(record.marks[Mark.SPEECH_END] - record.marks[Mark.SPEECH_START], 2)
                return Heard(event.text.strip(), timed_out=False,
                             waited_s=round(time.monotonic() - started, 2), speech_s=speech_s)
        if events.stopped:
            raise Stopped("the call was cancelled while it listened")
        return Heard("", timed_out=True, waited_s=round(time.monotonic() - started, 2))


class _Events:
    """The engine's events of unit ``number``, queued from subscription to exit, until
    one of the ``stops`` is set."""

    def __init__(self, engine: Engine, number: int, stops: tuple[threading.Event, ...]) -> None:
        self._engine = engine
        self._number = number
        self._stops = stops
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._unsubscribe: Callable[[], None] | None = None

    def __enter__(self) -> _Events:
        self._unsubscribe = self._engine.subscribe(self._queue.put)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()

    @property
    def stopped(self) -> bool:
        """True once a stop event was set."""
        return any(stop.is_set() for stop in self._stops)

    def next(self, deadline: float) -> Event | None:
        """The unit's next event; None once ``deadline`` (monotonic) passed or a stop
        event was set."""
        while (left := deadline - time.monotonic()) > 0 and not self.stopped:
            try:
                event = self._queue.get(timeout=min(left, 0.25))
            except queue.Empty:
                continue
            if event.unit == self._number:
                return event
        return None


def _audio_s(engine: Engine, unit: int, turn: int) -> float:
    record = engine.metrics.turn(unit, turn)
    audio = None if record is None else record.value(Figure.TTS_AUDIO_S)
    return round(audio or 0.0, 2)


def _words(text: object, name: str) -> str:
    """``text`` stripped; a ConfigError naming ``name`` when it has no words or is too long."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"'{name}' needs words to say; got {text!r}")
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(f"'{name}' is {len(text)} characters; at most {MAX_TEXT_CHARS} are spoken "
                          "in one call (split it)")
    return text.strip()


def _timeout(timeout_s: object) -> float:
    """``timeout_s`` as seconds; a ConfigError unless it is a number in the allowed range."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) \
            or not LISTEN_MIN_S <= timeout_s <= LISTEN_MAX_S:
        raise ConfigError(f"'timeout_s' must be a number of seconds from {LISTEN_MIN_S:g} to "
                          f"{LISTEN_MAX_S:g}; got {timeout_s!r}")
    return float(timeout_s)
