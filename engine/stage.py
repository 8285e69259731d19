"""Stages: one thread each, and one override point each.

``Stage`` reads a bounded inbox and overrides ``process(msg)``; ``SourceStage`` reads an
``AudioSource`` and overrides ``process_block(block)``. Both yield messages for the
downstream stage. Messages of cancelled generations are dropped before processing and
outputs stop being forwarded as soon as their generation is cancelled. Putting into a
full downstream queue waits (back-pressure) but never past ``stop()``.

A stage's model can be replaced while it runs (``use_model``): the stage thread adopts
the new one between two messages, never in the middle of one.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.audio.base import AudioBlock, AudioSource
from engine.config import EngineConfig
from engine.control import TurnControl, TurnGate
from engine.errors import ParleyError
from engine.events import EngineError, EventHub
from engine.messages import EndOfStream, Message
from engine.metrics import Metrics

log = logging.getLogger("parley.stage")

_POLL_S = 0.05  # how often a waiting stage looks at its stop flag and for a new model


class StageContext:
    """What every stage of one pipeline unit shares.

    ``config`` is the unit's current settings: stages read it per message, so a runtime
    change (``PipelineUnit.apply``) takes effect at the next message without a restart.
    """

    def __init__(self, unit: int, control: TurnControl, metrics: Metrics, events: EventHub,
                 config: EngineConfig) -> None:
        self.unit = unit
        self.control = control
        self.metrics = metrics
        self.events = events
        self.config = config  # replaced whole (one reference write), never mutated
        self.stopping = threading.Event()
        self.gate = TurnGate(control, events.emit)


class _StageThread:
    """The thread, the downstream link, timing and error reporting of every stage."""

    def __init__(self, name: str, ctx: StageContext, model: Any = None) -> None:
        self.name = name
        self.ctx = ctx
        self.model = model
        self.downstream: Stage | None = None
        self._thread = threading.Thread(target=self._run, name=f"parley-u{ctx.unit}-{name}",
                                        daemon=True)
        self._blocked_s = 0.0
        self._next_model: tuple[Any, threading.Event] | None = None

    # ----------------------------------------------------------------- override
    def on_model(self) -> None:
        """Called in the stage thread right after it adopted a new ``self.model``."""

    # ----------------------------------------------------------------- models
    def use_model(self, model: Any) -> threading.Event:
        """Hand the stage a new model; the event is set once the stage uses it.

        A stage whose thread is not running adopts it at once.
        """
        adopted = threading.Event()
        superseded, self._next_model = self._next_model, (model, adopted)
        if superseded is not None:
            superseded[1].set()  # that model will never be used: nobody may wait for it
        if not self._thread.is_alive():
            self.adopt_pending_model()
        return adopted

    def adopt_pending_model(self) -> None:
        """Switch to the model handed over by ``use_model``; only from the stage's own
        thread, or when that thread is not running."""
        pending, self._next_model = self._next_model, None
        if pending is not None:
            self.model, adopted = pending
            self.on_model()
            adopted.set()

    # ----------------------------------------------------------------- plumbing
    def connect(self, downstream: Stage) -> Stage:
        self.downstream = downstream
        return downstream

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
        """What waits for this stage now, and how much may wait: (depth, capacity)."""
        raise NotImplementedError

    def _run(self) -> None:
        raise NotImplementedError

    def _forward(self, work: Callable[[], Iterator[Message]], what: object) -> None:
        """Run one unit of work and emit its outputs; record its compute time; report
        failures. ``work`` is called inside the guard: an override may be a generator
        (which runs as it is iterated) or a plain function (which runs when called)."""
        start = time.perf_counter()
        self._blocked_s = 0.0
        try:
            for out in work():
                if self.ctx.stopping.is_set():
                    return
                if self.is_stale(out):
                    self.ctx.metrics.dropped_stale(self.name)
                    continue
                self.emit(out)
        except ParleyError as exc:
            self._report(str(exc))
        except Exception as exc:  # one bad message must not kill the stage (logged)
            log.exception("%s stage failed on %r", self.name, what)
            self._report(f"{type(exc).__name__}: {exc}")
        finally:
            self.ctx.metrics.stage_time(self.name, time.perf_counter() - start - self._blocked_s)

    def _report(self, message: str) -> None:
        self.ctx.events.emit(EngineError(self.ctx.unit, self.name, message))


class Stage(_StageThread):
    """A stage fed by a bounded inbox: override ``process``."""

    def __init__(self, name: str, ctx: StageContext, model: Any = None, maxsize: int = 16) -> None:
        super().__init__(name, ctx, model)
        self.inbox: queue.Queue[Message] = queue.Queue(maxsize=maxsize)

    def process(self, msg: Message) -> Iterator[Message]:
        """Handle one message, yielding messages for the downstream stage."""
        raise NotImplementedError

    def on_end(self) -> None:
        """Called once when EndOfStream reaches this stage (before it is passed on)."""

    def put(self, msg: Message) -> bool:
        """Enqueue ``msg``, waiting while the queue is full; False if the unit stops first."""
        while not self.ctx.stopping.is_set():
            try:
                self.inbox.put(msg, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def queue_depth(self) -> tuple[int, int]:
        return self.inbox.qsize(), self.inbox.maxsize

    def _run(self) -> None:
        while not self.ctx.stopping.is_set():
            self.adopt_pending_model()
            try:
                msg = self.inbox.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if isinstance(msg, EndOfStream):
                self.on_end()
                self.emit(msg)
                continue
            if self.is_stale(msg):
                self.ctx.metrics.dropped_stale(self.name)
                continue
            self._forward(functools.partial(self.process, msg), msg)


class SourceStage(_StageThread):
    """The first stage: reads an AudioSource instead of an inbox; override ``process_block``.

    When a finite source ends, ``on_source_end`` may yield last messages, then
    ``EndOfStream`` follows them down the pipeline. Its queue is the source's capture
    buffer: blocks captured and not yet read.
    """

    def __init__(self, name: str, ctx: StageContext, source: AudioSource, model: Any = None) -> None:
        super().__init__(name, ctx, model)
        self.source = source

    def process_block(self, block: AudioBlock) -> Iterator[Message]:
        """Handle one captured block, yielding messages for the downstream stage."""
        raise NotImplementedError

    def on_source_end(self) -> Iterator[Message]:
        """The source delivered its last block: yield what finishes the input."""
        return iter(())

    def queue_depth(self) -> tuple[int, int]:
        return (int(getattr(self.source, "buffered_blocks", 0)),
                int(getattr(self.source, "buffer_capacity", 0)))

    def _run(self) -> None:
        try:
            while not self.ctx.stopping.is_set():
                self.adopt_pending_model()
                block = self.source.read(_POLL_S)
                if block is None:
                    if self.source.finished:
                        break
                    continue
                self._forward(functools.partial(self.process_block, block), block)
            if not self.ctx.stopping.is_set():
                self._forward(self.on_source_end, "the end of the input")
        except Exception as exc:  # a failing source is reported (logged); the unit drains
            log.exception("%s: reading the audio source failed", self.name)
            self._report(f"{type(exc).__name__}: {exc}")
        self.emit(EndOfStream(0, self.ctx.control.generation))
