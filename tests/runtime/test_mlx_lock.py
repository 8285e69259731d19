"""The instrumented MLX lock: exclusion, figures, timeouts, warnings, cost, and the guard."""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
import timeit

import pytest

from engine.runtime import mlx_lock
from engine.backends import mlx_guard
from engine.errors import ParleyError
from engine.runtime.mlx_lock import MlxLock, MlxLockTimeout


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _join_all(threads: list[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running (deadlock?): {stuck}"


def _assert_no_overlap(records) -> None:
    ordered = sorted(records, key=lambda r: r.acquired)
    for before, after in itertools.pairwise(ordered):
        assert after.acquired >= before.released, (
            f"{after.stage}/{after.unit} entered at {after.acquired} before "
            f"{before.stage}/{before.unit} left at {before.released}")


def test_default_lock_is_lazy_shared_and_injectable():
    old = mlx_lock.set_mlx_lock(None)
    try:
        first = mlx_lock.get_mlx_lock()
        assert mlx_lock.get_mlx_lock() is first
        mine = MlxLock()
        assert mlx_lock.set_mlx_lock(mine) is first
        with mlx_lock.hold("stt", unit=0):
            assert mine.holder.stage == "stt" and mine.holder.unit == 0
            assert first.holder is None
        assert mine.snapshot().acquisitions == 1
    finally:
        mlx_lock.set_mlx_lock(old)


def test_reentrant_holds_count_once_and_record_the_holder():
    clock = FakeClock()
    lock = MlxLock(clock=clock)
    with lock.hold("llm", unit=2):
        clock.now += 1.0
        with lock.hold("stt", unit=0):  # the holder re-entering: no new hold, no contention
            clock.now += 0.5
            inner = lock.snapshot()
        assert inner.holder.stage == "llm" and inner.holder.unit == 2
        assert inner.holder.since == 100.0 and inner.held_for == pytest.approx(1.5)
        clock.now += 0.5
    snap = lock.snapshot()
    assert snap.acquisitions == 1 and snap.contended == 0 and snap.holder is None
    assert snap.hold_total == pytest.approx(2.0) and snap.hold_max == pytest.approx(2.0)
    assert [s.stage for s in snap.stages] == ["llm"]


def test_utilization_over_the_window_and_recent_percentiles():
    clock = FakeClock()
    lock = MlxLock(clock=clock, window_s=5.0, samples=8)
    clock.now += 10.0
    with lock.hold("stt"):  # 2 s held out of the last 5 s
        clock.now += 2.0
    clock.now += 3.0
    assert lock.snapshot().utilization == pytest.approx(0.4)
    for _ in range(8):  # percentiles cover the last 8 holds only; max covers all
        with lock.hold("llm"):
            clock.now += 0.01
    snap = lock.snapshot()
    assert snap.hold_p95 == pytest.approx(0.01) and snap.hold_max == pytest.approx(2.0)
    clock.now += 100.0
    with lock.hold("llm"):  # a hold in progress counts up to now
        clock.now += 2.5
        assert lock.snapshot().utilization == pytest.approx(0.5)


def test_timeout_error_names_the_holder_and_how_long():
    lock = MlxLock()
    taken, done = threading.Event(), threading.Event()

    def holder():
        with lock.hold("stt", unit=0):
            taken.set()
            done.wait(10)

    thread = threading.Thread(target=holder, name="parley-u0-stt")
    thread.start()
    try:
        assert taken.wait(10)
        time.sleep(0.05)
        with pytest.raises(MlxLockTimeout) as caught:
            with lock.hold("llm", unit=1, timeout=0.1):
                pytest.fail("acquired a lock another thread holds")
    finally:
        done.set()
        _join_all([thread], 10)
    message = str(caught.value)
    assert isinstance(caught.value, ParleyError)
    assert "llm (unit 1)" in message and "within 0.10 s" in message
    assert "held by stt (unit 0) for" in message and "parley-u0-stt" in message
    held_for = float(message.split(" for ")[1].split(" s")[0])
    assert held_for >= 0.15
    assert caught.value.holder.stage == "stt"
    snap = lock.snapshot()
    assert snap.timeouts == 1 and snap.acquisitions == 1 and snap.holder is None


def test_slow_holds_warn_once_per_interval_aggregated(caplog):
    clock = FakeClock()
    lock = MlxLock(clock=clock, slow_hold_s=0.1, warn_interval_s=10.0)
    caplog.set_level(logging.WARNING, logger="engine.runtime.mlx_lock")
    for i, seconds in enumerate((0.5, 0.2, 0.9, 0.3, 0.05)):
        with lock.hold("llm", unit=i % 2):
            clock.now += seconds
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["MLX lock: 1 long hold (>= 100 ms): 500 ms by llm (unit 0)"]
    clock.now += 10.0
    with lock.hold("stt", unit=3):
        clock.now += 0.4
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[1].startswith("MLX lock: 4 long holds (>= 100 ms) in the last ")
    assert lines[1].endswith("worst 900 ms by llm (unit 0)")
    clock.now += 1.0
    lock.snapshot()  # nothing pending: no line
    assert len(caplog.records) == 2


def test_slow_wait_is_logged_after_release(caplog):
    lock = MlxLock(slow_wait_s=0.1, warn_interval_s=10.0)
    caplog.set_level(logging.WARNING, logger="engine.runtime.mlx_lock")
    taken = threading.Event()

    def hog():
        with lock.hold("stt", unit=0):
            taken.set()
            time.sleep(0.3)

    thread = threading.Thread(target=hog)
    thread.start()
    assert taken.wait(10)
    with lock.hold("llm", unit=1):
        pass
    _join_all([thread], 10)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("MLX lock: 1 slow wait (>= 100 ms): ")
    assert lines[0].endswith("ms by llm (unit 1)")
    snap = lock.snapshot()
    assert snap.contended == 1 and snap.wait_max >= 0.2


def test_stress_eight_threads_no_overlap_no_deadlock():
    import mlx.core as mx

    lock = MlxLock(trace=10_000)
    per_thread, errors, raised = 150, [], []

    def worker(unit: int) -> None:
        rng = random.Random(unit)
        for i in range(per_thread):
            try:
                with lock.hold("stt" if unit % 2 else "llm", unit=unit, timeout=30):
                    x = mx.full((16, 16), float(i)) @ mx.ones((16, 16))
                    if rng.random() < 0.2:
                        with lock.hold("nested", unit=unit):  # re-entry: not a new hold
                            mx.eval(x)
                    if rng.random() < 0.1:
                        raise KeyError(i)
                    assert x.sum().item() == 16 * 16 * 16 * i
            except KeyError:
                raised.append(unit)
            except BaseException as exc:  # noqa: BLE001 - reported to the main thread
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(u,), name=f"parley-u{u}-w") for u in range(8)]
    for thread in threads:
        thread.start()
    _join_all(threads, 120)
    assert not errors, errors
    assert raised, "no hold raised inside the lock: the test lost its point"
    snap = lock.snapshot()
    assert snap.holder is None
    assert snap.acquisitions == 8 * per_thread and snap.timeouts == 0
    assert {s.stage for s in snap.stages} == {"stt", "llm"}
    assert snap.contended > 0
    records = lock.trace()
    assert len(records) == snap.acquisitions
    _assert_no_overlap(records)
    assert sum(r.wait for r in records) == pytest.approx(snap.wait_total, abs=1e-6)
    assert sum(r.hold for r in records) == pytest.approx(snap.hold_total, abs=1e-6)
    with lock.hold("check", timeout=0):  # free: taken at once from this thread
        pass


