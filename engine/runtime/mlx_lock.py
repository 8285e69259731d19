"""The process-wide, instrumented MLX lock.

MLX streams are bound to the thread that made them and MLX does not synchronize work
from several threads, so every MLX call in Parley (model loads, Whisper decoding, each
LLM token step) runs inside this one re-entrant lock::

    from engine.runtime import mlx_lock
    with mlx_lock.hold("stt", unit=0):
        ...

The lock records what the GUI's lock meter shows: acquisitions, contended acquisitions
(another thread held it), wait and hold times (p50, p95, max, total), the current
holder and since when, and utilization (share of time held over the last ``window_s``
seconds). Slow waits and long holds log one aggregated warning line per interval.

The bookkeeping is O(1) per acquisition (running totals, bounded deques); percentiles
and utilization are computed only in ``snapshot()``. An uncontended acquire+release
costs a few microseconds (see tests/runtime/test_mlx_lock.py's micro-benchmark).

There is no lock object at import time: ``get_mlx_lock()`` creates the default on first
use, and ``set_mlx_lock()`` injects another (tests, or an engine with its own).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from engine.errors import ParleyError
from engine.runtime.stats import percentile

log = logging.getLogger(__name__)
# The pipeline unit whose work the running code does (``working_for``): a context variable,
# not a parameter, so that a backend labels its holds without every model call taking it.
_working_unit: ContextVar[int | None] = ContextVar("parley_working_unit", default=None)


class MlxLockTimeout(ParleyError):
    """The MLX lock was not acquired in time; the message names who held it and how long."""

    def __init__(self, message: str, holder: LockHolder | None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds the lock: the stage (``stt``, ``llm``...), its pipeline unit, since when."""

    stage: str
    unit: int | None
    since: float  # clock() time at which it was acquired
    thread: str

    def describe(self, now: float) -> str:
        """``stt (unit 0) for 1.23 s``."""
        who = self.stage if self.unit is None else f"{self.stage} (unit {self.unit})"
        return f"{who} for {now - self.since:.2f} s"


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """One outermost acquisition, kept only when the lock traces (``trace=N``)."""

    stage: str
    unit: int | None
    thread: int
    requested: float  # when acquire() was called
    acquired: float
    released: float
    contended: bool

    @property
    def wait(self) -> float:
        return self.acquired - self.requested

    @property
    def hold(self) -> float:
        return self.released - self.acquired


@dataclass(frozen=True, slots=True)
class StageLockStats:
    """Lock totals of one stage (all its units)."""

    stage: str
    acquisitions: int
    contended: int
    wait_total: float
    hold_total: float


@dataclass(frozen=True, slots=True)
class MlxLockSnapshot:
    """The lock's figures at one instant, for the GUI. Times are in seconds.

    Counts, maxima and totals cover every completed hold since creation or
    ``reset_stats()`` (a hold in progress shows as ``holder`` and in ``utilization``);
    percentiles cover the most recent ``samples`` holds (uncontended ones wait 0).
    """

    t: float
    acquisitions: int
    contended: int
    timeouts: int
    wait_p50: float
    wait_p95: float
    wait_max: float
    wait_total: float
    hold_p50: float
    hold_p95: float
    hold_max: float
    hold_total: float
    holder: LockHolder | None
    utilization: float  # 0..1: share of the last window_s seconds the lock was held
    window_s: float
    stages: tuple[StageLockStats, ...] = ()

    @property
    def contention_ratio(self) -> float:
        """Share of acquisitions that had to wait for another thread."""
        return self.contended / self.acquisitions if self.acquisitions else 0.0

    @property
    def held_for(self) -> float:
        """How long the current holder has held the lock (0 when free)."""
        return self.t - self.holder.since if self.holder else 0.0


def _holder_of(held: tuple | None) -> LockHolder | None:
    if held is None:
        return None
    stage, unit, _requested, since, ident, _contended = held
    name = next((t.name for t in threading.enumerate() if t.ident == ident), str(ident))
    return LockHolder(stage, unit, since, name)


