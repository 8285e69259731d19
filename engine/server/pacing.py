"""ToolCallPacing: a function call reaches the client a moment after ``speech_stopped``.

Parley starts a reply while it is still judging the user's silence (the speculative
start), so a function call can be ready before the turn is committed; the session then
sends ``speech_stopped``, ``committed`` and the call in one burst. OpenAI's own server
never does: its model starts at the commit, hundreds of milliseconds before any call.
pipecat (1.14) depends on that gap. Its assistant aggregator holds a tool result that
arrives before its own user-stopped frame and never looks at it again, so the result is
never answered and the conversation stops (pipecat issue 5823). A session therefore
releases a function call no sooner than ``gap_s`` after the ``speech_stopped`` of its
turn, and holds every engine event that comes after it meanwhile, so their order stays
the one the stages emitted. Replies without a call are not held.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

TOOL_CALL_GAP_S = 0.15  # well under OpenAI's own commit-to-call latency, far over pipecat's hops


class ToolCallPacing:
    """Holds engine events, in order, while a function call waits out its gap."""

    def __init__(self, clock: Callable[[], float], gap_s: float = TOOL_CALL_GAP_S,
                 call_later: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        self._clock = clock
        self._gap_s = gap_s
        self._call_later = call_later or (lambda delay, f: asyncio.get_running_loop().call_later(delay, f))
        self._stopped_at = float("-inf")
        self._held: deque[Callable[[], None]] = deque()
        self._timer: Any = None  # what call_later returned: cancel() drops it
        self._pending = False  # a release is scheduled

    def speech_stopped(self) -> None:
        """``speech_stopped`` was just sent: the gap counts from now."""
        self._stopped_at = self._clock()

    def holds(self, is_call: bool) -> bool:
        """Whether the next event must wait: events are held behind one, or it is a
        function call inside the gap."""
        if self._held:
            return True
        return is_call and self._clock() - self._stopped_at < self._gap_s

    def hold(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the gap has passed, after the actions held before it."""
        self._held.append(action)
        if not self._pending:
            self._pending = True
            wait = max(0.0, self._stopped_at + self._gap_s - self._clock())
            self._timer = self._call_later(wait, self._release)

    def drop(self) -> None:
        """Forget what is held (the client left)."""
        self._held.clear()
        if self._pending and self._timer is not None:
            self._timer.cancel()
        self._timer, self._pending = None, False

    def _release(self) -> None:
        self._timer, self._pending = None, False
        held, self._held = self._held, deque()
        for action in held:
            action()
