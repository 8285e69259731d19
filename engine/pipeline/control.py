"""Cancellation by generation counter, and the turn commitments that release output.

One ``TurnControl`` belongs to one pipeline unit. Barge-in and reopened turns bump the
generation: stages drop messages whose generation is below their turn's floor, and the
LLM and TTS loops check ``is_stale`` per token and per chunk.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.pipeline.events import Event  # events imports this module


class CancelReason(enum.StrEnum):
    """Why a turn's work is dropped: ``TurnControl.cancel_turn``/``cancel_all`` and
    ``TurnCancelled.reason``. A StrEnum, so the JSON and the wire carry the same words."""

    BARGE_IN = "barge-in"  # the user spoke over the reply
    REOPENED = "reopened"  # the user went on speaking inside the grace; the turn is redone
    CLEARED = "cleared"  # the client threw away the audio of the turn in progress
    NEW_CONVERSATION = "new conversation"  # the history is being cleared: drop all work in flight
    FAILED = "error"  # a stage failed on the turn (an EngineError names it)


class TurnControl:
    """Generation counter with per-turn and global floors, behind one lock.

    Every message is made under the current ``generation``. A message is stale when its
    generation is below the floor of its turn: ``cancel_turn`` (a reopened turn) raises
    one turn's floor and leaves the reply of an earlier turn alone; ``cancel_all``
    (barge-in, shutdown) raises the floor of every turn in flight.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._global_floor = 0
        self._turn_floor: dict[int, int] = {}
        self._cancels: dict[int, tuple[CancelReason, int]] = {}  # the last of each turn
        self._on_cancel: list[Callable[[int, CancelReason], None]] = []

    @property
    def generation(self) -> int:
        """The current generation; new messages are made under it."""
        return self._generation

    def floor(self, turn_id: int) -> int:
        """The oldest generation of ``turn_id`` whose work is still wanted."""
        return max(self._global_floor, self._turn_floor.get(turn_id, 0))

    def is_stale(self, turn_id: int, generation: int) -> bool:
        """True when work of ``turn_id`` made under ``generation`` has been cancelled."""
        return generation < self.floor(turn_id)

    def on_cancel(self, callback: Callable[[int, CancelReason], None]) -> None:
        """Call ``callback(turn_id, reason)`` inside every cancel, under the lock.

        Used by the conversation history to drop a cancelled turn atomically with the
        bump, so a late writer that checks ``run_if_current`` cannot slip in between.
        """
        self._on_cancel.append(callback)

    def cancel_turn(self, turn_id: int, reason: CancelReason) -> int:
        """Drop the work of one turn (it is being redone); returns its new generation."""
        with self._lock:
            self._generation += 1
            self._turn_floor[turn_id] = self._generation
            if len(self._turn_floor) > 64:  # old turns' floors are below the global one
                for old in sorted(self._turn_floor)[:-32]:
                    del self._turn_floor[old]
            self._note(turn_id, reason)
            for callback in self._on_cancel:
                callback(turn_id, reason)
            return self._generation

    def cancel_all(self, turn_id: int, reason: CancelReason) -> int:
        """Drop all work in flight (``turn_id`` is the reply cut off); new generation."""
        with self._lock:
            self._generation += 1
            self._global_floor = self._generation
            self._note(turn_id, reason)
            for callback in self._on_cancel:
                callback(turn_id, reason)
            return self._generation

    def _note(self, turn_id: int, reason: CancelReason) -> None:
        self._cancels[turn_id] = (reason, self._generation)
        if len(self._cancels) > 64:
            for old in sorted(self._cancels)[:-32]:
                del self._cancels[old]

    def cut_reason(self, turn_id: int, generation: int) -> CancelReason | None:
        """Why the work of ``turn_id`` made under ``generation`` was cancelled: the reason
        of that turn's cancel (None while the work is current, or when another turn's cut
        made it stale: a barge-in cuts every turn in flight under the reply's turn id)."""
        with self._lock:
            last = self._cancels.get(turn_id)
            if not self.is_stale(turn_id, generation) or last is None or last[1] <= generation:
                return None
            return last[0]

    def only_reply_cut(self, turn_id: int, generation: int) -> bool:
        """True when work of ``turn_id`` made under ``generation`` is stale only because a
        barge-in (or an interrupt) cut that turn's reply off: not because the turn was
        reopened, cleared, failed or forgotten with the conversation. Its words are still
        wanted: the user said them (``SttStage`` and ``LlmStage`` keep them)."""
        with self._lock:
            last = self._cancels.get(turn_id)
            return (self.is_stale(turn_id, generation)
                    and generation >= self._turn_floor.get(turn_id, 0)
                    and last is not None and last[0] is CancelReason.BARGE_IN and last[1] > generation)

    def run_if_current(self, turn_id: int, generation: int, action: Callable[[], None]) -> bool:
        """Run ``action`` only if that work is still wanted, atomically with cancels."""
        with self._lock:
            if self.is_stale(turn_id, generation):
                return False
            action()
            return True


class EventHold:
    """Holds a turn's user-visible events until the turn is committed.

    With speculative turns, STT and LLM run while the user may still resume. Their final
    transcript and reply text must not reach listeners (the GUI) before the turn is
    committed, and never if the revision is dropped: ``emit`` buffers them, ``commit``
    releases those still current, and stale ones are discarded.
    """

    def __init__(self, control: TurnControl, emit: Callable[[Event], None]) -> None:
        self._control = control
        self._emit = emit
        self._lock = threading.Lock()
        self._committed: set[int] = set()
        self._pending: dict[int, list[tuple[int, Event]]] = {}

    def emit(self, turn_id: int, generation: int, event: Event) -> None:
        """Pass ``event`` on now if its turn is committed, else hold it."""
        with self._lock:
            if self._control.is_stale(turn_id, generation):
                return
            if turn_id not in self._committed:
                self._pending.setdefault(turn_id, []).append((generation, event))
                return
        self._emit(event)

    def committed(self, turn_id: int) -> bool:
        """True once ``turn_id`` was committed (its output is no longer held)."""
        with self._lock:
            return turn_id in self._committed

    def commit(self, turn_id: int) -> None:
        """The turn is final: release its held events of the current generation."""
        with self._lock:
            self._committed.add(turn_id)
            held = self._pending.pop(turn_id, [])
            # Committed ids only grow; keep the set small on long sessions.
            if len(self._committed) > 64:
                self._committed = {t for t in self._committed if t > turn_id - 32}
        for generation, event in held:
            if not self._control.is_stale(turn_id, generation):
                self._emit(event)
