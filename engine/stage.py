"""Stage: one thread, a bounded input queue, and one override point, ``process``.

A stage drops messages of cancelled generations before processing them and stops
forwarding a message's outputs as soon as its generation is cancelled. Putting into a
full downstream queue waits (back-pressure) but never past ``stop()``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator

from engine.control import TurnControl, TurnGate
from engine.errors import ParleyError
from engine.events import EngineError, EventHub
from engine.messages import EndOfStream, Message
from engine.metrics import Metrics

log = logging.getLogger("parley.stage")

_POLL_S = 0.05  # how often a waiting stage looks at its stop flag


class StageContext:
    """What every stage of one pipeline unit shares."""

    def __init__(self, unit: int, control: TurnControl, metrics: Metrics, events: EventHub) -> None:
        self.unit = unit
        self.control = control
        self.metrics = metrics
        self.events = events
        self.stopping = threading.Event()
        self.gate = TurnGate(control, events.emit)


class Stage:
    """Base class: override ``process``; outputs go to the downstream stage."""

    #: Subclasses that must see stale messages (to release resources) set this False.
    drop_stale = True

    def __init__(self, name: str, ctx: StageContext, maxsize: int = 16) -> None:
        self.name = name
        self.ctx = ctx
        self.inbox: queue.Queue[Message] = queue.Queue(maxsize=maxsize)
        self.downstream: Stage | None = None
        self._thread = threading.Thread(target=self._run, name=f"parley-u{ctx.unit}-{name}",
                                        daemon=True)
        self._blocked_s = 0.0

    # ----------------------------------------------------------------- override
    def process(self, msg: Message) -> Iterator[Message]:
        """Handle one message, yielding messages for the downstream stage."""
        raise NotImplementedError

    def on_end(self) -> None:
        """Called once when EndOfStream reaches this stage (before it is passed on)."""

    # ----------------------------------------------------------------- plumbing
    def connect(self, downstream: Stage) -> Stage:
        self.downstream = downstream
        return downstream

    def put(self, msg: Message) -> bool:
        """Enqueue ``msg``, waiting while the queue is full; False if the unit stops first."""
        while not self.ctx.stopping.is_set():
            try:
                self.inbox.put(msg, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def emit(self, msg: Message) -> None:
        """Send ``msg`` downstream, counting the time spent waiting as not-compute."""
        if self.downstream is None:
            return
        start = time.perf_counter()
        self.downstream.put(msg)
        self._blocked_s += time.perf_counter() - start

    def is_stale(self, msg: Message) -> bool:
        return self.ctx.control.is_stale(msg.turn_id, msg.generation)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the thread; True if it ended."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def thread_name(self) -> str:
        return self._thread.name

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def queue_depth(self) -> tuple[int, int]:
        return self.inbox.qsize(), self.inbox.maxsize

    def _run(self) -> None:
        while not self.ctx.stopping.is_set():
            try:
                msg = self.inbox.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if isinstance(msg, EndOfStream):
                self.on_end()
                self.emit(msg)
                continue
            if self.drop_stale and self.is_stale(msg):
                self.ctx.metrics.dropped_stale(self.name)
                continue
            self._handle(msg)

    def _handle(self, msg: Message) -> None:
        start = time.perf_counter()
        self._blocked_s = 0.0
        try:
            for out in self.process(msg):
                if self.ctx.stopping.is_set():
                    return
                if self.drop_stale and self.is_stale(out):
                    self.ctx.metrics.dropped_stale(self.name)
                    continue
                self.emit(out)
        except ParleyError as exc:
            self._report(str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad message must not kill the stage
            log.exception("%s stage failed on %r", self.name, msg)
            self._report(f"{type(exc).__name__}: {exc}")
        finally:
            self.ctx.metrics.stage_time(self.name, time.perf_counter() - start - self._blocked_s)

    def _report(self, message: str) -> None:
        self.ctx.events.emit(EngineError(self.ctx.unit, self.name, message))
