"""Stages: one thread each, and one override point each.

``Stage`` reads a bounded inbox and overrides ``process(msg)``; ``SourceStage`` reads an
``AudioSource`` and overrides ``process_block(block)``. Both yield messages for the
downstream stage. Messages of cancelled generations are dropped before processing and
outputs stop being forwarded as soon as their generation is cancelled. Putting into a
full downstream queue waits (back-pressure) but never past ``stop()``.

A stage's model can be replaced while it runs (``use_model``): the stage thread adopts
the new one between two messages, never in the middle of one. A stage names its model's
contract as its type parameter (``SttStage(Stage[SttModel])``); a stage without a model
(the sink) is a ``Stage[None]``.

A stage that fails on a message reports it and ends that message's turn, and goes on
with the next message. The report is an ``EngineError`` naming the stage, the cause (an
out-of-memory error with the stage's device memory figures) and the turn. Ending the
turn cancels it as a reopened turn is cancelled (``TurnControl.cancel_turn``, reason
``CancelReason.FAILED``): every stage drops the rest of its work, and a ``TurnCancelled(reason=
"error")`` event follows, released like the turn's other events when the turn is
committed (so a turn the user goes on speaking into is redone, not failed); the turn's
record is then marked cancelled. The pipeline stays up and the next turn runs as usual.
Turns end on failures with a final segment, a final transcript or reply text; a chunk
of reply audio the sink fails to play is reported and lost alone, and a failure with
no turn (a partial segment, a source stage between turns) only reports; a source stage
reports the same failure again at most every ``QUIET_REPEATS_S`` seconds.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

from engine.audio.base import AudioBlock, AudioSource
from engine.backends.base import Backend
from engine.config import EngineConfig
from engine.pipeline.control import CancelReason, TurnControl, EventHold
from engine.errors import ParleyError, is_out_of_memory
from engine.runtime.failures import describe_failure, release_cached_memory
from engine.pipeline.events import EngineError, Event, EventHub, TurnCancelled
from engine.pipeline.messages import PLAIN_REPLY, EndOfStream, Message, SpeechSegment, TextChunk, Transcript
from engine.pipeline.metrics import Metrics
from engine.runtime.compute_gate import UnitCompute, Urgency
from engine.runtime.mlx_lock import waited_by_this_thread
from engine.pipeline.end_of_turn import EndOfTurnQuestions

log = logging.getLogger("parley.stage")

_POLL_S = 0.05  # how often a waiting stage looks at its stop flag and for a new model
# A failure on one of these ends its turn. Not on reply audio (AudioOut): the reply was
# made, and a chunk the sink failed to play is lost alone (a speaker that fails for good
# is reported by the speaker itself, see engine.audio.health).
_TURN_MESSAGES = (SpeechSegment, Transcript, TextChunk)

#: The contract of a stage's model (``engine.backends.base``), or None for a stage without one.
ModelT = TypeVar("ModelT", bound="Backend | None")
T = TypeVar("T")


class StageContext:
    """What every stage of one pipeline unit shares.

    ``config`` is the unit's current settings: stages read it per message, so a runtime
    change (``PipelineUnit.apply``) takes effect at the next message without a restart.
    ``end_of_turn`` is the unit's end-of-turn policy (silence or learned: the board, the
    scorers and the decision), of which the stages ask ``EndOfTurnQuestions``; whoever
    builds the context builds it (the pipeline unit, on the shared models).
    ``compute`` is the unit's handle on the CPU's compute gate: its stages' model calls
    hold it, and declare the unit's urgency with it.
    """

    def __init__(self, unit: int, control: TurnControl, metrics: Metrics, events: EventHub,
                 config: EngineConfig, *, end_of_turn: EndOfTurnQuestions) -> None:
        self.unit = unit
        self.compute = UnitCompute(unit)
        self.control = control
        self.metrics = metrics
        self.events = events
        self.config = config  # replaced whole (one reference write), never mutated
        self.stopping = threading.Event()
        self.held = EventHold(control, self._release)
        self.end_of_turn = end_of_turn
        #: How replies are made where a client's session differs from the settings (its
        #: tools, text-only replies); a typed turn's own ``ReplyRequest`` overrides it.
        self.reply = PLAIN_REPLY

    def fail_turn(self, turn_id: int) -> None:
        """End ``turn_id`` because a stage failed on it: drop its work in every stage now;
        report ``TurnCancelled(reason="error")`` (and mark the record cancelled) once the
        turn is committed, or never if it is redone first (the user went on speaking)."""
        generation = self.control.cancel_turn(turn_id, CancelReason.FAILED)
        self.held.emit(turn_id, generation, TurnCancelled(self.unit, turn_id, CancelReason.FAILED))

    def _release(self, event: Event) -> None:
        """A turn's held event goes out (the gate released it)."""
        if isinstance(event, TurnCancelled) and event.reason == CancelReason.FAILED:
            self.metrics.set_cancelled(self.unit, event.turn_id)
        self.events.emit(event)


