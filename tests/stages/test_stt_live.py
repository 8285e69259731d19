"""Live transcription on a CPU that several units share: each unit's partials come that
many times less often, so together they leave the CPU free as often as one unit's."""

from __future__ import annotations

import numpy as np
import pytest

from engine.pipeline.events import PartialTranscript
from engine.pipeline.messages import SpeechSegment
from engine.runtime import compute_gate
from engine.runtime.compute_gate import ComputeGate, Urgency
from tests.stages.test_stt_continue import RATE, ScriptedStt, stage_for


@pytest.fixture
def gate():
    mine = ComputeGate(1, handoff_s=0.0)
    old = compute_gate.set_compute_gate(mine)
    yield mine
    compute_gate.set_compute_gate(old)


def partial(stage, ctx, revision: int) -> SpeechSegment:
    stage.partials.latest = revision
    return SpeechSegment(1, ctx.control.generation, np.zeros(RATE, np.float32), RATE, False,
                         100.0, 101.0, revision)


def live_texts(stage, ctx, revisions: list[int]) -> list[str]:
    shown: list[PartialTranscript] = []
    ctx.events.subscribe(lambda event: shown.append(event)
                         if isinstance(event, PartialTranscript) else None)
    for revision in revisions:
        list(stage.process(partial(stage, ctx, revision)))
    return [event.stable + "|" + event.unstable for event in shown]


def test_a_unit_alone_transcribes_every_partial(gate):
    model = ScriptedStt(["And so", "And so my fellow"])
    stage, ctx = stage_for(model)
    gate.set_urgency(0, Urgency.LISTENING)
    assert live_texts(stage, ctx, [1, 2]) == ["|And so", "And so|my fellow"]
    assert len(model.calls) == 2


def test_four_units_listening_on_one_place_space_each_units_partials_out(gate):
    model = ScriptedStt(["And so", "And so my fellow"])
    stage, ctx = stage_for(model)
    for unit in range(4):
        gate.set_urgency(unit, Urgency.LISTENING)
    # The second partial comes within 4 x live_transcription_interval of the first: dropped,
    # and counted; the model is not asked.
    assert live_texts(stage, ctx, [1, 2]) == ["|And so"]
    assert len(model.calls) == 1
    (spaced,) = ctx.metrics.stage_stats({"stt-partial-shared": (0, 0)})
    assert spaced.dropped_stale == 1
    # Once the others stopped speaking, the unit's next partial runs at once.
    for unit in (1, 2, 3):
        gate.set_urgency(unit, Urgency.FIRST_AUDIO)
    assert live_texts(stage, ctx, [3]) == ["And so|my fellow"]