def test_uncontended_acquire_release_costs_microseconds(capsys):
    lock = MlxLock()

    def one():
        with lock.hold("stt", 0):
            pass

    n = 20_000
    cost = min(timeit.repeat(one, number=n, repeat=9)) / n
    with capsys.disabled():
        print(f"\nMLX lock uncontended acquire+release: {cost * 1e6:.2f} us")
    assert cost < 5e-6, f"uncontended hold costs {cost * 1e6:.2f} us (target < 5 us)"


def test_release_by_another_thread_is_an_error():
    lock = MlxLock()
    with lock.hold("stt"):
        failures = []

        def release_from_another_thread() -> None:
            with pytest.raises(RuntimeError) as caught:
                lock.release()
            failures.append(caught.value)

        thread = threading.Thread(target=release_from_another_thread)
        thread.start()
        _join_all([thread], 10)
    assert failures and lock.snapshot().holder is None


def test_a_hold_that_names_no_unit_is_labelled_with_the_unit_the_code_works_for():
    # The unit comes from working_for, never from the thread's name: a thread named as
    # another unit's stage, working for unit 2, holds for unit 2.
    lock = MlxLock(trace=4)
    seen = []

    def backend_call() -> None:
        with lock.hold("llm"):  # a backend's call: it does not know its unit
            holder = lock.holder
            seen.append(None if holder is None else holder.unit)

    def worker() -> None:
        backend_call()  # outside any unit's work
        with mlx_lock.working_for(2):
            assert mlx_lock.working_unit() == 2
            backend_call()
            with lock.hold("llm", 5):  # a unit named by the caller wins
                seen.append(lock.holder.unit if lock.holder else None)
        assert mlx_lock.working_unit() is None

    thread = threading.Thread(target=worker, name="parley-u7-stt")
    thread.start()
    _join_all([thread], 10)
    assert seen == [None, 2, 5]
    assert [record.unit for record in lock.trace()] == [None, 2, 5]
    assert mlx_lock.working_unit() is None  # another thread's unit is not this one's


