"""``tests.support.stage_harness``: a stage run without a pipeline does with each message
what its thread does (outputs of a cancelled turn dropped, failures reported and the turn
ended, the end of the stream passed on), and gives back its outputs and events."""

from __future__ import annotations

from collections.abc import Iterator

from engine.pipeline.control import CancelReason
from engine.pipeline.events import EngineError, Notice, TurnCancelled
from engine.pipeline.messages import EndOfStream, Message, TextChunk
from engine.pipeline.stage import Stage, StageContext
from tests.support.stage_harness import run_stage, stage_context


class Shout(Stage[None]):
    """Upper-cases each chunk and tells its turn's listeners (held until the commit); fails
    on "boom", and cancels the turn it works on when the chunk says "cut"."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__("shout", ctx)
        self.seen: list[str] = []
        self.ended = 0

    def process(self, msg: Message) -> Iterator[Message]:
        assert isinstance(msg, TextChunk)
        self.seen.append(msg.text)
        if msg.text == "boom":
            raise RuntimeError("boom")
        if msg.text == "cut":
            self.ctx.control.cancel_turn(msg.turn_id, CancelReason.REOPENED)
        self.ctx.held.emit(msg.turn_id, msg.generation, Notice(self.ctx.unit, self.name, msg.text))
        yield TextChunk(msg.turn_id, msg.generation, msg.text.upper(), msg.last)

    def on_end(self) -> None:
        self.ended += 1


def test_outputs_come_in_order_and_a_turns_events_wait_for_its_commit():
    stage = Shout(stage_context(unit=3))
    out, events = run_stage(stage, [TextChunk(1, 0, "hello", False), TextChunk(1, 0, "there", True)])
    assert [(m.text, m.last) for m in out if isinstance(m, TextChunk)] == [("HELLO", False),
                                                                         ("THERE", True)]
    assert events == []  # speculative: held
    _out, released = run_stage(stage, [TextChunk(2, 0, "now", True)], commit=True)
    assert [(e.unit, e.message) for e in released if isinstance(e, Notice)] == [(3, "now")]
    assert stage.downstream is None  # the harness's collector is gone again


def test_a_cancelled_message_is_skipped_unless_it_was_taken_and_a_cancelled_output_is_dropped():
    ctx = stage_context()
    stage = Shout(ctx)
    ctx.control.cancel_turn(1, CancelReason.REOPENED)
    assert run_stage(stage, [TextChunk(1, 0, "old", True)]) == ([], [])
    assert stage.seen == []
    out, _events = run_stage(stage, [TextChunk(1, 0, "old", True)], skip_stale=False)
    assert stage.seen == ["old"] and out == []
    current = ctx.control.generation
    out, _events = run_stage(stage, [TextChunk(2, current, "cut", True)])
    assert stage.seen == ["old", "cut"] and out == []


def test_a_failure_is_reported_and_ends_its_turn_and_the_end_of_the_stream_passes():
    stage = Shout(stage_context())
    out, events = run_stage(stage, [TextChunk(4, 0, "boom", False), TextChunk(5, 0, "next", True),
                                    EndOfStream(0, 0)], commit=True)
    errors = [e for e in events if isinstance(e, EngineError)]
    assert [(e.stage, e.message, e.turn_id) for e in errors] == [("shout", "RuntimeError: boom", 4)]
    assert [(e.turn_id, e.reason) for e in events if isinstance(e, TurnCancelled)] == [
        (4, CancelReason.FAILED)]
    assert [type(m).__name__ for m in out] == ["TextChunk", "EndOfStream"]
    assert stage.ended == 1
