"""EventBridge: engine events (emitted on stage threads) re-emitted as queued Qt signals.

A listener runs on the stage thread that emitted the event and must return at once, so
the bridge only emits a signal (``emit_safely``: the bridge may be deleted while an engine
still stops); Qt queues it to the receivers' (GUI) thread.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.core.background import emit_safely
from engine.pipeline.events import (EngineError, Event, FinalTranscript, HistorySummarized, Notice,
                                    PartialTranscript, ReplyText, TimerDue, ToolCallFinished,
                                    ToolCallStarted, TurnCancelled, TurnFinished, UserSpeaking)


class EventBridge(QObject):
    """One Qt signal per engine event kind. Attach it to any number of engines."""

    user_speaking = Signal(int, int, bool)  # unit, turn_id, started
    partial_transcript = Signal(int, int, str, str)  # unit, turn_id, stable, unstable
    final_transcript = Signal(int, int, str)  # unit, turn_id, text
    reply_text = Signal(int, int, str)  # unit, turn_id, clause
    turn_cancelled = Signal(int, int, str)  # unit, turn_id, reason
    turn_finished = Signal(object)  # TurnRecord
    engine_error = Signal(str, str)  # stage, message
    tool_started = Signal(int, int, object)  # unit, turn_id, ToolCall
    # unit, turn_id, call, result, error (None: it worked), seconds
    tool_finished = Signal(int, int, object, str, object, float)
    history_summarized = Signal(int, str, int)  # unit, summary, through_turn
    timer_due = Signal(str, str, float)  # timer_id, label, due_at (time.time() seconds)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._detach: dict[int, Callable[[], None]] = {}

    def attach(self, engine) -> None:
        """Subscribe to ``engine``'s events (idempotent)."""
        if id(engine) not in self._detach:
            self._detach[id(engine)] = engine.subscribe(self.on_event)

    def detach(self, engine) -> None:
        """Stop listening to ``engine``."""
        unsubscribe = self._detach.pop(id(engine), None)
        if unsubscribe is not None:
            unsubscribe()

    def detach_all(self) -> None:
        """Stop listening to every engine (at shutdown)."""
        for unsubscribe in self._detach.values():
            unsubscribe()
        self._detach.clear()

    def on_event(self, event: Event) -> None:
        """The engine listener: translate ``event`` into a signal. Called on stage threads;
        once the bridge is deleted (the engine still stopping) nobody listens."""
        relay = self._signal_for(event)
        if relay is not None:
            emit_safely(*relay)

    def _signal_for(self, event: Event) -> tuple | None:
        """The signal for ``event`` and its arguments, or None."""
        if isinstance(event, PartialTranscript):
            return self.partial_transcript, event.unit, event.turn_id, event.stable, event.unstable
        if isinstance(event, ReplyText):
            return self.reply_text, event.unit, event.turn_id, event.text
        if isinstance(event, FinalTranscript):
            return self.final_transcript, event.unit, event.turn_id, event.text
        if isinstance(event, UserSpeaking):
            return self.user_speaking, event.unit, event.turn_id, event.started
        if isinstance(event, TurnCancelled):
            return self.turn_cancelled, event.unit, event.turn_id, event.reason
        if isinstance(event, TurnFinished):
            return self.turn_finished, event.record
        if isinstance(event, EngineError | Notice):  # a notice is shown the same way, once
            return self.engine_error, event.stage, event.message
        if isinstance(event, ToolCallStarted):
            return self.tool_started, event.unit, event.turn_id, event.call
        if isinstance(event, ToolCallFinished):
            return (self.tool_finished, event.unit, event.turn_id, event.call, event.result, event.error,
                    event.seconds)
        if isinstance(event, HistorySummarized):
            return self.history_summarized, event.unit, event.summary, event.through_turn
        if isinstance(event, TimerDue):
            return self.timer_due, event.timer_id, event.label, event.due_at
        # LoadProgress is not re-emitted: the controller reports loading itself, through
        # the progress callback of Engine.load and Engine.apply.
        return None