# ---------------------------------------------------------------------- the guard
def test_guard_catches_unlocked_evaluation_and_restores_mlx():
    import mlx.core as mx

    originals = (mx.eval, mx.async_eval, vars(mx.array)["item"], vars(mx.array)["tolist"])
    lock = MlxLock()
    with mlx_guard.guarded("raise", lock=lock):
        assert mlx_guard.guard_enabled()
        x = mx.arange(4) * 2
        with pytest.raises(mlx_guard.MlxLockViolation, match=r"mx\.eval .* without the MLX lock"):
            mx.eval(x)
        caught = []

        def unguarded_thread():
            try:
                (mx.ones(3) + 1).tolist()
            except mlx_guard.MlxLockViolation as exc:
                caught.append(exc)

        thread = threading.Thread(target=unguarded_thread, name="sneaky")
        thread.start()
        _join_all([thread], 10)
        assert len(caught) == 1 and "'sneaky'" in str(caught[0])
        with lock.hold("stt", unit=0):  # the same work inside the lock passes
            mx.eval(x)
            assert x.tolist() == [0, 2, 4, 6] and x[1].item() == 2 and float(x[3]) == 6.0
        assert [v.entry for v in mlx_guard.violations()] == ["mx.eval", "array.tolist"]
        assert mlx_guard.violations()[0].where.startswith("test_mlx_lock.py:")
    assert not mlx_guard.guard_enabled()
    assert (mx.eval, mx.async_eval, vars(mx.array)["item"], vars(mx.array)["tolist"]) == originals
    assert (mx.arange(3) + 1).tolist() == [1, 2, 3]  # unguarded again: no error


def test_guard_from_env_records_without_raising(monkeypatch):
    import mlx.core as mx

    monkeypatch.setenv(mlx_guard.ENV, "record")
    lock = MlxLock()
    old = mlx_lock.set_mlx_lock(lock)
    try:
        assert mlx_guard.enable_from_env()
        assert (mx.ones(2) * 3).tolist() == [3.0, 3.0]  # recorded, not raised
        with mlx_lock.hold("llm"):
            mx.eval(mx.ones(2))
        assert [v.entry for v in mlx_guard.violations()] == ["array.tolist"]
    finally:
        mlx_guard.disable_guard()
        mlx_lock.set_mlx_lock(old)
    monkeypatch.setenv(mlx_guard.ENV, "sometimes")
    with pytest.raises(ParleyError, match="PARLEY_MLX_GUARD"):
        mlx_guard.enable_from_env()
    assert not mlx_guard.guard_enabled()



class _CallerClock(FakeClock):
    """A hand-moved clock that remembers which threads read it."""

    def __init__(self) -> None:
        super().__init__()
        self.readers: list[str] = []

    def __call__(self) -> float:
        self.readers.append(threading.current_thread().name)
        return self.now


def test_each_thread_counts_its_own_waits_on_every_lock():
    clock = _CallerClock()
    locks = (MlxLock(clock=clock), MlxLock(clock=clock, guarded=False, name="llm model lock"))
    seen: dict[str, float] = {}
    for n, lock in enumerate(locks):
        taken, release = threading.Event(), threading.Event()

        def hog(lock=lock, taken=taken, release=release) -> None:
            with lock.hold("tts"):
                taken.set()
                assert release.wait(10)
                clock.now += 0.25  # while the waiter waits, by the lock's own clock

        def waiter(lock=lock, n=n) -> None:
            before = mlx_lock.waited_by_this_thread()
            with lock.hold("llm"):
                pass
            with lock.hold("llm"):  # uncontended now: adds nothing
                pass
            seen[f"{n}"] = mlx_lock.waited_by_this_thread() - before

        holder = threading.Thread(target=hog, name=f"hog{n}")
        holder.start()
        assert taken.wait(10)
        main_before = mlx_lock.waited_by_this_thread()
        waiting = threading.Thread(target=waiter, name=f"waiter{n}")
        waiting.start()
        deadline = time.monotonic() + 10
        while f"waiter{n}" not in clock.readers and time.monotonic() < deadline:
            time.sleep(0.001)  # the waiter read the clock when it started waiting
        release.set()
        _join_all([holder, waiting], 10)
        assert mlx_lock.waited_by_this_thread() == main_before  # the main thread waited for nothing
    assert seen == {"0": 0.25, "1": 0.25}  # the MLX lock and a model lock alike