class _StageThread(Generic[ModelT]):
    """The thread, the downstream link, timing and error reporting of every stage."""

    #: The same failure message again within this many seconds is logged, not reported
    #: (a source stage fails per block: a broken VAD must not flood the listeners).
    QUIET_REPEATS_S = 0.0

    def __init__(self, name: str, ctx: StageContext, model: Any = None) -> None:
        # ``model`` is Any so that a stage without one may leave it out; each stage's own
        # constructor takes its model typed, and ``self.model`` is that type.
        self.name = name
        self.ctx = ctx
        self.model: ModelT = model
        self.downstream: Stage[Any] | None = None
        # The name is for people reading thread dumps; the unit of the work done in it is
        # ``ctx.compute`` (``_work``).
        self._thread = threading.Thread(target=self._work, name=f"parley-u{ctx.unit}-{name}",
                                        daemon=True)
        self._blocked_s = 0.0
        self._next_model: tuple[ModelT, threading.Event] | None = None
        self._last_report: tuple[str, float] | None = None
        self.repeats_suppressed = 0

    # ----------------------------------------------------------------- override
    def on_model(self) -> None:
        """Called in the stage thread right after it adopted a new ``self.model``."""

    def turn_of(self, what: object) -> int | None:
        """The turn a failure on ``what`` ends, or None: the turn of a segment, transcript
        or piece of reply text, except a partial segment's (the user is still speaking,
        and the turn goes on). A failure on anything else only reports."""
        if not isinstance(what, _TURN_MESSAGES):
            return None
        if isinstance(what, SpeechSegment | Transcript) and not what.final:
            return None
        return what.turn_id

    def end_failed_turn(self, turn_id: int) -> None:
        """End the turn a failure hit (see the module's docstring)."""
        self.ctx.fail_turn(turn_id)

    # ----------------------------------------------------------------- models
    def use_model(self, model: ModelT) -> threading.Event:
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
    def connect(self, downstream: Stage[Any]) -> Stage[Any]:
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

    @staticmethod
    def lock_waits_so_far() -> float:
        """Seconds the calling thread has waited so far for the MLX lock, the models'
        locks and the compute gate (a running total: two readings around some work give
        its lock waits)."""
        return waited_by_this_thread()

    def computing(self, urgency: Urgency | None = None,
                  give_up: Callable[[], bool] | None = None) -> AbstractContextManager[bool]:
        """Hold the CPU's compute gate for one call of this stage's model, where the
        model computes on the CPU (``engine.runtime.compute_gate``); else nothing. Yields
        whether the call may run: False only when ``give_up`` became true while waiting.
        ``urgency``: the call's own, where it is not the unit's."""
        if self._computes_on_cpu:
            return self.ctx.compute.hold(urgency, give_up)
        return nullcontext(True)

    def computed(self, steps: Iterator[T]) -> Iterator[T]:
        """``steps`` (a model's stream: LLM tokens, TTS chunks), each computed holding the
        compute gate where the model computes on the CPU."""
        if self._computes_on_cpu:
            return self.ctx.compute.steps(steps)
        return steps

    @property
    def _computes_on_cpu(self) -> bool:
        return self.model is not None and self.model.actual_device == "cpu"

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

    def _work(self) -> None:
        """The thread's body: ``_run``, working for the stage's unit (the model locks label
        the holds of its backends' calls with it)."""
        with self.ctx.compute.working():
            self._run()

    def _run(self) -> None:
        raise NotImplementedError

    def _forward(self, work: Callable[[], Iterator[Message]], what: object,
                 counted: bool = True) -> None:
        """Run one unit of work and emit its outputs; record its compute time (``counted``:
        as one message's, in the stage's figures); report failures. ``work`` is called
        inside the guard: an override may be a generator (which runs as it is iterated)
        or a plain function (which runs when called)."""
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
        except Exception as exc:  # noqa: BLE001 - one bad message must not kill the stage; _failed logs it
            self._failed(exc, what)
        finally:
            if counted:
                self.ctx.metrics.stage_time(self.name,
                                            time.perf_counter() - start - self._blocked_s)

    def _failed(self, exc: Exception, what: object) -> None:
        """Report a failure on ``what`` and end the turn it belongs to."""
        device = None if self.model is None else self.model.actual_device
        oom = is_out_of_memory(exc)
        if not isinstance(exc, ParleyError) or oom:
            log.error("%s stage failed on %r", self.name, what, exc_info=exc)
        if oom:
            release_cached_memory(device)
        try:
            turn = self.turn_of(what)
        except Exception:  # never let the report itself fail (logged)
            log.exception("%s: finding the failed turn", self.name)
            turn = None
        self._report(describe_failure(exc, device), turn)
        if turn is not None:
            try:
                self.end_failed_turn(turn)
            except Exception:  # the stage goes on even so (logged)
                log.exception("%s: ending turn %s after a failure", self.name, turn)

    def _report(self, message: str, turn_id: int | None = None) -> None:
        now = time.monotonic()
        last = self._last_report
        if (turn_id is None and self.QUIET_REPEATS_S and last is not None and last[0] == message
                and now - last[1] < self.QUIET_REPEATS_S):
            self.repeats_suppressed += 1
            return
        self._last_report = (message, now)
        self.ctx.events.emit(EngineError(self.ctx.unit, self.name, message, turn_id))