class _SlowLog:
    """Aggregates slow events into at most one warning per ``interval`` seconds."""

    __slots__ = ("what", "threshold", "interval", "count", "worst", "worst_by", "last_emit",
                 "since", "lock_name")

    def __init__(self, what: str, threshold: float, interval: float,
                 lock_name: str = "MLX lock") -> None:
        self.what = what
        self.lock_name = lock_name
        self.threshold = threshold
        self.interval = interval
        self.count = 0
        self.worst = 0.0
        self.worst_by = ""
        self.last_emit: float | None = None
        self.since = 0.0

    def note(self, seconds: float, stage: str, unit: int | None, now: float) -> None:
        if self.count == 0:
            self.since = now
        self.count += 1
        if seconds >= self.worst:
            self.worst = seconds
            self.worst_by = stage if unit is None else f"{stage} (unit {unit})"

    def due(self, now: float) -> str | None:
        """The aggregated line if one is pending and the interval has passed, else None."""
        if self.count == 0 or (self.last_emit is not None and now - self.last_emit < self.interval):
            return None
        span = now - (self.last_emit if self.last_emit is not None else self.since)
        if self.count == 1:
            line = (f"{self.lock_name}: 1 {self.what[:-1]} (>= {self.threshold * 1e3:.0f} ms): "
                    f"{self.worst * 1e3:.0f} ms by {self.worst_by}")
        else:
            line = (f"{self.lock_name}: {self.count} {self.what} (>= {self.threshold * 1e3:.0f} ms) in "
                    f"the last {max(span, 0.0):.1f} s, worst {self.worst * 1e3:.0f} ms by "
                    f"{self.worst_by}")
        self.count, self.worst, self.worst_by, self.last_emit = 0, 0.0, "", now
        return line


class _Hold:
    """The context manager ``MlxLock.hold()`` returns (a class: cheaper than a generator)."""

    __slots__ = ("_lock", "_stage", "_unit", "_timeout")

    def __init__(self, lock: MlxLock, stage: str, unit: int | None, timeout: float | None) -> None:
        self._lock = lock
        self._stage = stage
        self._unit = unit
        self._timeout = timeout

    def __enter__(self) -> MlxLock:
        self._lock.acquire(self._stage, self._unit, self._timeout)
        return self._lock

    def __exit__(self, *exc) -> None:
        self._lock.release()


