"""EventBridge: engine events (emitted on stage threads) re-emitted as queued Qt signals.

A listener runs on the stage thread that emitted the event and must return at once, so
the bridge only emits a signal; Qt queues it to the receivers' (GUI) thread.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from engine.pipeline.events import (EngineError, Event, FinalTranscript, PartialTranscript, ReplyText,
                                    TurnCancelled, TurnFinished, UserSpeaking)


class EventBridge(QObject):
    """One Qt signal per engine event kind. Attach it to any number of engines."""

    user_speaking = Signal(int, int, bool)  # unit, turn_id, started
    partial_transcript = Signal(int, int, str, str)  # unit, turn_id, stable, unstable
    final_transcript = Signal(int, int, str)  # unit, turn_id, text
    reply_text = Signal(int, int, str)  # unit, turn_id, clause
    turn_cancelled = Signal(int, int, str)  # unit, turn_id, reason
    turn_finished = Signal(object)  # TurnRecord
    engine_error = Signal(str, str)  # stage, message

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
        """The engine listener: translate ``event`` into a signal. Called on stage threads."""
        try:
            self._emit(event)
        except RuntimeError:
            # The Qt object was deleted while the engine was still stopping: nobody listens.
            pass

    def _emit(self, event: Event) -> None:
        if isinstance(event, PartialTranscript):
            self.partial_transcript.emit(event.unit, event.turn_id, event.stable, event.unstable)
        elif isinstance(event, ReplyText):
            self.reply_text.emit(event.unit, event.turn_id, event.text)
        elif isinstance(event, FinalTranscript):
            self.final_transcript.emit(event.unit, event.turn_id, event.text)
        elif isinstance(event, UserSpeaking):
            self.user_speaking.emit(event.unit, event.turn_id, event.started)
        elif isinstance(event, TurnCancelled):
            self.turn_cancelled.emit(event.unit, event.turn_id, event.reason)
        elif isinstance(event, TurnFinished):
            self.turn_finished.emit(event.record)
        elif isinstance(event, EngineError):
            self.engine_error.emit(event.stage, event.message)
        # LoadProgress is not re-emitted: the controller reports loading itself, through
        # the progress callback of Engine.load and Engine.apply.