class Stage(_StageThread[ModelT]):
    """A stage fed by a bounded inbox: override ``process``."""

    def __init__(self, name: str, ctx: StageContext, model: Any = None, maxsize: int = 16) -> None:
        super().__init__(name, ctx, model)
        self.inbox: queue.Queue[Message] = queue.Queue(maxsize=maxsize)
        # When each message in the inbox was put (by id), and when this thread last became
        # free: together they tell how long the message waited while the stage was busy.
        self._put_at: dict[int, float] = {}
        self._free_since = 0.0
        #: Seconds the message being processed waited in the inbox while this stage was
        #: busy with earlier work (0 when the stage was idle: a plain hand-off).
        self.queue_wait_s = 0.0

    def process(self, msg: Message) -> Iterator[Message]:
        """Handle one message, yielding messages for the downstream stage."""
        raise NotImplementedError

    def on_end(self) -> None:
        """Called once when EndOfStream reaches this stage (before it is passed on)."""

    def idle(self) -> None:
        """Called in the stage thread each time its inbox stayed empty for a poll (every
        ``_POLL_S``): work that waits for a pause and yields to the next message (the LLM
        stage's history summary). Must be cheap when there is nothing to do."""

    def put(self, msg: Message) -> bool:
        """Enqueue ``msg``, waiting while the queue is full; False if the unit stops first."""
        self._put_at[id(msg)] = time.perf_counter()  # before the put: it may be taken at once
        while not self.ctx.stopping.is_set():
            try:
                self.inbox.put(msg, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        self._put_at.pop(id(msg), None)
        return False

    def queue_depth(self) -> tuple[int, int]:
        return self.inbox.qsize(), self.inbox.maxsize

    def _run(self) -> None:
        while not self.ctx.stopping.is_set():
            self.adopt_pending_model()
            try:
                msg = self.inbox.get(timeout=_POLL_S)
            except queue.Empty:
                self.idle()
                continue
            put_at = self._put_at.pop(id(msg), None)
            self.queue_wait_s = 0.0 if put_at is None else max(0.0, self._free_since - put_at)
            if isinstance(msg, EndOfStream):
                self.on_end()
                self.emit(msg)
            elif self.is_stale(msg):
                self.ctx.metrics.dropped_stale(self.name)
            else:
                self._forward(functools.partial(self.process, msg), msg)
            self._free_since = time.perf_counter()


class SourceStage(_StageThread[ModelT]):
    """The first stage: reads an AudioSource instead of an inbox; override ``process_block``.

    When a finite source ends, ``on_source_end`` may yield last messages, then
    ``EndOfStream`` follows them down the pipeline. Its queue is the source's capture
    buffer: blocks captured and not yet read. ``after_read`` runs after every read (a
    block or none), for work that must go on while the source is silent.
    """

    QUIET_REPEATS_S = 5.0

    def __init__(self, name: str, ctx: StageContext, source: AudioSource, model: Any = None) -> None:
        super().__init__(name, ctx, model)
        self.source = source

    def process_block(self, block: AudioBlock) -> Iterator[Message]:
        """Handle one captured block, yielding messages for the downstream stage."""
        raise NotImplementedError

    def on_source_end(self) -> Iterator[Message]:
        """The source delivered its last block: yield what finishes the input."""
        return iter(())

    def after_read(self) -> None:
        """Called in the stage thread after every read of the source, block or not."""

    def between_blocks_s(self) -> float | None:
        """None: a read waits up to ``_POLL_S`` for the next block. A number: something
        may be due before the next block (a decision other threads feed); reads wait at
        most that long, and ``between_blocks`` runs after each one that got no block."""
        return None

    def between_blocks(self) -> Iterator[Message]:
        """A read got no block while ``between_blocks_s`` asked for it: yield what is due."""
        return iter(())

    def queue_depth(self) -> tuple[int, int]:
        return self.source.buffered_blocks, self.source.buffer_capacity

    def _run(self) -> None:
        try:
            while not self.ctx.stopping.is_set():
                self.adopt_pending_model()
                poll_s = self.between_blocks_s()
                block = self.source.read(_POLL_S if poll_s is None else poll_s)
                try:
                    self.after_read()
                except Exception:  # housekeeping must not end the input (logged)
                    log.exception("%s: after_read failed", self.name)
                if block is None:
                    if self.source.finished:
                        break
                    if poll_s is not None:  # a look every few ms, not a message
                        self._forward(self.between_blocks, "the wait for the next block",
                                      counted=False)
                    continue
                self._forward(functools.partial(self.process_block, block), block)
            if not self.ctx.stopping.is_set():
                self._forward(self.on_source_end, "the end of the input")
        except Exception as exc:  # a failing source is reported (logged); the unit drains
            log.exception("%s: reading the audio source failed", self.name)
            self._report(describe_failure(exc))
        self.emit(EndOfStream(0, self.ctx.control.generation))