class MlxLock:
    """A re-entrant lock that measures itself. Re-entry by the holder is free and uncounted.

    ``slow_wait_s`` / ``slow_hold_s``: waits and holds at or above these are logged, at
    most one line per kind every ``warn_interval_s``. ``samples``: how many recent
    acquisitions the percentiles cover. ``trace``: keep the last N ``HoldRecord``s
    (0: none; tests use it to check that holds never overlap). ``clock`` is injectable
    for tests; it must be monotonic.
    """

    def __init__(self, *, window_s: float = 5.0, slow_wait_s: float = 0.25,
                 slow_hold_s: float = 2.0, warn_interval_s: float = 10.0, samples: int = 2048,
                 trace: int = 0, clock: Callable[[], float] = time.perf_counter,
                 logger: logging.Logger | None = None, guarded: bool = True,
                 name: str = "MLX lock") -> None:
        self.window_s = window_s
        self._clock = clock
        self._log = logger or log
        self._mutex = threading.Lock()
        self._stats = threading.Lock()  # guards the figures; never held while waiting
        self._samples = samples
        self._trace_len = trace
        self._slow_wait = _SlowLog("slow waits", slow_wait_s, warn_interval_s, name)
        self._slow_hold = _SlowLog("long holds", slow_hold_s, warn_interval_s, name)
        # Ownership: written only by the owning thread while it holds the mutex.
        self._owner: int | None = None
        self._depth = 0
        # (stage, unit, requested, acquired, thread ident, contended) of the current holder
        self._held: tuple | None = None
        self.reset_stats()
        if guarded:  # an MLX lock: holding it is what the MLX guard checks for
            with _registry_guard:
                _all_locks.add(self)

    # ------------------------------------------------------------------ locking
    def hold(self, stage: str, unit: int | None = None, timeout: float | None = None) -> _Hold:
        """A context manager holding the lock for ``stage`` of pipeline ``unit`` (None:
        the unit whose work the caller does, ``working_for``, if any).

        ``timeout`` (seconds, None: wait forever) raises MlxLockTimeout naming the holder.
        """
        return _Hold(self, stage, unit, timeout)

    def acquire(self, stage: str, unit: int | None = None, timeout: float | None = None) -> None:
        """Take the lock (re-entrant); prefer ``hold()``. Raises MlxLockTimeout on timeout."""
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        if unit is None:
            unit = _working_unit.get()
        mutex = self._mutex
        if mutex.acquire(False):
            now = self._clock()
            self._held = (stage, unit, now, now, me, False)
        else:
            requested = self._clock()
            got = mutex.acquire(True, -1 if timeout is None else max(0.0, timeout))
            now = self._clock()
            add_wait_of_this_thread(now - requested)
            if not got:
                self._timed_out(stage, unit, timeout, now)
            self._held = (stage, unit, requested, now, me, True)
        # A plain tuple, and the figures recorded once at release: this path must stay
        # a few microseconds (a frozen dataclass alone costs ~1 us to build).
        self._owner = me
        self._depth = 1

    def release(self) -> None:
        """Release one level; the outermost release frees the lock and records the hold."""
        if self._owner != threading.get_ident():
            raise RuntimeError("MLX lock released by a thread that does not hold it")
        if self._depth > 1:
            self._depth -= 1
            return
        now = self._clock()
        if self._held is None:  # the owner is set with the holder's record, under the mutex
            raise RuntimeError("MLX lock released with no holder recorded")
        stage, unit, requested, since, owner, contended = self._held
        waited = since - requested
        held = now - since
        lines = None
        with self._stats:
            self._acquisitions += 1
            self._waits.append(waited)
            self._holds.append(held)
            self._wait_total += waited
            self._hold_total += held
            if waited > self._wait_max:
                self._wait_max = waited
            if held > self._hold_max:
                self._hold_max = held
            per = self._per_stage.get(stage)
            if per is None:
                per = self._per_stage[stage] = [0, 0, 0.0, 0.0]
            per[0] += 1
            per[2] += waited
            per[3] += held
            if contended:
                self._contended += 1
                per[1] += 1
                if waited >= self._slow_wait.threshold:
                    self._slow_wait.note(waited, stage, unit, since)
            self._intervals.append((since, now))
            if held >= self._slow_hold.threshold:
                self._slow_hold.note(held, stage, unit, now)
            if self._trace is not None:
                self._trace.append(HoldRecord(stage, unit, owner, requested, since, now, contended))
            if self._slow_wait.count or self._slow_hold.count:
                lines = self._due_lines(now)
            self._held = None
        self._depth = 0
        self._owner = None
        self._mutex.release()
        if lines:  # logged after releasing: writing a log line is no MLX work
            for line in lines:
                self._log.warning(line)

    def held_by_current_thread(self) -> bool:
        """True when the calling thread holds the lock (used by the MLX guard)."""
        return self._owner == threading.get_ident()

    @property
    def holder(self) -> LockHolder | None:
        """The current holder, or None when the lock is free."""
        return _holder_of(self._held)

    def _timed_out(self, stage: str, unit: int | None, timeout: float | None, now: float) -> None:
        holder = self.holder
        with self._stats:
            self._timeouts += 1
        who = stage if unit is None else f"{stage} (unit {unit})"
        held = (f"held by {holder.describe(now)} (thread {holder.thread})" if holder
                else "it was released just as the wait ended")
        raise MlxLockTimeout(f"MLX lock not acquired by {who} within {timeout:.2f} s: {held}",
                             holder)

    # ------------------------------------------------------------------ figures
    def reset_stats(self) -> None:
        """Forget every figure (not the current holder)."""
        with self._stats:
            self._acquisitions = 0
            self._contended = 0
            self._timeouts = 0
            self._waits: deque[float] = deque(maxlen=self._samples)
            self._holds: deque[float] = deque(maxlen=self._samples)
            self._wait_total = self._wait_max = 0.0
            self._hold_total = self._hold_max = 0.0
            self._per_stage: dict[str, list] = {}
            # Enough intervals to cover the window at thousands of holds per second.
            self._intervals: deque[tuple[float, float]] = deque(maxlen=max(1024, self._samples * 4))
            self._trace: deque[HoldRecord] | None = (deque(maxlen=self._trace_len)
                                                     if self._trace_len else None)

    def trace(self) -> list[HoldRecord]:
        """The recorded holds, oldest first (empty unless made with ``trace=N``)."""
        with self._stats:
            return list(self._trace or ())

    def snapshot(self) -> MlxLockSnapshot:
        """The figures now; never waits for the MLX lock itself. Flushes due warnings."""
        now = self._clock()
        with self._stats:
            # Read under the stats lock: release() clears it there together with recording
            # the hold, so the holder and the figures always agree.
            holder = _holder_of(self._held)
            waits = list(self._waits)
            holds = list(self._holds)
            utilization = self._utilization(now, holder)
            stages = tuple(StageLockStats(s, p[0], p[1], p[2], p[3])
                           for s, p in sorted(self._per_stage.items()))
            snap = MlxLockSnapshot(
                t=now, acquisitions=self._acquisitions, contended=self._contended,
                timeouts=self._timeouts,
                # engine.runtime.stats.percentile is None before the first hold: the meter shows 0.
                wait_p50=percentile(waits, 50) or 0.0, wait_p95=percentile(waits, 95) or 0.0,
                wait_max=self._wait_max, wait_total=self._wait_total,
                hold_p50=percentile(holds, 50) or 0.0, hold_p95=percentile(holds, 95) or 0.0,
                hold_max=self._hold_max, hold_total=self._hold_total,
                holder=holder, utilization=utilization, window_s=self.window_s, stages=stages)
            lines = self._due_lines(now)
        for line in lines:
            self._log.warning(line)
        return snap

    def _utilization(self, now: float, holder: LockHolder | None) -> float:
        start = now - self.window_s
        intervals = self._intervals
        while intervals and intervals[0][1] <= start:
            intervals.popleft()
        if len(intervals) == intervals.maxlen:
            # Older holds inside the window were dropped: measure over what is kept.
            start = max(start, intervals[0][0])
        span = now - start
        if span <= 0:
            return 0.0
        held = sum(end - max(begin, start) for begin, end in intervals)
        if holder is not None:
            held += now - max(holder.since, start)
        return min(1.0, held / span)

    def _due_lines(self, now: float) -> list[str]:
        return [line for line in (self._slow_wait.due(now), self._slow_hold.due(now)) if line]


