"""The CPU's compute gate: exclusion, who goes first, giving up, hand-offs, waits counted."""

from __future__ import annotations

import threading
import time

import pytest

from engine.runtime import compute_gate
from engine.runtime.compute_gate import ComputeGate, Urgency
from engine.runtime.mlx_lock import waited_by_this_thread
from tests.support.threads import HeldGate


def _join(threads: list[threading.Thread], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not [t.name for t in threads if t.is_alive()], "threads still waiting (deadlock?)"


def _queue_behind(gate: ComputeGate, waiters: list[tuple[str, int, Urgency | None]],
                  order: list[str], before_release=lambda: None) -> None:
    """Hold the gate, line ``waiters`` up behind it one by one, call ``before_release``,
    then let them in."""
    entered, holder_release = threading.Event(), threading.Event()

    def hold() -> None:
        with gate.hold(unit=99):
            entered.set()
            holder_release.wait(10)

    def wait(name: str, unit: int, urgency: Urgency | None) -> None:
        with gate.hold(unit, urgency):
            order.append(name)

    threads = [threading.Thread(target=hold)]
    threads[0].start()
    assert entered.wait(5)
    for name, unit, urgency in waiters:
        thread = threading.Thread(target=wait, args=(name, unit, urgency))
        threads.append(thread)
        thread.start()
        deadline = time.monotonic() + 5
        while len(gate._waiting) < len(threads) - 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    before_release()
    holder_release.set()
    _join(threads)


def test_one_call_at_a_time_and_reentry_is_free():
    gate = ComputeGate(1, handoff_s=0.0)
    inside, most = [0], [0]
    guard = threading.Lock()

    def work(unit: int) -> None:
        for _ in range(100):
            with gate.hold(unit):
                with gate.hold(unit):  # a nested call of the same thread does not wait
                    with guard:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    time.sleep(0.0001)
                    with guard:
                        inside[0] -= 1

    threads = [threading.Thread(target=work, args=(unit % 4,)) for unit in range(8)]
    for thread in threads:
        thread.start()
    _join(threads)
    assert most[0] == 1


def test_the_most_urgent_unit_goes_first_then_the_earliest_declared():
    gate = ComputeGate(1, handoff_s=0.0)
    gate.set_urgency(1, Urgency.LISTENING)
    gate.set_urgency(2, Urgency.FIRST_AUDIO, since=20.0)
    gate.set_urgency(3, Urgency.FIRST_AUDIO, since=10.0)  # its user stopped speaking first
    gate.set_urgency(4, Urgency.REPLY)
    order: list[str] = []
    _queue_behind(gate, [("listening", 1, None), ("reply", 4, None), ("first, later", 2, None),
                   ("first, earlier", 3, None)], order)
    assert order == ["first, earlier", "first, later", "reply", "listening"]


def test_a_call_of_its_own_urgency_waits_behind_its_units_reply():
    gate = ComputeGate(1, handoff_s=0.0)
    gate.set_urgency(1, Urgency.FIRST_AUDIO)
    gate.set_urgency(2, Urgency.REPLY)
    order: list[str] = []
    _queue_behind(gate, [("partial of 1", 1, Urgency.LISTENING), ("reply of 2", 2, None),
                   ("final of 1", 1, None)], order)
    assert order == ["final of 1", "reply of 2", "partial of 1"]


def test_urgency_declared_while_waiting_reorders_the_queue():
    gate = ComputeGate(1, handoff_s=0.0)
    order: list[str] = []
    # Unit 2's user stops speaking while both wait: it goes first.
    _queue_behind(gate, [("unit 1", 1, None), ("unit 2", 2, None)], order,
                  before_release=lambda: gate.set_urgency(2, Urgency.FIRST_AUDIO))
    assert order == ["unit 2", "unit 1"]


def test_a_waiter_that_gives_up_leaves_without_the_place():
    gate = ComputeGate(1, handoff_s=0.0)
    stale = threading.Event()
    outcome: list[bool] = []

    def partial() -> None:
        with gate.hold(1, Urgency.LISTENING, give_up=stale.is_set) as may_run:
            outcome.append(may_run)

    busy = HeldGate(gate, unit=0)
    waiter = threading.Thread(target=partial)
    waiter.start()
    time.sleep(0.05)
    stale.set()  # the final segment replaced it: nobody sets anything on the gate
    _join([waiter])
    assert outcome == [False]
    assert not gate._waiting
    busy.end()
    with gate.hold(2) as may_run:  # the place was given back once, not twice or never
        assert may_run and gate._free == 0


def test_a_units_next_call_keeps_the_place_from_an_equally_urgent_later_unit():
    gate = ComputeGate(1, handoff_s=0.5)
    gate.set_urgency(1, Urgency.FIRST_AUDIO, since=1.0)
    gate.set_urgency(2, Urgency.FIRST_AUDIO, since=2.0)
    gate.set_urgency(3, Urgency.FIRST_AUDIO, since=0.5)
    order: list[str] = []
    first_done = threading.Event()

    def chain() -> None:  # STT then the LLM's first token: two calls, a gap between
        with gate.hold(1):
            order.append("unit 1, call 1")
        first_done.set()
        time.sleep(0.05)
        with gate.hold(1):
            order.append("unit 1, call 2")

    def later(name: str, unit: int) -> None:
        assert first_done.wait(5)
        with gate.hold(unit):
            order.append(name)

    runner = threading.Thread(target=chain)
    other = threading.Thread(target=later, args=("unit 2", 2))
    runner.start()
    other.start()
    _join([runner, other])
    assert order == ["unit 1, call 1", "unit 1, call 2", "unit 2"]

    # A more urgent unit does not wait for the hand-off.
    order.clear()
    with gate.hold(2):
        pass
    start = time.monotonic()
    with gate.hold(3):
        assert time.monotonic() - start < 0.4


def test_steps_hold_the_gate_per_item_and_release_between():
    gate = ComputeGate(1, handoff_s=0.0)
    seen: list[int] = []

    def tokens():
        for i in range(3):
            assert gate._free == 0  # computed inside the gate
            yield i

    holds = []
    hold = gate.hold
    gate.hold = lambda *args, **kwargs: holds.append(args) or hold(*args, **kwargs)
    for token in gate.steps(tokens(), unit=0):
        assert gate._free == 1  # the consumer's work (queues, chunking) is outside it
        seen.append(token)
    assert seen == [0, 1, 2]
    assert len(holds) == 4  # three items and the end: nothing more once it ended
    del gate.hold

    closed: list[bool] = []

    def reply():
        try:
            yield 1
            yield 2
        finally:
            closed.append(gate._free == 0)  # its clean-up runs inside the gate too

    steps = gate.steps(reply(), unit=0)
    assert next(steps) == 1
    steps.close()
    assert closed == [True]


def test_waiting_counts_as_a_lock_wait_of_the_thread():
    gate = ComputeGate(1, handoff_s=0.0)
    waited: list[float] = []

    def wait() -> None:
        before = waited_by_this_thread()
        with gate.hold(unit=1):
            waited.append(waited_by_this_thread() - before)

    busy = HeldGate(gate, unit=0)
    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    busy.end()
    _join([waiter])
    assert waited[0] >= 0.08


def test_the_process_gate_is_lazy_and_injectable_and_slots_follow_the_cores(monkeypatch):
    old = compute_gate.set_compute_gate(None)
    try:
        monkeypatch.setattr(compute_gate.os, "sched_getaffinity", lambda pid: set(range(2)),
                            raising=False)
        first = compute_gate.get_compute_gate()
        assert first.slots == 1 and compute_gate.get_compute_gate() is first
        mine = ComputeGate(3)
        assert compute_gate.set_compute_gate(mine) is first
        assert compute_gate.get_compute_gate() is mine
        monkeypatch.setattr(compute_gate.os, "sched_getaffinity", lambda pid: set(range(8)),
                            raising=False)
        assert compute_gate.cpu_slots() == 2
    finally:
        compute_gate.set_compute_gate(old)
    with pytest.raises(ValueError, match="at least 1 slot"):
        ComputeGate(0)


def test_others_ahead_names_a_more_urgent_unit_computing_or_waiting():
    gate = ComputeGate(1, handoff_s=0.0)
    gate.set_urgency(1, Urgency.FIRST_AUDIO, since=1.0)
    gate.set_urgency(2, Urgency.FIRST_AUDIO, since=2.0)
    assert not gate.others_ahead(2)  # nobody computes
    with gate.hold(2):
        assert not gate.others_ahead(2)  # its own call is not another unit's
        assert gate.others_ahead(1) is False  # unit 2 is less urgent than unit 1
    with gate.hold(1):
        assert gate.others_ahead(2)
    assert not gate.others_ahead(2)


def test_sharing_counts_the_units_at_an_urgency_per_place():
    gate = ComputeGate(1, handoff_s=0.0)
    assert gate.sharing(Urgency.LISTENING) == 1.0  # nobody declared: one unit's pace
    for unit in range(4):
        gate.set_urgency(unit, Urgency.LISTENING)
    assert gate.sharing(Urgency.LISTENING) == 4.0
    gate.set_urgency(2, Urgency.FIRST_AUDIO)  # that user stopped speaking
    assert gate.sharing(Urgency.LISTENING) == 3.0
    two_places = ComputeGate(2, handoff_s=0.0)
    for unit in range(4):
        two_places.set_urgency(unit, Urgency.LISTENING)
    assert two_places.sharing(Urgency.LISTENING) == 2.0
    two_places.set_urgency(0, Urgency.REPLY)
    two_places.set_urgency(1, Urgency.REPLY)
    two_places.set_urgency(2, Urgency.REPLY)
    assert two_places.sharing(Urgency.LISTENING) == 1.0
