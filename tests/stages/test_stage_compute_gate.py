"""Stages and the CPU's compute gate: a CPU model's calls take it, a remote one's do not,
a partial transcription that went stale while waiting never holds up the final one, and
units listening on one CPU space their partials out so that together they leave it free
as often as one unit's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.pipeline.events import PartialTranscript
from engine.pipeline.messages import SpeechSegment, Transcript
from engine.runtime.compute_gate import UnitCompute, Urgency
from tests.stages.test_stt_continue import RATE, ScriptedStt, segment, stage_for
from tests.support.stage_harness import run_stage
from tests.support.threads import HeldGate


def _partial(ctx, revision: int) -> SpeechSegment:
    return SpeechSegment(1, ctx.control.generation, np.zeros(RATE, np.float32), RATE, False,
                         100.0, time.perf_counter(), revision)


def test_a_partial_gone_stale_in_the_queue_is_dropped_and_the_final_runs(gate):
    model = ScriptedStt(["And so my fellow Americans."])
    stage, ctx = stage_for(model)
    stage.partials.latest = 1
    busy = HeldGate(gate)
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.extend(run_stage(stage, [_partial(ctx, 1)])[0]))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive() and not model.calls  # waiting for the CPU, as a partial does
    stage.partials.latest = stage.partials.final = 2  # the final segment is on its way
    worker.join(5)
    assert not worker.is_alive(), "the stale partial still waits for the CPU"
    assert out == [] and not model.calls  # never decoded
    busy.end()
    final = [m for m in run_stage(stage, [segment(ctx, 2.0)])[0] if isinstance(m, Transcript)]
    assert [m.text for m in final] == ["And so my fellow Americans."]


def test_a_cpu_models_call_waits_for_the_gate_and_a_remote_ones_does_not(gate):
    local = ScriptedStt(["Hello."])
    stage, ctx = stage_for(local)
    busy = HeldGate(gate)
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.extend(
        m.text for m in run_stage(stage, [segment(ctx, 1.0)])[0] if isinstance(m, Transcript)))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive() and not local.calls
    busy.end()
    worker.join(5)
    assert out == ["Hello."]

    remote = ScriptedStt(["Hello there."])
    remote.actual_device = "remote"  # a server elsewhere computes it
    stage, ctx = stage_for(remote)
    busy = HeldGate(gate)
    try:
        texts = [m.text for m in run_stage(stage, [segment(ctx, 1.0)])[0]
                 if isinstance(m, Transcript)]
    finally:
        busy.end()
    assert texts == ["Hello there."]


def test_an_audio_score_still_waiting_when_its_turn_is_decided_is_never_computed(gate):
    from engine.stages.end_of_turn.board import AudioScorer, TurnEndBoard

    board, calls, decided = TurnEndBoard(), [], threading.Event()
    scorer = AudioScorer("parley-u3-turn", lambda audio: calls.append(audio.size) or 0.9,
                         board, lambda message: None,
                         lambda turn_id, generation: decided.is_set(), compute=UnitCompute(3))
    scorer.start()
    busy = HeldGate(gate)  # another unit's reply work has the CPU
    try:
        scorer.offer(1, 0, np.zeros(10, np.float32))
        time.sleep(0.1)
        assert not calls
        decided.set()  # the grace ended (or the user went on) meanwhile
        time.sleep(0.15)  # past the gate's poll of give_up
    finally:
        busy.end()
    scorer.offer(2, 0, np.zeros(20, np.float32))  # a later turn is scored as usual
    deadline = time.monotonic() + 5
    while board.scores(2, 0).audio is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scorer.stop(5)
    assert calls == [20]
    assert board.scores(1, 0).audio is None and board.scores(2, 0).audio == pytest.approx(0.9)


def test_end_of_turn_scores_that_cannot_start_in_time_are_not_wanted():
    from engine.config import TurnConfig, VadConfig
    from engine.stages.end_of_turn.board import TurnEndBoard
    from engine.stages.end_of_turn.decide import SCORES_START_WITHIN, scores_start_by

    vad, turns = VadConfig(min_silence_ms=300), TurnConfig(reopen_grace_ms=900,
                                                            speculative_start_ms=100)
    # At the speculative start 1.1 s of the grace are left: half of it to start the scores.
    assert scores_start_by(vad, turns, now=10.0) == pytest.approx(10.0 + SCORES_START_WITHIN * 1.1)
    now = [10.0]
    board = TurnEndBoard(clock=lambda: now[0])
    assert board.scores_wanted(5, 0)  # nothing expected: nothing to skip
    board.expect(5, 0, scores_start_by(vad, turns, now=10.0))
    now[0] = 10.5
    assert board.scores_wanted(5, 0)
    now[0] = 10.6
    assert not board.scores_wanted(5, 0)
    board.forget(5)
    assert board.scores_wanted(5, 0)


def _live_texts(stage, ctx, revisions: list[int]) -> list[str]:
    shown: list[PartialTranscript] = []
    for revision in revisions:
        stage.partials.latest = revision
        _out, events = run_stage(stage, [_partial(ctx, revision)])
        shown += [event for event in events if isinstance(event, PartialTranscript)]
    return [event.stable + "|" + event.unstable for event in shown]


def test_a_unit_listening_alone_transcribes_every_partial(gate):
    model = ScriptedStt(["And so", "And so my fellow"])
    stage, ctx = stage_for(model)
    gate.set_urgency(0, Urgency.LISTENING)
    assert _live_texts(stage, ctx, [1, 2]) == ["|And so", "And so|my fellow"]
    assert len(model.calls) == 2


def test_four_units_listening_on_one_place_space_each_units_partials_out(gate):
    model = ScriptedStt(["And so", "And so my fellow"])
    stage, ctx = stage_for(model)
    for unit in range(4):
        gate.set_urgency(unit, Urgency.LISTENING)
    # The second partial comes within 4 x live_transcription_interval of the first: dropped,
    # and counted; the model is not asked.
    assert _live_texts(stage, ctx, [1, 2]) == ["|And so"]
    assert len(model.calls) == 1
    # (The stage's own figures, "stt", are listed beside the ones it dropped.)
    stats = {s.name: s for s in ctx.metrics.stage_stats({"stt-partial-shared": (0, 0)})}
    assert stats["stt-partial-shared"].dropped_stale == 1
    # Once the others stopped speaking, the unit's next partial runs at once.
    for unit in (1, 2, 3):
        gate.set_urgency(unit, Urgency.FIRST_AUDIO)
    assert _live_texts(stage, ctx, [3]) == ["And so|my fellow"]
