"""The chat history of one pipeline unit, bounded, with cancelled turns rolled back."""

from __future__ import annotations

import threading
from dataclasses import dataclass

REOPENED = "reopened"
BARGE_IN = "barge-in"


@dataclass(frozen=True, slots=True)
class Exchange:
    turn_id: int
    user: str
    assistant: str


class Conversation:
    """What the LLM sees: a system prompt plus the last ``max_turns`` exchanges."""

    def __init__(self, system_prompt: str, max_turns: int) -> None:
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []

    def messages_for(self, user_text: str) -> list[dict[str, str]]:
        """Chat messages for a new user turn, oldest history first."""
        with self._lock:
            history = self._exchanges[-self.max_turns:] if self.max_turns else []
        messages = [{"role": "system", "content": self.system_prompt}]
        for ex in history:
            messages.append({"role": "user", "content": ex.user})
            if ex.assistant:
                messages.append({"role": "assistant", "content": ex.assistant})
        messages.append({"role": "user", "content": user_text})
        return messages

    def append(self, turn_id: int, user: str, assistant: str) -> None:
        with self._lock:
            self._exchanges.append(Exchange(turn_id, user, assistant))
            # Keep a little more than the prompt uses; older turns are never read.
            del self._exchanges[: max(0, len(self._exchanges) - max(self.max_turns, 1) * 2)]

    def on_cancel(self, turn_id: int, reason: str) -> None:
        """A reopened turn vanishes (its new revision will be added); a barged-in reply is
        dropped but the user's words stay, since they were really said."""
        with self._lock:
            if reason == REOPENED:
                self._exchanges = [e for e in self._exchanges if e.turn_id != turn_id]
            else:
                self._exchanges = [Exchange(e.turn_id, e.user, "") if e.turn_id == turn_id else e
                                   for e in self._exchanges]

    def exchanges(self) -> tuple[Exchange, ...]:
        with self._lock:
            return tuple(self._exchanges)
