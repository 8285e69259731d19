"""An engine for the tools tests: started on a quiet source (the user types) or a given
one, and a file sink; every event kept, and waits on the events a tool call brings. And a
ToolHost alone (no LLM, as ``parley-cli tools`` runs it) with the errors it emitted."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.audio.base import AudioSource
from engine.audio.file_sink import FileSink
from engine.engine import Engine
from engine.pipeline.events import EngineError, Event, EventHub, TurnFinished
from engine.tools.host import ToolHost
from tests.support.sources import Quiet


@contextmanager
def tool_host_with_errors() -> Iterator[tuple[ToolHost, list[str]]]:
    """A ToolHost with no LLM and the messages of the EngineErrors it emits; closed after."""
    events = EventHub()
    errors: list[str] = []
    events.subscribe(lambda e: errors.append(e.message) if isinstance(e, EngineError) else None)
    host = ToolHost(events, itertools.count(1).__next__)
    try:
        yield host, errors
    finally:
        host.close()


class ToolEngine:
    """``engine`` started on one unit; ``events`` holds every event in order."""

    def __init__(self, engine: Engine, source: AudioSource | None = None) -> None:
        """``source``: what the unit hears (default: a quiet one, the user types)."""
        self.engine = engine
        self.events: list[Event] = []
        self._changed = threading.Condition()
        engine.subscribe(self._keep)
        self.sink = FileSink(None, realtime=False)
        engine.start([source or Quiet()], [self.sink])
        self.unit = engine.units[0]

    def _keep(self, event: Event) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(self, kind: type) -> list:
        with self._changed:
            return [e for e in self.events if isinstance(e, kind)]

    def wait_for(self, found: Callable[[], object], timeout: float = 60.0, what: str = "") -> object:
        """Wait until ``found()`` is truthy (re-checked on every event and every 0.1 s)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (value := found()):
                left = deadline - time.monotonic()
                if left <= 0:
                    kinds = [type(e).__name__ for e in self.events]
                    raise AssertionError(f"timed out waiting for {what or found}; events: {kinds}")
                self._changed.wait(min(left, 0.1))
            return value

    def ask(self, text: str, timeout: float = 60.0) -> TurnFinished:
        """A typed turn; waits for the first finished turn after it that has reply text
        (a turn that only called tools, and a spoken acknowledgement, have none)."""
        start = len(self.events)
        self.engine.say(text)

        def answered():
            return next((e for e in self.events[start:]
                         if isinstance(e, TurnFinished) and e.record.reply), None)

        return self.wait_for(answered, timeout, f"the reply to {text!r}")

    def close(self) -> None:
        stuck = self.engine.stop()
        self.engine.close()
        assert not stuck, stuck
