"""A unit's compute handle: its calls wait as urgently as its unit, whatever thread makes
them and whatever that thread is named, and a stage's thread works for its unit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass


from engine.pipeline.messages import Message
from engine.pipeline.stage import Stage, StageContext
from engine.runtime import compute_gate, mlx_lock
from engine.runtime.compute_gate import ComputeGate, UnitCompute, Urgency
from engine.runtime.mlx_lock import MlxLock, waited_by_this_thread
from tests.support.stage_harness import stage_context
from tests.support.threads import WAIT_S, HeldGate, wait_for


def test_a_call_through_the_handle_waits_as_its_unit_whatever_its_thread_is_named(gate):
    UnitCompute(2).set_urgency(Urgency.FIRST_AUDIO)  # unit 2's user stopped speaking
    UnitCompute(1).set_urgency(Urgency.REPLY)
    assert UnitCompute(2).urgency is Urgency.FIRST_AUDIO and gate.urgency(1) is Urgency.REPLY
    order: list[int] = []
    waited: dict[int, float] = {}
    busy = HeldGate(gate)

    def call(compute: UnitCompute) -> None:
        before = waited_by_this_thread()
        with compute.hold() as may_run:
            assert may_run
            order.append(compute.unit)
        waited[compute.unit] = waited_by_this_thread() - before

    # Each thread is named as the other unit's stage: the name says nothing.
    first = threading.Thread(target=call, args=(UnitCompute(1),), name="parley-u2-llm")
    second = threading.Thread(target=call, args=(UnitCompute(2),), name="parley-u1-tts")
    first.start()
    assert wait_for(lambda: len(gate._waiting) == 1)
    second.start()
    assert wait_for(lambda: len(gate._waiting) == 2)
    assert UnitCompute(1).others_ahead() and not UnitCompute(2).others_ahead()
    busy.end()
    for thread in (first, second):
        thread.join(WAIT_S)
    assert order == [2, 1]  # unit 2 came later and went first: it is more urgent
    assert waited[1] > 0 and waited[2] > 0  # the waits count as lock waits


def test_a_call_of_its_own_urgency_through_the_handle_keeps_it(gate):
    UnitCompute(1).set_urgency(Urgency.FIRST_AUDIO)
    UnitCompute(2).set_urgency(Urgency.REPLY)
    order: list[str] = []
    busy = HeldGate(gate)

    def call(name: str, compute: UnitCompute, urgency: Urgency | None) -> None:
        with compute.hold(urgency):
            order.append(name)

    threads = [threading.Thread(target=call, args=("partial of 1", UnitCompute(1), Urgency.LISTENING)),
               threading.Thread(target=call, args=("reply of 2", UnitCompute(2), None))]
    for count, thread in enumerate(threads, 1):
        thread.start()
        assert wait_for(lambda count=count: len(gate._waiting) == count)
    busy.end()
    for thread in threads:
        thread.join(WAIT_S)
    assert order == ["reply of 2", "partial of 1"]


def test_steps_through_the_handle_hold_the_gate_for_each_item(gate):
    held: list[bool] = []

    def tokens() -> Iterator[int]:
        for token in range(3):
            held.append(gate._free == 0)
            yield token

    assert list(UnitCompute(4).steps(tokens())) == [0, 1, 2]
    assert held == [True, True, True] and gate._free == 1


@dataclass(frozen=True, slots=True)
class _Work(Message):
    pass


class _Backend(Stage[None]):
    """A stage whose work makes a backend-like call: a model lock's hold naming no unit."""

    def __init__(self, ctx: StageContext, lock: MlxLock) -> None:
        super().__init__("llm", ctx)
        self.lock = lock
        self.units: list[int | None] = []

    def process(self, msg: Message) -> Iterator[Message]:
        with self.lock.hold("llm"):
            self.units.append(mlx_lock.working_unit())
        yield from ()


def test_a_stage_thread_works_for_its_unit():
    ctx = stage_context(unit=3)
    assert ctx.compute == UnitCompute(3)
    lock = MlxLock(trace=4)
    stage = _Backend(ctx, lock)
    stage.start()
    try:
        assert stage.put(_Work(1, ctx.control.generation))
        assert wait_for(lambda: bool(stage.units))
    finally:
        ctx.stopping.set()
        assert stage.join(WAIT_S)
    assert stage.units == [3]
    assert [record.unit for record in lock.trace()] == [3]
    assert mlx_lock.working_unit() is None  # the test's thread works for no unit


def test_the_handle_reads_the_gate_in_place_at_each_call(gate):
    compute = UnitCompute(0)
    compute.set_urgency(Urgency.LISTENING)
    other = ComputeGate(1)
    old = compute_gate.set_compute_gate(other)
    try:
        assert compute.urgency is Urgency.REPLY  # the new gate knows nothing of unit 0 yet
        compute.set_urgency(Urgency.FIRST_AUDIO)
        assert other.urgency(0) is Urgency.FIRST_AUDIO
    finally:
        compute_gate.set_compute_gate(old)
    assert gate.urgency(0) is Urgency.LISTENING
