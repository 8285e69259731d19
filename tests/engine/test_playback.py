"""Playback (engine/pipeline/playback.py): held, committed and cut reply audio; and the SinkStage.

Chunks carry their index as every sample's value, so the order in which a sink played
them can be read back from the audio.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.audio.file_sink import FileSink
from engine.measures import Mark
from engine.pipeline.control import TurnControl
from engine.pipeline.events import EngineError, EventHub, TurnFinished
from engine.pipeline.messages import AudioOut, EndOfStream
from engine.pipeline.metrics import Metrics
from engine.pipeline.playback import Playback
from engine.stages.sink_stage import SinkStage
from tests.support.stage_harness import stage_context
from tests.support.threads import wait_for

RATE = 16000
WAIT_S = 5.0


def _wait_for(condition, timeout: float = WAIT_S) -> bool:
    return wait_for(condition, timeout, poll=0.002)


def _join(thread: threading.Thread) -> None:
    thread.join(WAIT_S)
    assert not thread.is_alive(), f"{thread.name} did not finish"


def chunk(turn: int, value: float, generation: int = 0, last: bool = False, n: int = 4) -> AudioOut:
    return AudioOut(turn, generation, np.full(n, value, np.float32), RATE, last)


def end(turn: int, generation: int = 0) -> AudioOut:
    return AudioOut(turn, generation, np.zeros(0, np.float32), RATE, True)


class RecordingSink:
    """An AudioSink that records what it is given; idle unless the test says otherwise."""

    def __init__(self, fail_on_play: int | None = None) -> None:
        self.played: list[tuple[int, float]] = []  # (turn, chunk value)
        self.flushes = 0
        self.first_heard_calls: list[int] = []
        self.idle = threading.Event()
        self.idle.set()
        self._fail_on_play = fail_on_play
        self._plays = 0
        self._lock = threading.Lock()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def play(self, audio: np.ndarray, sample_rate: int, turn_id: int) -> None:
        self._plays += 1
        if self._fail_on_play == self._plays:
            raise RuntimeError("the sound card went away")
        assert sample_rate == RATE
        with self._lock:
            self.played.append((turn_id, float(audio[0])))

    def flush(self) -> int:
        self.flushes += 1
        return 1234

    def wait_idle(self, timeout: float) -> bool:
        return self.idle.wait(timeout)

    @property
    def is_playing(self) -> bool:
        return not self.idle.is_set()

    def first_heard(self, turn_id: int) -> float | None:
        # A different answer per call: a second AUDIO_OUT_FIRST write would show.
        self.first_heard_calls.append(turn_id)
        return 1000.0 + len(self.first_heard_calls)

    def values(self, turn: int | None = None) -> list[float]:
        with self._lock:
            return [v for t, v in self.played if turn is None or t == turn]


class Setup:
    def __init__(self, sink) -> None:
        self.control = TurnControl()
        self.metrics = Metrics()
        self.events = EventHub()
        self.finished: list[TurnFinished] = []
        self.events.subscribe(lambda e: self.finished.append(e) if isinstance(e, TurnFinished) else None)
        self.sink = sink
        self.playback = Playback(2, sink, self.control, self.metrics, self.events)


@pytest.fixture
def fake() -> Setup:
    return Setup(RecordingSink())


@pytest.fixture
def real():
    sink = FileSink(None, realtime=False)
    sink.open()
    yield Setup(sink)
    sink.close()


# ---------------------------------------------------------------- hold and commit


def test_audio_of_an_uncommitted_turn_is_held_until_commit_then_played_in_order(real):
    pb, sink = real.playback, real.sink
    for k in (1, 2, 3):
        pb.offer(chunk(1, k))
    assert sink.audio.size == 0  # held, not played
    pb.commit(1)
    np.testing.assert_array_equal(sink.audio, np.repeat(np.float32([1, 2, 3]), 4))


def test_audio_of_a_committed_turn_plays_at_once(fake):
    pb, sink = fake.playback, fake.sink
    pb.commit(1)
    pb.offer(chunk(1, 1))
    assert sink.values() == [1]
    pb.offer(chunk(1, 2))
    assert sink.values() == [1, 2]


def test_commit_releases_only_that_turns_audio(fake):
    pb, sink = fake.playback, fake.sink
    pb.offer(chunk(1, 1))
    pb.offer(chunk(2, 20))
    pb.offer(chunk(1, 2))
    pb.commit(1)
    assert sink.played == [(1, 1), (1, 2)]
    pb.offer(chunk(1, 3))  # committed: plays at once
    pb.commit(2)
    assert sink.played == [(1, 1), (1, 2), (1, 3), (2, 20)]


def test_held_audio_of_a_turn_cancelled_before_commit_is_not_played(fake):
    pb, sink, control = fake.playback, fake.sink, fake.control
    pb.offer(chunk(1, 1, generation=0))
    pb.offer(chunk(1, 2, generation=0))
    new = control.cancel_turn(1, "reopened")
    pb.offer(chunk(1, 10, generation=new))  # the redone revision's reply
    pb.commit(1)
    assert sink.values() == [10]


def test_held_audio_cancelled_by_barge_in_is_not_played(fake):
    pb, sink, control = fake.playback, fake.sink, fake.control
    pb.offer(chunk(1, 1))
    pb.offer(chunk(2, 2))
    control.cancel_all(1, "barge-in")
    pb.commit(1)
    pb.commit(2)
    assert sink.played == []


def test_cut_drops_held_audio_and_flushes_the_sink(fake):
    pb, sink = fake.playback, fake.sink
    pb.commit(1)
    pb.offer(chunk(1, 1))
    pb.offer(chunk(2, 2))  # held
    assert pb.cut() == 1234  # what the sink dropped
    assert sink.flushes == 1
    pb.commit(2)
    assert sink.values() == [1]  # the held chunk of turn 2 is gone


def test_is_playing_and_wait_idle_are_the_sinks(fake):
    pb, sink = fake.playback, fake.sink
    assert not pb.is_playing and pb.wait_idle(0)
    sink.idle.clear()
    assert pb.is_playing
    assert not pb.wait_idle(0.01)


# ---------------------------------------------------------------- marks and events


def test_the_last_chunk_finishes_the_turn_once(fake):
    pb, metrics = fake.playback, fake.metrics
    metrics.mark(2, 1, Mark.SPEECH_END, 5.0)
    pb.commit(1)
    pb.offer(chunk(1, 1))
    before = time.perf_counter()
    assert fake.finished == []
    assert not metrics.turn(2, 1).finished
    pb.offer(end(1))
    after = time.perf_counter()
    record = metrics.turn(2, 1)
    assert record.finished
    assert before <= record.marks[Mark.REPLY_DONE] <= after
    assert len(fake.finished) == 1
    event = fake.finished[0]
    assert event.unit == 2 and event.record.turn_id == 1 and event.record.unit == 2
    assert event.record.finished and Mark.REPLY_DONE in event.record.marks
    assert fake.sink.values() == [1]  # the empty last chunk is not played


def test_a_held_last_chunk_finishes_the_turn_on_commit(fake):
    pb = fake.playback
    pb.offer(chunk(1, 1))
    pb.offer(chunk(1, 2, last=True))
    assert fake.finished == [] and fake.metrics.turn(2, 1) is None
    pb.commit(1)
    assert fake.sink.values() == [1, 2]
    assert len(fake.finished) == 1
    assert fake.metrics.turn(2, 1).finished


def test_a_cancelled_last_chunk_does_not_finish_the_turn(fake):
    pb = fake.playback
    pb.offer(chunk(1, 1))
    pb.offer(end(1))
    fake.control.cancel_turn(1, "reopened")
    pb.commit(1)
    assert fake.finished == []
    assert fake.metrics.turn(2, 1) is None


def test_audio_out_first_is_recorded_once_per_turn(fake):
    pb, metrics, sink = fake.playback, fake.metrics, fake.sink
    pb.commit(1)
    pb.offer(chunk(1, 1))
    assert metrics.turn(2, 1).marks[Mark.AUDIO_OUT_FIRST] == 1001.0  # the sink's clock
    pb.offer(chunk(1, 2))
    pb.offer(chunk(1, 3, last=True))
    assert sink.first_heard_calls == [1]
    assert metrics.turn(2, 1).marks[Mark.AUDIO_OUT_FIRST] == 1001.0
    pb.offer(chunk(3, 1))  # held: nothing heard yet
    assert metrics.turn(2, 3) is None
    pb.commit(3)
    pb.offer(chunk(3, 2))
    assert sink.first_heard_calls == [1, 3]
    assert metrics.turn(2, 3).marks[Mark.AUDIO_OUT_FIRST] == 1002.0


def test_audio_out_first_is_when_a_real_sink_played_it(real):
    pb, metrics, sink = real.playback, real.metrics, real.sink
    pb.commit(1)
    before = time.perf_counter()
    pb.offer(chunk(1, 1))
    first = metrics.turn(2, 1).marks[Mark.AUDIO_OUT_FIRST]
    assert first == sink.first_heard(1)
    assert before <= first <= time.perf_counter()
    pb.offer(chunk(1, 2))
    pb.offer(end(1))
    assert metrics.turn(2, 1).marks[Mark.AUDIO_OUT_FIRST] == first
    assert metrics.turn(2, 1).marks[Mark.REPLY_DONE] >= first
    assert len(real.finished) == 1


def test_an_empty_reply_marks_no_audio(fake):
    pb = fake.playback
    pb.commit(1)
    pb.offer(end(1))
    record = fake.metrics.turn(2, 1)
    assert Mark.AUDIO_OUT_FIRST not in record.marks and Mark.REPLY_DONE in record.marks
    assert fake.sink.first_heard_calls == []
    assert len(fake.finished) == 1


def test_a_commit_from_another_thread_keeps_the_order(fake):
    """The source stage commits while the TTS thread offers: no chunk overtakes another."""
    pb, sink = fake.playback, fake.sink
    n = 400
    half = threading.Event()

    def offer_all() -> None:
        for k in range(n):
            pb.offer(chunk(1, k))
            if k == n // 4:
                half.set()

    def commit_midway() -> None:
        assert half.wait(WAIT_S)
        pb.commit(1)

    threads = [threading.Thread(target=offer_all), threading.Thread(target=commit_midway)]
    for t in threads:
        t.start()
    for t in threads:
        _join(t)
    assert sink.values() == list(range(n))


# ---------------------------------------------------------------- the sink stage


@pytest.fixture
def sink_stage():
    """A started SinkStage over a RecordingSink; stopped and joined at teardown."""
    made = []

    def make(sink: RecordingSink | None = None):
        ctx = stage_context(unit=2)
        playback = Playback(2, sink or RecordingSink(), ctx.control, ctx.metrics, ctx.events)
        stage = SinkStage(ctx, playback)
        made.append(stage)
        stage.start()
        return stage

    yield make
    for stage in made:
        stage.ctx.stopping.set()
        assert stage.join(WAIT_S)


def test_audio_offered_through_the_sink_stage_reaches_playback(sink_stage):
    stage = sink_stage()
    sink = stage.playback.sink
    stage.put(chunk(1, 1))
    stage.put(chunk(1, 2))
    assert _wait_for(lambda: stage.queue_depth()[0] == 0)
    assert sink.values() == []  # uncommitted: held by playback
    stage.playback.commit(1)
    assert _wait_for(lambda: sink.values() == [1, 2])
    stage.put(chunk(1, 3))
    assert _wait_for(lambda: sink.values() == [1, 2, 3])


def test_the_sink_stage_drops_stale_audio(sink_stage):
    stage = sink_stage()
    stage.playback.commit(1)
    new = stage.ctx.control.cancel_all(1, "barge-in")
    stage.put(chunk(1, 1, generation=0))
    stage.put(chunk(2, 2, generation=new))
    stage.playback.commit(2)
    assert _wait_for(lambda: stage.playback.sink.values() == [2])
    assert stage.ctx.metrics.stage_stats({"sink": (0, 0)})[0].dropped_stale == 1


def test_a_commit_while_the_sink_stage_offers_keeps_the_order(sink_stage):
    stage = sink_stage()
    sink = stage.playback.sink
    n = 300
    quarter = threading.Event()

    def produce() -> None:
        for k in range(n):
            assert stage.put(chunk(1, k))
            if k == n // 4:
                quarter.set()
        assert stage.put(end(1))

    def commit() -> None:
        assert quarter.wait(WAIT_S)
        stage.playback.commit(1)

    threads = [threading.Thread(target=produce), threading.Thread(target=commit)]
    for t in threads:
        t.start()
    for t in threads:
        _join(t)
    assert _wait_for(lambda: stage.ctx.metrics.turn(2, 1) is not None
                     and stage.ctx.metrics.turn(2, 1).finished)
    assert sink.values() == list(range(n))


def test_end_of_stream_sets_drained_once_the_sink_is_idle(sink_stage):
    sink = RecordingSink()
    sink.idle.clear()  # still playing
    stage = sink_stage(sink)
    stage.playback.commit(1)
    stage.put(chunk(1, 1))
    stage.put(EndOfStream(0, 0))
    assert not stage.drained.wait(0.3)
    assert sink.values() == [1]
    sink.idle.set()
    assert stage.drained.wait(WAIT_S)


def test_stopping_releases_a_sink_stage_waiting_to_drain(sink_stage):
    sink = RecordingSink()
    sink.idle.clear()
    stage = sink_stage(sink)
    stage.put(EndOfStream(0, 0))
    assert not stage.drained.wait(0.2)
    stage.ctx.stopping.set()
    assert stage.join(WAIT_S)


def test_a_failing_sink_is_reported_and_the_sink_stage_goes_on(sink_stage):
    sink = RecordingSink(fail_on_play=1)
    stage = sink_stage(sink)
    errors: list[EngineError] = []
    stage.ctx.events.subscribe(lambda e: errors.append(e) if isinstance(e, EngineError) else None)
    stage.playback.commit(1)
    stage.put(chunk(1, 1))
    stage.put(chunk(1, 2))
    stage.put(EndOfStream(0, 0))
    assert stage.drained.wait(2.0)
    assert sink.values() == [2]
    assert [(e.stage, e.message) for e in errors] == [("sink", "RuntimeError: the sound card went away")]


def test_heard_text_follows_the_clauses_played_by_their_audio_length():
    from engine.pipeline.playback import SpokenReply

    spoken = SpokenReply()
    spoken.add("Paris is the capital.", 1.0)
    spoken.add("It is on the Seine river.", 0.5)
    spoken.add("", 0.5)  # more audio of the same clause
    assert spoken.heard(0.0) == ""
    assert spoken.heard(1.0) == "Paris is the capital."
    assert spoken.heard(1.5) == "Paris is the capital. It is on"  # half of the second clause
    assert spoken.heard(9.0) == "Paris is the capital. It is on the Seine river."
