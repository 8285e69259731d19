"""The chat history of one pipeline unit, bounded, with cancelled turns rolled back."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from engine.pipeline.control import CancelReason


@dataclass(frozen=True, slots=True)
class Exchange:
    turn_id: int
    user: str
    assistant: str


class ChatHistory:
    """One unit's exchanges, bounded; the prompt takes the last ``history_turns`` of them.

    The system prompt and the history length are read per turn (they are runtime
    settings), so the history itself outlives any change of them.
    """

    #: Exchanges kept: the most any prompt can ask for (``llm.history_turns`` <= 100).
    KEEP = 100

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []

    def messages_for(self, user_text: str, system_prompt: str,
                     history_turns: int) -> list[dict[str, str]]:
        """Chat messages for a new user turn, oldest history first."""
        with self._lock:
            history = self._exchanges[-history_turns:] if history_turns else []
        messages = [{"role": "system", "content": system_prompt}]
        for ex in history:
            messages.append({"role": "user", "content": ex.user})
            if ex.assistant:
                messages.append({"role": "assistant", "content": ex.assistant})
        messages.append({"role": "user", "content": user_text})
        return messages

    def append(self, turn_id: int, user: str, assistant: str) -> None:
        with self._lock:
            self._exchanges.append(Exchange(turn_id, user, assistant))
            del self._exchanges[: max(0, len(self._exchanges) - self.KEEP)]

    def clear(self) -> None:
        """Forget every exchange (a new conversation)."""
        with self._lock:
            self._exchanges.clear()

    def on_cancel(self, turn_id: int, reason: CancelReason) -> None:
        """A reopened turn vanishes (its new revision will be added); a barged-in reply is
        dropped but the user's words stay, since they were really said."""
        with self._lock:
            if reason in (CancelReason.REOPENED, CancelReason.CLEARED, CancelReason.NEW_CONVERSATION):
                self._exchanges = [e for e in self._exchanges if e.turn_id != turn_id]
            else:
                self._exchanges = [Exchange(e.turn_id, e.user, "") if e.turn_id == turn_id else e
                                   for e in self._exchanges]

    def exchanges(self) -> tuple[Exchange, ...]:
        with self._lock:
            return tuple(self._exchanges)
