"""Who computes next on the CPU when several pipeline units want it.

Four conversations on a two-core CPU whose turns end together: if all four compute at
once, every model call runs beside the others (CTranslate2's threads, onnxruntime's and
Piper's on the same two cores) and each reply's first audio comes at ~4x the work of one
reply. Served one at a time, the earliest-ended turn first, they come at 1x, 2x, 3x and
4x: the same work, the median reply at 2.5x instead of 4x, and no two runtimes'
thread pools fighting over the cores.

Each CPU model call of a stage (a transcription, an LLM token, a TTS chunk, a Smart Turn
score) holds the gate. A free place goes to the waiting call whose unit is most urgent
(``Urgency``), then whose unit declared it earliest (its user stopped speaking first),
then the one that came first. The stages declare their unit's urgency as its turn moves
on (``set_urgency``); a call may name its own (live transcription is always
``LISTENING``, whatever the unit is at). A unit's stages reach the gate through its
``UnitCompute``, the handle bound to the unit's number. A unit's chain (STT, then the LLM's tokens, then
TTS) hands the CPU from call to call: for ``HANDOFF_S`` after a call ends, only the
same unit or a more urgent one may take its place, so an equally urgent but later unit
cannot slip in between two tokens. An uncontended hold costs a few microseconds; a
machine with more cores gets more places (``cpu_slots``). Models on a GPU or a remote
service do not take the gate.

There is no gate at import time: ``get_compute_gate()`` creates the process's on first
use, and ``set_compute_gate()`` injects another (tests).
"""

from __future__ import annotations

import enum
import inspect
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

from engine.runtime.mlx_lock import add_wait_of_this_thread, working_for

T = TypeVar("T")

#: Cores one model call keeps busy (CTranslate2 and onnxruntime run up to 4 threads here).
CORES_PER_CALL = 4
#: How long a place stays the unit's after its call ends: the next call of its chain (the
#: next token, the next stage's first call) comes within a few milliseconds.
HANDOFF_S = 0.01
#: How often a waiter that may give up asks, besides whenever the gate changes.
GIVE_UP_POLL_S = 0.05


class Urgency(enum.IntEnum):
    """How soon a unit's work is needed; lower is served first."""

    #: The user's turn ended (or may have: the speculative start) and its reply's first
    #: audio is not made yet: someone is waiting in silence.
    FIRST_AUDIO = 0
    #: The rest of a reply whose first audio is out, a typed turn; what a unit is at first.
    REPLY = 1
    #: The user is speaking: live transcription, which a later partial replaces anyway.
    LISTENING = 2


@dataclass(frozen=True, slots=True, order=True)
class _Standing:
    """Where a unit stands in the queue: lower is served first."""

    urgency: Urgency
    since: float  # earlier is served first within one urgency


@dataclass(frozen=True, slots=True)
class _Waiter:
    unit: int | None
    urgency: Urgency | None  # the call's own, else its unit's
    requested: float


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def threads_per_call() -> int:
    """The threads one CPU model call should use (CTranslate2, onnxruntime, Piper): the
    call has the cores to itself, up to ``CORES_PER_CALL``; more only adds contention."""
    return max(1, min(cpu_cores(), CORES_PER_CALL))