_default: MlxLock | None = None
_default_guard = threading.Lock()
# Per thread: seconds waited on contended acquisitions of any MlxLock (MLX or model lock),
# so a stage can tell what part of one turn's work was waiting (``waited_by_this_thread``).
_waits = threading.local()


def waited_by_this_thread() -> float:
    """Seconds the calling thread has waited so far for any ``MlxLock`` held by another
    thread (the MLX lock and every model lock; uncontended acquisitions add nothing).
    A running total: the difference of two readings is the wait in between."""
    return getattr(_waits, "seconds", 0.0)


def add_wait_of_this_thread(seconds: float) -> None:
    """Count ``seconds`` the calling thread waited for another shared resource (the
    compute gate) in ``waited_by_this_thread``: the budget's lock waits include it."""
    _waits.seconds = getattr(_waits, "seconds", 0.0) + seconds


_registry_guard = threading.Lock()
_all_locks: weakref.WeakSet[MlxLock] = weakref.WeakSet()  # for the guard's "any lock" check


def model_lock(name: str) -> MlxLock:
    """An instrumented lock for one model that is not safe to call from two threads at
    once (a shared torch model): the same figures as the MLX lock, for the pool's report.
    It is no MLX lock: the MLX guard does not count holding it. ``name`` labels its log
    lines ("llm model lock")."""
    return MlxLock(guarded=False, name=name)


def get_mlx_lock() -> MlxLock:
    """The process-wide MLX lock, created on first use."""
    global _default
    lock = _default
    if lock is None:
        with _default_guard:
            if _default is None:
                _default = MlxLock()
            lock = _default
    return lock


def set_mlx_lock(lock: MlxLock | None) -> MlxLock | None:
    """Install ``lock`` as the process-wide one (None: a fresh one on next use); returns the old.

    Models keep the lock they were loaded with, so set it before loading MLX models.
    """
    global _default
    with _default_guard:
        old, _default = _default, lock
    return old


def hold(stage: str, unit: int | None = None, timeout: float | None = None) -> _Hold:
    """``with mlx_lock.hold("stt", unit=0): ...`` on the process-wide lock."""
    return get_mlx_lock().hold(stage, unit, timeout)


def held_by_current_thread() -> bool:
    """True when the calling thread holds any MlxLock (the guard's default check)."""
    with _registry_guard:
        locks = list(_all_locks)
    return any(lock.held_by_current_thread() for lock in locks)


def working_unit() -> int | None:
    """The pipeline unit whose work the calling code does (``working_for``), else None."""
    return _working_unit.get()


@contextmanager
def working_for(unit: int) -> Iterator[None]:
    """Code run inside works for pipeline ``unit``: the holds of every ``MlxLock`` that do
    not name a unit are labelled with it. A stage's worker runs its unit's work inside
    this; a new thread starts outside any unit."""
    token = _working_unit.set(unit)
    try:
        yield
    finally:
        _working_unit.reset(token)
