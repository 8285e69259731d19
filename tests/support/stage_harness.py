"""One stage driven without a pipeline, as pipecat's ``run_test`` drives one processor.

``stage_context`` builds what the stages of one unit share (``StageContext``: fresh turn
control, metrics and event hub, the default settings), and ``run_stage`` feeds a stage
messages in order, as its thread does with each message it takes, and returns what the
stage sent downstream and the events that went out meanwhile::

    ctx = stage_context(config=config)
    stage = LlmStage(ctx, model, ChatHistory())
    out, events = run_stage(stage, [Transcript(1, 0, "Hello.", True, 0.0)], commit=True)

The messages are processed in the calling thread, one after another, so a test may change
the turn's state (cancel it, commit it) between two runs, or run a stage that waits on a
thread of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from engine.config import EngineConfig
from engine.pipeline.control import TurnControl
from engine.pipeline.events import Event, EventHub
from engine.pipeline.messages import EndOfStream, Message
from engine.pipeline.metrics import Metrics
from engine.pipeline.stage import Stage, StageContext
from engine.stages.end_of_turn.policy import EndOfTurnPolicy


def stage_context(*, config: EngineConfig | None = None, unit: int = 0) -> StageContext:
    """The ``StageContext`` of pipeline unit ``unit`` with its own turn control, metrics
    and event hub, ``config`` (the default settings when None), and an end-of-turn policy
    without models (no audio model: nothing commits early), as a unit's without them."""
    control = TurnControl()
    # The policy reads the context's settings and held turns when asked, once it exists.
    policy = EndOfTurnPolicy(unit, lambda: ctx.config, lambda turn: ctx.held.committed(turn),
                             control.is_stale)
    ctx = StageContext(unit, control, Metrics(), EventHub(),
                       EngineConfig() if config is None else config, end_of_turn=policy)
    return ctx


class _Downstream(Stage[None]):
    """Keeps what the stage under test sends downstream; it has no thread of its own."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__("downstream", ctx)
        self.got: list[Message] = []

    def put(self, msg: Message) -> bool:
        self.got.append(msg)
        return True


def run_stage(stage: Stage[Any], messages: Iterable[Message], *, commit: bool = False,
              skip_stale: bool = True) -> tuple[list[Message], list[Event]]:
    """Feed ``messages`` to ``stage`` in order and return ``(out, events)``: what it sent
    downstream, and the events that went out to the unit's listeners during the run.

    Each message goes through the stage thread's own step: an output whose turn was
    cancelled meanwhile is dropped, a failure is reported (an ``EngineError`` event) and
    ends its turn, and ``EndOfStream`` calls ``on_end`` and is passed on.

    ``commit``: each message's turn is committed before it is processed (the user has
    finished speaking), so the turn's events go out at once; otherwise they wait for the
    commit, as a speculative turn's do. ``skip_stale``: a message of a cancelled generation
    is dropped unprocessed, as the stage's inbox drops it; False processes it anyway, as a
    message the stage took just before its turn was cancelled.
    """
    ctx = stage.ctx
    downstream, before = _Downstream(ctx), stage.downstream
    events: list[Event] = []
    unsubscribe = ctx.events.subscribe(events.append)
    stage.connect(downstream)
    try:
        with ctx.compute.working():
            for msg in messages:
                if isinstance(msg, EndOfStream):
                    stage.on_end()
                    stage.emit(msg)
                    continue
                if commit:
                    ctx.held.commit(msg.turn_id)
                if skip_stale and stage.is_stale(msg):
                    ctx.metrics.dropped_stale(stage.name)
                else:
                    # The thread's step itself (not a copy): what the stage does with a
                    # message's outputs and failures is what is tested.
                    stage._forward(functools.partial(stage.process, msg), msg)
    finally:
        stage.downstream = before
        unsubscribe()
    return downstream.got, events
