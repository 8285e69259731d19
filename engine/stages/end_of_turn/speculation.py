"""How many replies the LLM stage may request for a turn before the turn is committed.

A reply started during the grace (speculative) is free on a local model: a dropped
revision costs CPU time the user was not waiting for. On a remote LLM each one is a
request, metered by the token on a paid API: one spoken turn with pauses sent about four.
So the budget is per LLM backend: a local model speculates on every revision, a remote one
(``actual_device`` "remote") on ``turns.remote_speculation`` revisions per turn at most;
a revision past the budget waits for the commit (or is dropped when the user goes on).
"""

from __future__ import annotations

import threading

from engine.backends.base import LlmModel
from engine.config import TurnConfig

#: Turns remembered at most (their counts are dropped oldest first): a unit's turns end
#: in order, so only the few in flight matter.
_KEEP = 16


def speculation_limit(model: LlmModel, turns: TurnConfig) -> int | None:
    """Speculative requests per turn ``model`` may get; None: no limit (a local model)."""
    return turns.remote_speculation if model.actual_device == "remote" else None


class SpeculationBudget:
    """Speculative requests spent per turn of one unit (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[int, int] = {}

    def may_speculate(self, turn_id: int, limit: int | None) -> bool:
        """Whether one more speculative request for ``turn_id`` fits ``limit``."""
        if limit is None:
            return True
        with self._lock:
            return self._spent.get(turn_id, 0) < limit

    def spend(self, turn_id: int) -> None:
        """One speculative request for ``turn_id`` was sent."""
        with self._lock:
            self._spent[turn_id] = self._spent.get(turn_id, 0) + 1
            for stale in sorted(self._spent)[:-_KEEP]:
                del self._spent[stale]

    def spent(self, turn_id: int) -> int:
        with self._lock:
            return self._spent.get(turn_id, 0)
