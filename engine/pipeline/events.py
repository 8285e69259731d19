"""Events for listeners (the GUI bridge, the CLI): things that must not wait for a poll.

Listeners are called from stage threads and must return quickly; the GUI's bridge only
re-emits them as queued Qt signals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.backends.base import ToolCall
from engine.pipeline.control import CancelReason
from engine.pipeline.metrics import TurnRecord


@dataclass(frozen=True, slots=True)
class Event:
    """Base of listener events."""

    unit: int


@dataclass(frozen=True, slots=True)
class UserSpeaking(Event):
    turn_id: int
    started: bool  # True at speech start, False at its end


@dataclass(frozen=True, slots=True)
class PartialTranscript(Event):
    """Live transcription: ``stable`` words were confirmed by a newer partial."""

    turn_id: int
    stable: str
    unstable: str


@dataclass(frozen=True, slots=True)
class FinalTranscript(Event):
    """A turn's words, with their language where the STT knows it (``Transcript``)."""

    turn_id: int
    text: str
    language: str | None = None
    language_probability: float | None = None


@dataclass(frozen=True, slots=True)
class ReplyText(Event):
    """A clause of the reply as it goes to TTS."""

    turn_id: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallsMade(Event):
    """The reply called functions (after its text, if any): a client runs them and sends
    their outputs; the conversation goes on with another reply."""

    turn_id: int
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class ToolCallStarted(Event):
    """The assistant runs one of its own tools (``engine/tools/``) for a reply's call."""

    turn_id: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallFinished(Event):
    """One of the assistant's tool calls ended, ``seconds`` after it started.

    ``result`` is the text the model was given. ``error`` is None on success, else why
    the call failed (the tool raised, timed out, is unknown, or the user declined it);
    the conversation goes on either way.
    """

    turn_id: int
    call: ToolCall
    result: str
    error: str | None
    seconds: float


@dataclass(frozen=True, slots=True)
class TimerDue(Event):
    """A timer or reminder the assistant set is due (``due_at``: ``time.time()`` seconds)."""

    timer_id: str
    label: str
    due_at: float


@dataclass(frozen=True, slots=True)
class HistorySummarized(Event):
    """The turns the prompt no longer keeps were summarised, between turns: the prompt
    now carries ``summary`` in place of every turn up to ``through_turn``."""

    summary: str
    through_turn: int


@dataclass(frozen=True, slots=True)
class TurnCancelled(Event):
    """A turn's reply ends unfinished. ``reason``: "barge-in", "reopened" (the user went
    on speaking; the turn is redone), "cleared" (a client threw its audio away) or
    "error" (``CancelReason.FAILED``: a stage failed on it; an ``EngineError`` with the same
    ``turn_id`` names the stage and the cause). No ``TurnFinished`` follows an "error"."""

    turn_id: int
    reason: CancelReason


@dataclass(frozen=True, slots=True)
class TurnFinished(Event):
    record: TurnRecord


@dataclass(frozen=True, slots=True)
class EngineError(Event):
    """A stage failed on one message (the engine goes on), or a sound device failed.

    ``turn_id`` is the turn the failure ended (``TurnCancelled(reason="error")``), or None
    when no turn was in progress. A sound device that fails reports here too, with
    ``stage`` "microphone", "speaker" or "input" (and an ``AudioStatus``).
    """

    stage: str
    message: str
    turn_id: int | None = None


@dataclass(frozen=True, slots=True)
class Notice(Event):
    """Something the user should know that failed nothing, said once: e.g. the TTS stage's
    "replies in German (de) are shown as text, not spoken: ..." (a language with no voice).
    """

    stage: str
    message: str


@dataclass(frozen=True, slots=True)
class AudioStatus(Event):
    """A sound device changed state (``engine.audio.health``).

    ``device``: "microphone", "speaker", or "input" (another source, whose blocks the VAD
    stage checks itself). ``state``: "ok" (working, or working again),
    "invalid" (it delivers NaN, infinite or far out-of-range samples: they are replaced
    by silence), "stalled" (open, but nothing arrived for seconds) or "lost" (the stream
    failed or the device vanished: capture or playback stopped, and reopening is tried
    every second). Reported once per change, never per block.
    """

    device: str
    state: str
    message: str


@dataclass(frozen=True, slots=True)
class LoadProgress(Event):
    stage: str
    fraction: float | None
    text: str


Listener = Callable[[Event], None]


class EventHub:
    """Fan-out of events to listeners; a failing listener never breaks a stage."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            self._listeners = [x for x in self._listeners if x is not listener]

        return unsubscribe

    def emit(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # a listener's bug must not stop the pipeline (logged)
                import logging

                logging.getLogger("parley.events").exception("listener failed on %r", event)
