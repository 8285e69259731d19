"""Cancellation by generation counter, and the turn commitments that release output.

One ``TurnControl`` belongs to one pipeline unit. ``cancel()`` (barge-in, a reopened
turn) bumps the generation: every message made under an older generation is dropped by
every stage, and the LLM and TTS loops check ``is_stale`` per token and per chunk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class TurnControl:
    """Generation counter plus the set of committed turns, behind one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._on_cancel: list[Callable[[int, str], None]] = []

    @property
    def generation(self) -> int:
        """The current generation; new messages are made under it."""
        return self._generation

    def is_stale(self, generation: int) -> bool:
        """True when work of ``generation`` has been cancelled."""
        return generation < self._generation

    def on_cancel(self, callback: Callable[[int, str], None]) -> None:
        """Call ``callback(turn_id, reason)`` inside every cancel, under the lock.

        Used by the conversation history to drop a cancelled turn atomically with the
        bump, so a late writer that checks ``run_if_current`` cannot slip in between.
        """
        self._on_cancel.append(callback)

    def cancel(self, turn_id: int, reason: str) -> int:
        """Cancel all work in flight (of ``turn_id`` and anything older); new generation."""
        with self._lock:
            self._generation += 1
            for callback in self._on_cancel:
                callback(turn_id, reason)
            return self._generation

    def run_if_current(self, generation: int, action: Callable[[], None]) -> bool:
        """Run ``action`` only if ``generation`` is still current, atomically."""
        with self._lock:
            if generation < self._generation:
                return False
            action()
            return True


class TurnGate:
    """Holds a turn's user-visible events until the turn is committed.

    With speculative turns, STT and LLM run while the user may still resume. Their final
    transcript and reply text must not reach listeners (the GUI) before the turn is
    committed, and never if the revision is dropped: ``emit`` buffers them, ``commit``
    releases those still current, and stale ones are discarded.
    """

    def __init__(self, control: TurnControl, emit: Callable[[object], None]) -> None:
        self._control = control
        self._emit = emit
        self._lock = threading.Lock()
        self._committed: set[int] = set()
        self._pending: dict[int, list[tuple[int, object]]] = {}

    def emit(self, turn_id: int, generation: int, event: object) -> None:
        """Pass ``event`` on now if its turn is committed, else hold it."""
        with self._lock:
            if self._control.is_stale(generation):
                return
            if turn_id not in self._committed:
                self._pending.setdefault(turn_id, []).append((generation, event))
                return
        self._emit(event)

    def commit(self, turn_id: int) -> None:
        """The turn is final: release its held events of the current generation."""
        with self._lock:
            self._committed.add(turn_id)
            held = self._pending.pop(turn_id, [])
            # Committed ids only grow; keep the set small on long sessions.
            if len(self._committed) > 64:
                self._committed = {t for t in self._committed if t > turn_id - 32}
        for generation, event in held:
            if not self._control.is_stale(generation):
                self._emit(event)
