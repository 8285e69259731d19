"""The stage machinery (engine/pipeline/stage.py) with tiny stages and no models.

A ``Stage`` that doubles numbers feeds a collecting stage; a ``SourceStage`` reads an
in-memory audio source. Every test stops its stages (``ctx.stopping``) and joins them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from engine.audio.base import PIPELINE_RATE, AudioBlock, AudioSource
from engine.errors import ModelError
from engine.pipeline.events import EngineError
from engine.pipeline.messages import EndOfStream, Message
from engine.pipeline.stage import SourceStage, Stage, StageContext
from tests.support.stage_harness import stage_context
from tests.support.threads import wait_for

WAIT_S = 5.0  # upper bound for anything that should happen promptly


@dataclass(frozen=True, slots=True)
class Num(Message):
    value: int


def _wait_for(condition, timeout: float = WAIT_S) -> bool:
    return wait_for(condition, timeout, poll=0.002)


def _join(thread: threading.Thread) -> None:
    thread.join(WAIT_S)
    assert not thread.is_alive(), f"{thread.name} did not finish"


class Collect(Stage):
    """The last stage: keeps what reaches it, and when EndOfStream came."""

    def __init__(self, ctx: StageContext, maxsize: int = 16) -> None:
        super().__init__("collect", ctx, maxsize=maxsize)
        self.got: list[Message] = []
        self.ends: list[int] = []  # len(self.got) when on_end ran

    def process(self, msg: Message) -> Iterator[Message]:
        self.got.append(msg)
        yield from ()

    def on_end(self) -> None:
        self.ends.append(len(self.got))

    def values(self) -> list[int]:
        return [m.value for m in self.got]


class Double(Stage):
    """Doubles each number; raises on -1 and -2; records what it was given and its thread."""

    def __init__(self, ctx: StageContext, model: object = None, maxsize: int = 16) -> None:
        super().__init__("double", ctx, model=model, maxsize=maxsize)
        self.seen: list[int] = []
        self.ended = 0

    def process(self, msg: Message) -> Iterator[Message]:
        self.seen.append(msg.value)
        if msg.value == -1:
            raise ValueError("unlucky number")
        if msg.value == -2:
            raise ModelError("the model refused")
        yield Num(msg.turn_id, msg.generation, msg.value * 2)

    def on_end(self) -> None:
        self.ended += 1


@pytest.fixture
def make_ctx():
    """StageContexts whose stages are all stopped and joined at teardown."""
    made: list[tuple[StageContext, list[Stage | SourceStage]]] = []

    def make(unit: int = 0) -> tuple[StageContext, list]:
        ctx = stage_context(unit=unit)
        stages: list = []
        made.append((ctx, stages))
        return ctx, stages

    yield make
    for ctx, stages in made:
        ctx.stopping.set()
        for stage in stages:
            assert stage.join(WAIT_S), f"{stage.name} did not stop"


def _errors(ctx: StageContext) -> list[EngineError]:
    got: list[EngineError] = []
    ctx.events.subscribe(lambda e: got.append(e) if isinstance(e, EngineError) else None)
    return got


def _pipeline(make_ctx, unit: int = 0, double_maxsize: int = 16):
    ctx, stages = make_ctx(unit)
    double = Double(ctx, maxsize=double_maxsize)
    collect = Collect(ctx)
    double.connect(collect)
    stages += [double, collect]
    return ctx, double, collect


def _start(*stages) -> None:
    for stage in stages:
        stage.start()


# ---------------------------------------------------------------- flow


def test_messages_flow_in_order_through_the_stages(make_ctx):
    ctx, double, collect = _pipeline(make_ctx)
    _start(double, collect)
    for i in range(1, 31):
        assert double.put(Num(1, 0, i))
    assert _wait_for(lambda: len(collect.got) == 30)
    assert collect.values() == [2 * i for i in range(1, 31)]
    assert double.seen == list(range(1, 31))
    stats = {s.name: s for s in ctx.metrics.stage_stats({"double": double.queue_depth()})}
    assert stats["double"].count == 30  # one compute time per message
    assert stats["double"].dropped_stale == 0


def test_outputs_keep_the_turn_and_generation_of_their_input(make_ctx):
    _ctx, double, collect = _pipeline(make_ctx)
    _start(double, collect)
    double.put(Num(4, 0, 1))
    double.put(Num(9, 0, 2))
    assert _wait_for(lambda: len(collect.got) == 2)
    assert [(m.turn_id, m.generation) for m in collect.got] == [(4, 0), (9, 0)]


def test_queue_depth_is_the_inbox_and_its_capacity(make_ctx):
    _ctx, double, _collect = _pipeline(make_ctx, double_maxsize=5)
    assert double.queue_depth() == (0, 5)
    double.put(Num(1, 0, 1))
    double.put(Num(1, 0, 2))
    assert double.queue_depth() == (2, 5)


# ---------------------------------------------------------------- back-pressure


def test_a_full_downstream_queue_makes_put_wait_until_there_is_room(make_ctx):
    ctx, _stages = make_ctx()
    collect = Collect(ctx, maxsize=1)  # never started: nothing drains it but the test
    assert collect.put(Num(1, 0, 1))
    result: list[bool] = []
    putter = threading.Thread(target=lambda: result.append(collect.put(Num(1, 0, 2))))
    putter.start()
    putter.join(0.2)
    assert putter.is_alive() and result == []  # waits: back-pressure, not a drop
    assert collect.inbox.get_nowait().value == 1  # room again
    _join(putter)
    assert result == [True]
    assert collect.inbox.get_nowait().value == 2


def test_stopping_releases_a_put_waiting_on_a_full_queue(make_ctx):
    ctx, _stages = make_ctx()
    collect = Collect(ctx, maxsize=1)
    assert collect.put(Num(1, 0, 1))
    result: list[bool] = []
    putter = threading.Thread(target=lambda: result.append(collect.put(Num(1, 0, 2))))
    putter.start()
    putter.join(0.2)
    assert putter.is_alive()
    ctx.stopping.set()
    _join(putter)
    assert result == [False]
    assert collect.queue_depth() == (1, 1)  # the waiting message was not enqueued


def test_a_stage_blocked_on_a_full_downstream_stops_on_stop(make_ctx):
    ctx, stages = make_ctx()
    double, collect = Double(ctx), Collect(ctx, maxsize=1)
    double.connect(collect)
    stages.append(double)  # collect is never started
    double.start()
    for i in range(1, 4):
        double.put(Num(1, 0, i))
    assert _wait_for(lambda: double.seen == [1, 2])  # 2 fills collect; its output waits
    assert collect.queue_depth() == (1, 1)
    ctx.stopping.set()
    assert double.join(WAIT_S)


# ---------------------------------------------------------------- stale messages


def test_messages_of_a_cancelled_turn_are_dropped_before_process(make_ctx):
    ctx, double, collect = _pipeline(make_ctx)
    new = ctx.control.cancel_turn(1, "reopened")
    double.put(Num(1, 0, 5))  # the dropped revision of turn 1
    double.put(Num(2, 0, 6))  # another turn: untouched
    double.put(Num(1, new, 7))  # the redone turn 1
    _start(double, collect)
    assert _wait_for(lambda: len(collect.got) == 2)
    assert double.seen == [6, 7]
    assert collect.values() == [12, 14]
    stats = {s.name: s for s in ctx.metrics.stage_stats({"double": double.queue_depth(),
                                                         "collect": collect.queue_depth()})}
    assert stats["double"].dropped_stale == 1
    assert stats["collect"].dropped_stale == 0


def test_cancel_all_drops_every_turn_in_flight(make_ctx):
    ctx, double, collect = _pipeline(make_ctx)
    double.put(Num(1, 0, 1))
    double.put(Num(2, 0, 2))
    new = ctx.control.cancel_all(2, "barge-in")
    double.put(Num(3, new, 3))
    _start(double, collect)
    assert _wait_for(lambda: len(collect.got) == 1)
    assert double.seen == [3]
    assert collect.values() == [6]
    stats = {s.name: s for s in ctx.metrics.stage_stats({"double": (0, 0)})}
    assert stats["double"].dropped_stale == 2


def test_outputs_cancelled_mid_message_are_dropped(make_ctx):
    ctx, stages = make_ctx()
    inside, release = threading.Event(), threading.Event()

    class TwoOutputs(Stage):
        def process(self, msg):
            yield Num(msg.turn_id, msg.generation, 100)
            inside.set()  # runs only once the first output was emitted
            assert release.wait(WAIT_S)
            yield Num(msg.turn_id, msg.generation, 200)
            yield Num(msg.turn_id, msg.generation, 300)

    two, collect = TwoOutputs("two", ctx), Collect(ctx)
    two.connect(collect)  # collect is not started: its inbox shows what ``two`` emitted
    stages.append(two)
    two.start()
    two.put(Num(1, 0, 1))
    assert inside.wait(WAIT_S)
    ctx.control.cancel_turn(1, "reopened")
    release.set()
    assert _wait_for(lambda: ctx.metrics.stage_stats({"two": (0, 0)})[0].dropped_stale == 2)
    # A later message of the redone turn still flows, all its outputs.
    two.put(Num(1, ctx.control.generation, 2))
    assert _wait_for(lambda: collect.queue_depth()[0] == 4)
    emitted = [collect.inbox.get_nowait() for _ in range(4)]
    assert [m.value for m in emitted] == [100, 100, 200, 300]
    assert [m.generation for m in emitted] == [0, 1, 1, 1]
    assert ctx.metrics.stage_stats({"two": (0, 0)})[0].dropped_stale == 2


# ---------------------------------------------------------------- errors


def test_an_exception_in_process_is_reported_and_the_stage_goes_on(make_ctx):
    ctx, double, collect = _pipeline(make_ctx, unit=3)
    errors = _errors(ctx)
    _start(double, collect)
    for value in (1, -1, 2, -2, 3):
        double.put(Num(1, 0, value))
    assert _wait_for(lambda: len(collect.got) == 3)
    assert collect.values() == [2, 4, 6]
    assert double.alive
    assert len(errors) == 2
    assert errors[0].unit == 3 and errors[0].stage == "double"
    assert errors[0].message == "ValueError: unlucky number"
    assert errors[1].stage == "double"
    assert errors[1].message == "the model refused"  # ParleyErrors speak for themselves


def test_an_exception_in_a_plain_function_process_is_reported_too(make_ctx):
    ctx, stages = make_ctx()
    errors = _errors(ctx)

    class Eager(Stage):
        def process(self, msg):
            if msg.value == 13:
                raise ValueError("unlucky number")
            return iter([Num(msg.turn_id, msg.generation, msg.value * 2)])

    eager, collect = Eager("eager", ctx), Collect(ctx)
    eager.connect(collect)
    stages += [eager, collect]
    _start(eager, collect)
    for value in (1, 13, 2):
        eager.put(Num(1, 0, value))
    assert _wait_for(lambda: len(collect.got) == 2, timeout=2.0)
    assert collect.values() == [2, 4]
    assert [(e.stage, e.message) for e in errors] == [("eager", "ValueError: unlucky number")]


# ---------------------------------------------------------------- end of stream


def test_end_of_stream_calls_on_end_and_is_passed_on_after_earlier_messages(make_ctx):
    _ctx, double, collect = _pipeline(make_ctx)
    _start(double, collect)
    for i in (1, 2, 3):
        double.put(Num(1, 0, i))
    double.put(EndOfStream(0, 0))
    assert _wait_for(lambda: collect.ends == [3])
    assert double.ended == 1
    assert collect.values() == [2, 4, 6]
    assert double.seen == [1, 2, 3]  # EndOfStream never reaches process


def test_end_of_stream_of_an_old_generation_is_still_passed_on(make_ctx):
    ctx, double, collect = _pipeline(make_ctx)
    ctx.control.cancel_all(0, "barge-in")
    _start(double, collect)
    double.put(EndOfStream(0, 0))
    assert _wait_for(lambda: collect.ends == [0])
    assert double.ended == 1


# ---------------------------------------------------------------- queue waits


class Busy(Stage):
    """Message 1 blocks until released; each message notes how long it waited in the
    inbox while the stage was busy (``queue_wait_s``)."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__("busy", ctx)
        self.inside = threading.Event()
        self.release = threading.Event()
        self.waits: dict[int, float] = {}

    def process(self, msg):
        self.waits[msg.value] = self.queue_wait_s
        if msg.value == 1:
            self.inside.set()
            assert self.release.wait(WAIT_S)
        yield from ()