def cpu_slots() -> int:
    """How many model calls may run at once on this CPU: one per ``CORES_PER_CALL`` cores."""
    return max(1, cpu_cores() // CORES_PER_CALL)


class ComputeGate:
    """A re-entrant gate with ``slots`` places, served by urgency; thread-safe."""

    def __init__(self, slots: int = 1, clock: Callable[[], float] = time.perf_counter,
                 handoff_s: float = HANDOFF_S) -> None:
        if slots < 1:
            raise ValueError(f"a compute gate needs at least 1 slot, not {slots}")
        self.slots = slots
        self._clock = clock
        self._handoff_s = handoff_s
        self._cond = threading.Condition()
        self._free = slots
        self._standing: dict[int, _Standing] = {}
        self._waiting: dict[int, _Waiter] = {}  # by ticket: arrival order
        self._tickets = itertools.count()
        self._handoffs: dict[int, float] = {}  # unit -> until when its place stays its
        self._holders: list[int | None] = []  # the unit of each call holding a place
        self._depth = threading.local()

    def set_urgency(self, unit: int, urgency: Urgency, since: float | None = None) -> None:
        """``unit``'s work is now this urgent; ``since`` (default: now) orders it among
        units of the same urgency, earliest first. Takes effect for calls still waiting."""
        with self._cond:
            self._standing[unit] = _Standing(urgency, self._clock() if since is None else since)
            self._cond.notify_all()

    def urgency(self, unit: int) -> Urgency:
        """What ``unit`` declared last (``Urgency.REPLY`` before anything)."""
        with self._cond:
            return self._standing_of(unit).urgency

    def sharing(self, urgency: Urgency) -> float:
        """Units standing at ``urgency`` per place of the gate, at least 1: work each of
        them repeats at a steady rate (live transcription) spaced out by this much keeps
        the gate as busy as one unit's would."""
        with self._cond:
            standing = sum(s.urgency is urgency for s in self._standing.values())
        return max(1.0, standing / self.slots)

    def others_ahead(self, unit: int) -> bool:
        """Whether another unit more urgent than ``unit`` computes or waits to: this
        unit's calls then wait for it."""
        with self._cond:
            mine = self._standing_of(unit)
            busy = {*self._holders, *(w.unit for w in self._waiting.values())} - {unit, None}
            return any(self._standing_of(other) < mine for other in busy)

    @contextmanager
    def hold(self, unit: int | None = None, urgency: Urgency | None = None,
             give_up: Callable[[], bool] | None = None) -> Iterator[bool]:
        """Hold a place for one model call of ``unit`` (None: no unit's, an HTTP request;
        a unit's calls go through its ``UnitCompute``), as urgent as the unit is, or as
        ``urgency`` where given; yields
        True. ``give_up``: asked while waiting; once it is true the wait ends without the
        place and this yields False (work that went stale in the queue, such as a
        partial transcription the final one replaced, must not hold up its stage). The
        time spent waiting counts as a lock wait of this thread."""
        depth = getattr(self._depth, "n", 0)
        if depth:  # re-entry by a holder is free
            self._depth.n = depth + 1
            try:
                yield True
            finally:
                self._depth.n -= 1
            return
        if not self._acquire(_Waiter(unit, urgency, self._clock()), give_up):
            yield False
            return
        self._depth.n = 1
        try:
            yield True
        finally:
            self._depth.n = 0
            self._release(unit)

    def steps(self, iterator: Iterator[T], unit: int | None = None) -> Iterator[T]:
        """``iterator``'s items, each computed holding the gate (an LLM's tokens, a TTS
        voice's chunks): between two items, a more urgent unit goes first."""
        finished = False
        try:
            while True:
                with self.hold(unit):
                    item = next(iterator, _END)
                if item is _END:
                    finished = True
                    return
                yield item  # type: ignore[misc]
        finally:
            # Left early (a break, a cut-off reply): its clean-up computes too. A stream
            # that ended or raised has nothing left to run.
            if (not finished and isinstance(iterator, Generator)
                    and inspect.getgeneratorstate(iterator) != inspect.GEN_CLOSED):
                with self.hold(unit):
                    iterator.close()

    # ------------------------------------------------------------------ internals
    def _standing_of(self, unit: int | None) -> _Standing:
        return self._standing.get(unit, _UNDECLARED) if unit is not None else _UNDECLARED

    def _rank(self, ticket: int, waiter: _Waiter) -> tuple[_Standing, int]:
        standing = self._standing_of(waiter.unit)
        if waiter.urgency is not None and waiter.urgency != standing.urgency:
            return _Standing(waiter.urgency, waiter.requested), ticket
        if standing.since == math.inf:  # undeclared: by arrival
            standing = _Standing(standing.urgency, waiter.requested)
        return standing, ticket

    def _may_take(self, ticket: int, waiter: _Waiter, now: float) -> bool:
        """Whether a free place may go to this waiter: places just given back by other
        units that outrank it stay theirs for a moment (``HANDOFF_S``)."""
        standing = self._rank(ticket, waiter)[0]
        kept = sum(standing >= self._standing_of(unit) for unit, until in self._handoffs.items()
                   if unit != waiter.unit and until > now)
        return self._free > kept

    def _acquire(self, waiter: _Waiter, give_up: Callable[[], bool] | None) -> bool:
        with self._cond:
            ticket = next(self._tickets)
            self._waiting[ticket] = waiter
            try:
                while True:
                    now = self._clock()
                    self._handoffs = {u: t for u, t in self._handoffs.items() if t > now}
                    if self._first() == ticket and self._may_take(ticket, waiter, now):
                        break
                    if give_up is not None and give_up():
                        self._cond.notify_all()  # the waiter behind it may be first now
                        return False
                    wake = [until - now for until in self._handoffs.values()]
                    if give_up is not None:
                        wake.append(GIVE_UP_POLL_S)
                    self._cond.wait(min(wake) if wake else None)
            finally:
                del self._waiting[ticket]
            self._free -= 1
            self._holders.append(waiter.unit)
            if waiter.unit is not None:
                self._handoffs.pop(waiter.unit, None)
            self._cond.notify_all()  # the next waiter may take another free place
        add_wait_of_this_thread(self._clock() - waiter.requested)
        return True

    def _release(self, unit: int | None) -> None:
        with self._cond:
            self._free += 1
            self._holders.remove(unit)
            if unit is not None and self._handoff_s > 0:
                self._handoffs[unit] = self._clock() + self._handoff_s
            self._cond.notify_all()

    def _first(self) -> int:
        """The waiting ticket served next: the best ``_rank``."""
        return min(self._waiting, key=lambda ticket: self._rank(ticket, self._waiting[ticket]))


@dataclass(frozen=True, slots=True)
class UnitCompute:
    """One pipeline unit's handle on the CPU's compute gate, owned by its ``StageContext``:
    its calls wait as urgently as the unit declared (``set_urgency``), whichever thread
    makes them. The gate is the process's at each call (``set_compute_gate``)."""

    unit: int

    def hold(self, urgency: Urgency | None = None,
             give_up: Callable[[], bool] | None = None) -> AbstractContextManager[bool]:
        """``ComputeGate.hold`` for one model call of this unit."""
        return get_compute_gate().hold(self.unit, urgency, give_up)

    def steps(self, iterator: Iterator[T]) -> Iterator[T]:
        """``ComputeGate.steps`` for this unit's stream (LLM tokens, TTS chunks)."""
        return get_compute_gate().steps(iterator, self.unit)

    def set_urgency(self, urgency: Urgency, since: float | None = None) -> None:
        """This unit's work is now this urgent (``ComputeGate.set_urgency``)."""
        get_compute_gate().set_urgency(self.unit, urgency, since)

    @property
    def urgency(self) -> Urgency:
        """What this unit declared last (``Urgency.REPLY`` before anything)."""
        return get_compute_gate().urgency(self.unit)

    def others_ahead(self) -> bool:
        """Whether another, more urgent unit computes or waits to (``ComputeGate.others_ahead``)."""
        return get_compute_gate().others_ahead(self.unit)

    def working(self) -> AbstractContextManager[None]:
        """Run this unit's work inside: the model locks label the holds of code that does
        not name its unit with this one (``mlx_lock.working_for``: a backend's model call
        is not given the unit, which would widen every backend's signature)."""
        return working_for(self.unit)


_UNDECLARED = _Standing(Urgency.REPLY, math.inf)
_END = object()
_default: ComputeGate | None = None
_default_guard = threading.Lock()


def get_compute_gate() -> ComputeGate:
    """The process's gate for CPU model calls, created on first use."""
    global _default
    with _default_guard:
        if _default is None:
            _default = ComputeGate(cpu_slots())
        return _default


def set_compute_gate(gate: ComputeGate | None) -> ComputeGate | None:
    """Install ``gate`` as the process's (None: a fresh one on next use); returns the old."""
    global _default
    with _default_guard:
        old, _default = _default, gate
    return old
