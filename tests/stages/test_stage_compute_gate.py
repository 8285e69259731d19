"""Stages and the CPU's compute gate: a CPU model's calls take it, a remote one's do not,
and a partial transcription that went stale while waiting never holds up the final one."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.pipeline.messages import SpeechSegment, Transcript
from engine.runtime import compute_gate
from engine.runtime.compute_gate import ComputeGate
from tests.stages.test_stt_continue import RATE, ScriptedStt, segment, stage_for


@pytest.fixture
def gate():
    mine = ComputeGate(1, handoff_s=0.0)
    old = compute_gate.set_compute_gate(mine)
    yield mine
    compute_gate.set_compute_gate(old)


class _Busy:
    """Another unit's call holding the gate until ``release``."""

    def __init__(self, gate: ComputeGate) -> None:
        self.release = threading.Event()
        entered = threading.Event()

        def hold() -> None:
            with gate.hold(unit=7):
                entered.set()
                self.release.wait(10)

        self.thread = threading.Thread(target=hold)
        self.thread.start()
        assert entered.wait(5)

    def end(self) -> None:
        self.release.set()
        self.thread.join(5)


def _partial(ctx, revision: int) -> SpeechSegment:
    return SpeechSegment(1, ctx.control.generation, np.zeros(RATE, np.float32), RATE, False,
                         100.0, time.perf_counter(), revision)


def test_a_partial_gone_stale_in_the_queue_is_dropped_and_the_final_runs(gate):
    model = ScriptedStt(["And so my fellow Americans."])
    stage, ctx = stage_for(model)
    stage.partials.latest = 1
    busy = _Busy(gate)
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.extend(stage.process(_partial(ctx, 1))))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive() and not model.calls  # waiting for the CPU, as a partial does
    stage.partials.latest = stage.partials.final = 2  # the final segment is on its way
    worker.join(5)
    assert not worker.is_alive(), "the stale partial still waits for the CPU"
    assert out == [] and not model.calls  # never decoded
    busy.end()
    final = [m for m in stage.process(segment(ctx, 2.0)) if isinstance(m, Transcript)]
    assert [m.text for m in final] == ["And so my fellow Americans."]


def test_a_cpu_models_call_waits_for_the_gate_and_a_remote_ones_does_not(gate):
    local = ScriptedStt(["Hello."])
    stage, ctx = stage_for(local)
    busy = _Busy(gate)
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.extend(
        m.text for m in stage.process(segment(ctx, 1.0)) if isinstance(m, Transcript)))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive() and not local.calls
    busy.end()
    worker.join(5)
    assert out == ["Hello."]

    remote = ScriptedStt(["Hello there."])
    remote.actual_device = "remote"  # a server elsewhere computes it
    stage, ctx = stage_for(remote)
    busy = _Busy(gate)
    try:
        texts = [m.text for m in stage.process(segment(ctx, 1.0)) if isinstance(m, Transcript)]
    finally:
        busy.end()
    assert texts == ["Hello there."]
