"""Sink stage: hands reply audio to playback, and signals when everything was heard."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from engine.pipeline.messages import AudioOut, Message
from engine.pipeline.playback import Playback
from engine.pipeline.stage import Stage, StageContext


class SinkStage(Stage[None]):
    """The last stage: offers each reply chunk to ``Playback`` (which holds it until the
    turn is committed) and sets ``drained`` once the input ended and all was heard."""

    def __init__(self, ctx: StageContext, playback: Playback) -> None:
        super().__init__("sink", ctx, None, maxsize=64)
        self.playback = playback
        self.drained = threading.Event()

    def process(self, msg: Message) -> Iterator[Message]:
        if isinstance(msg, AudioOut):
            self.playback.offer(msg)
        return iter(())

    def on_end(self) -> None:
        # Everything before EndOfStream is queued in the sink: wait until it was heard.
        while not self.ctx.stopping.is_set() and not self.playback.wait_idle(0.1):
            pass
        self.drained.set()
