"""TTS stage: reply clauses -> audio chunks, checking for cancellation per chunk."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from engine.messages import AudioOut, Message, TextChunk
from engine.stage import Stage, StageContext


class TtsStage(Stage):
    """Runs the shared TTS model in this unit's thread."""

    def __init__(self, ctx: StageContext, model) -> None:
        super().__init__("tts", ctx, maxsize=16)
        self.model = model

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, TextChunk):
            yield msg
            return
        unit, metrics = self.ctx.unit, self.ctx.metrics
        if msg.text.strip():
            start = time.perf_counter()
            audio_s = 0.0
            for chunk in self.model.synthesize(msg.text, lambda: self.is_stale(msg)):
                if self.is_stale(msg):
                    return
                now = time.perf_counter()
                if metrics.figure_once(unit, msg.turn_id, "tts_first_compute_s", now - start,
                                       msg.generation):
                    metrics.mark(unit, msg.turn_id, "tts_first_audio", now, generation=msg.generation)
                audio_s += len(chunk.audio) / chunk.sample_rate
                yield AudioOut(msg.turn_id, msg.generation, chunk.audio, chunk.sample_rate, False)
            if audio_s:
                metrics.figure(unit, msg.turn_id, "tts_compute_s", time.perf_counter() - start, True,
                               msg.generation)
                metrics.figure(unit, msg.turn_id, "tts_audio_s", audio_s, True, msg.generation)
        if msg.last:
            yield AudioOut(msg.turn_id, msg.generation, np.zeros(0, np.float32),
                           self.model.sample_rate, True)