def test_a_message_behind_busy_work_knows_how_long_it_waited(make_ctx):
    ctx, stages = make_ctx()
    stage = Busy(ctx)
    stages.append(stage)
    stage.start()
    stage.put(Num(0, 0, 1))
    assert stage.inside.wait(WAIT_S)
    before_put = time.perf_counter()
    stage.put(Num(0, 0, 2))  # waits in the inbox behind message 1
    after_put = time.perf_counter()
    released = time.perf_counter()
    stage.release.set()
    assert _wait_for(lambda: 2 in stage.waits)
    seen = time.perf_counter()
    assert stage.waits[1] == 0.0  # the stage was idle: a plain hand-off
    # From its put until message 1 was done: at least from after the put to the release,
    # at most from before the put to the moment it was seen processed.
    assert released - after_put <= stage.waits[2] <= seen - before_put


# ---------------------------------------------------------------- models


class Modelled(Stage):
    """Records the model each message starts and ends with; message 1 blocks mid-way."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__("modelled", ctx, model="old")
        self.inside = threading.Event()
        self.release = threading.Event()
        self.during: list[tuple[int, str, str]] = []  # value, model at start, at end
        self.on_model_calls: list[tuple[str, object]] = []

    def process(self, msg):
        start_model = self.model
        if msg.value == 1:
            self.inside.set()
            assert self.release.wait(WAIT_S)
        self.during.append((msg.value, start_model, self.model))
        yield from ()

    def on_model(self) -> None:
        self.on_model_calls.append((threading.current_thread().name, self.model))


def test_use_model_on_a_running_stage_is_adopted_between_messages(make_ctx):
    ctx, stages = make_ctx()
    stage = Modelled(ctx)
    stages.append(stage)
    stage.start()
    stage.put(Num(1, 0, 1))
    assert stage.inside.wait(WAIT_S)
    adopted = stage.use_model("new")
    stage.put(Num(1, 0, 2))  # waits in the inbox behind message 1
    assert not adopted.wait(0.2)  # never in the middle of a message
    assert stage.model == "old" and stage.on_model_calls == []
    stage.release.set()
    assert adopted.wait(WAIT_S)
    assert _wait_for(lambda: len(stage.during) == 2)
    assert stage.during == [(1, "old", "old"), (2, "new", "new")]
    assert stage.on_model_calls == [(stage.thread_name, "new")]  # in the stage's thread


def test_use_model_on_an_idle_running_stage_is_adopted_promptly(make_ctx):
    ctx, stages = make_ctx()
    stage = Modelled(ctx)
    stages.append(stage)
    stage.start()
    adopted = stage.use_model("new")
    assert adopted.wait(WAIT_S)
    assert stage.model == "new"
    assert stage.on_model_calls == [(stage.thread_name, "new")]


def test_use_model_on_a_stage_not_running_adopts_at_once(make_ctx):
    ctx, _stages = make_ctx()
    stage = Modelled(ctx)
    adopted = stage.use_model("new")
    assert adopted.is_set()
    assert stage.model == "new"
    assert stage.on_model_calls == [(threading.current_thread().name, "new")]


def test_use_model_after_the_stage_stopped_adopts_at_once(make_ctx):
    ctx, stages = make_ctx()
    stage = Modelled(ctx)
    stages.append(stage)
    stage.start()
    ctx.stopping.set()
    assert stage.join(WAIT_S)
    adopted = stage.use_model("new")
    assert adopted.is_set() and stage.model == "new"


# ---------------------------------------------------------------- source stage


class FakeSource(AudioSource):
    """An in-memory AudioSource: blocks pushed by the test, finished once ended and empty."""

    sample_rate = PIPELINE_RATE

    def __init__(self, capacity: int = 8, fail_on_read: int | None = None) -> None:
        self._blocks: queue.Queue[AudioBlock] = queue.Queue()
        self._ended = False
        self._capacity = capacity
        self._fail_on_read = fail_on_read
        self.reads = 0
        self.opened = self.closed = False

    def push(self, value: float, n: int = 160) -> None:
        self._blocks.put(AudioBlock(np.full(n, value, np.float32), time.perf_counter()))

    def end(self) -> None:
        self._ended = True

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.closed = True

    def read(self, timeout: float) -> AudioBlock | None:
        self.reads += 1
        if self._fail_on_read is not None and self.reads >= self._fail_on_read:
            raise OSError("the device was unplugged")
        try:
            return self._blocks.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def finished(self) -> bool:
        return self._ended and self._blocks.empty()

    @property
    def buffered_blocks(self) -> int:
        return self._blocks.qsize()

    @property
    def buffer_capacity(self) -> int:
        return self._capacity


class BlockValues(SourceStage):
    """One Num per block (its first sample), and -1 when the source ends."""

    def __init__(self, ctx: StageContext, source: FakeSource) -> None:
        super().__init__("blocks", ctx, source)
        self.source_ends = 0

    def process_block(self, block: AudioBlock) -> Iterator[Message]:
        if block.samples[0] == 13:
            raise ValueError("bad block")
        yield Num(1, self.ctx.control.generation, int(block.samples[0]))

    def on_source_end(self) -> Iterator[Message]:
        self.source_ends += 1
        yield Num(1, self.ctx.control.generation, -1)


def _source_pipeline(make_ctx, source: FakeSource):
    ctx, stages = make_ctx()
    stage, collect = BlockValues(ctx, source), Collect(ctx)
    stage.connect(collect)
    stages += [stage, collect]
    return ctx, stage, collect


def test_a_source_stage_yields_messages_per_block_then_ends_the_stream(make_ctx):
    source = FakeSource()
    _ctx, stage, collect = _source_pipeline(make_ctx, source)
    _start(stage, collect)
    for v in (1, 2, 3):
        source.push(v)
    assert _wait_for(lambda: len(collect.got) == 3)
    assert collect.ends == [] and stage.source_ends == 0  # a live source is not finished
    source.push(4)
    source.end()
    assert _wait_for(lambda: collect.ends == [5])
    assert collect.values() == [1, 2, 3, 4, -1]  # on_source_end's message, then EndOfStream
    assert stage.source_ends == 1
    assert _wait_for(lambda: not stage.alive)  # a finished source ends the thread


def test_a_source_stage_goes_on_after_process_block_fails(make_ctx):
    source = FakeSource()
    ctx, stage, collect = _source_pipeline(make_ctx, source)
    errors = _errors(ctx)
    for v in (1, 13, 2):
        source.push(v)
    source.end()
    _start(stage, collect)
    assert _wait_for(lambda: collect.ends == [3])
    assert collect.values() == [1, 2, -1]
    assert [(e.stage, e.message) for e in errors] == [("blocks", "ValueError: bad block")]


class DecidesBetweenBlocks(BlockValues):
    """While ``due`` is set, asks to be woken every 4 ms between blocks and yields 99 once
    ``decided`` (set by another thread) is."""

    def __init__(self, ctx: StageContext, source: FakeSource) -> None:
        super().__init__(ctx, source)
        self.due, self.decided = threading.Event(), threading.Event()
        self.timeouts: list[float] = []
        self.at: float | None = None

    def between_blocks_s(self) -> float | None:
        return 0.004 if self.due.is_set() else None

    def between_blocks(self) -> Iterator[Message]:
        self.timeouts.append(time.perf_counter())
        if self.decided.is_set():
            self.due.clear()
            self.at = time.perf_counter()
            yield Num(1, self.ctx.control.generation, 99)


def test_a_source_stage_acts_between_blocks_only_while_asked_to(make_ctx):
    # A decision fed by another thread (the learned end of turn's scores) need not wait
    # for the next block: the stage polls for it while it is due, and not otherwise.
    source = FakeSource()
    ctx, stages = make_ctx()
    stage, collect = DecidesBetweenBlocks(ctx, source), Collect(ctx)
    stage.connect(collect)
    stages += [stage, collect]
    _start(stage, collect)
    source.push(1)
    assert _wait_for(lambda: collect.values() == [1])
    time.sleep(0.12)
    assert stage.timeouts == []  # nothing due: reads wait for blocks as before
    stage.due.set()
    time.sleep(0.05)
    decided = time.perf_counter()
    stage.decided.set()
    assert _wait_for(lambda: collect.values() == [1, 99])
    assert stage.at is not None and stage.at - decided < 0.05  # no block came meanwhile
    polls = len(stage.timeouts)
    assert polls >= 5
    time.sleep(0.12)
    assert len(stage.timeouts) == polls  # decided: no more polling
    source.push(2)
    assert _wait_for(lambda: collect.values() == [1, 99, 2])


def test_a_source_stage_queue_depth_is_the_sources_buffer(make_ctx):
    source = FakeSource(capacity=8)
    _ctx, stage, collect = _source_pipeline(make_ctx, source)
    assert stage.queue_depth() == (0, 8)
    for v in (1, 2, 3):
        source.push(v)
    assert stage.queue_depth() == (3, 8)
    _start(stage, collect)
    assert _wait_for(lambda: len(collect.got) == 3)
    assert stage.queue_depth() == (0, 8)


def test_a_source_whose_read_raises_reports_and_still_ends_the_stream(make_ctx):
    source = FakeSource(fail_on_read=3)
    ctx, stage, collect = _source_pipeline(make_ctx, source)
    errors = _errors(ctx)
    source.push(1)
    source.push(2)
    _start(stage, collect)
    assert _wait_for(lambda: len(collect.ends) == 1)
    assert collect.values()[:2] == [1, 2]
    assert len(errors) == 1
    assert errors[0].stage == "blocks"
    assert errors[0].message == "OSError: the device was unplugged"
    assert _wait_for(lambda: not stage.alive)
    assert source.reads == 3  # it stopped reading the failed source


def test_a_source_stage_drops_outputs_of_a_cancelled_generation(make_ctx):
    source = FakeSource()
    ctx, stages = make_ctx()

    class OldGeneration(BlockValues):
        def process_block(self, block):
            yield Num(1, 0, int(block.samples[0]))  # always made under generation 0

    stage, collect = OldGeneration(ctx, source), Collect(ctx)
    stage.connect(collect)
    stages += [stage, collect]
    source.push(1)
    _start(stage, collect)
    assert _wait_for(lambda: len(collect.got) == 1)
    ctx.control.cancel_all(1, "barge-in")
    source.push(2)
    source.end()
    assert _wait_for(lambda: len(collect.ends) == 1)
    assert collect.values() == [1, -1]
    stats = {s.name: s for s in ctx.metrics.stage_stats({"blocks": stage.queue_depth()})}
    assert stats["blocks"].dropped_stale == 1
