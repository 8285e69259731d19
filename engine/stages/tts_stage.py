"""TTS stage: reply clauses -> audio chunks, checking for cancellation per chunk.

The reply text stays as the LLM wrote it everywhere else (screen, history); here, right
before synthesis and only here, it becomes what the voice says (``speakable``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from engine.backends.base import TtsModel
from engine.pipeline.messages import AudioOut, Message, TextChunk
from engine.pipeline.metrics import Figure, Mark
from engine.stages.speech_text import speakable
from engine.pipeline.stage import Stage, StageContext
from engine.runtime.compute_gate import Urgency, get_compute_gate


class TtsStage(Stage[TtsModel]):
    """Runs the shared TTS model in this unit's thread."""

    def __init__(self, ctx: StageContext, model: TtsModel) -> None:
        super().__init__("tts", ctx, model, maxsize=16)

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, TextChunk):
            yield msg
            return
        unit, metrics, turn, gen = self.ctx.unit, self.ctx.metrics, msg.turn_id, msg.generation
        text = speakable(msg.text) if msg.speak else ""
        if text:
            options = self.ctx.config.tts
            start = time.perf_counter()
            waited = self.lock_waits_so_far()
            audio_s = 0.0
            clause = msg.text  # on the clause's first chunk: playback learns what is heard when
            for chunk in self.computed(self.model.synthesize(
                    text, lambda: self.is_stale(msg), options.voice, options.speed)):
                if self.is_stale(msg):
                    return
                now = time.perf_counter()
                if metrics.figure_once(unit, turn, Figure.TTS_FIRST_COMPUTE_S, now - start, gen):
                    metrics.mark(unit, turn, Mark.TTS_FIRST_AUDIO, now, generation=gen)
                    get_compute_gate().set_urgency(unit, Urgency.REPLY)  # someone hears it now
                    metrics.figure(unit, turn, Figure.TTS_LOCK_WAIT_S,
                                   self.lock_waits_so_far() - waited, generation=gen)
                    metrics.figure(unit, turn, Figure.QUEUE_WAIT_S, self.queue_wait_s, True, gen)
                    for name, value in chunk.figures.items():  # a remote model's network share
                        metrics.figure(unit, turn, name, value, generation=gen)
                audio_s += len(chunk.audio) / chunk.sample_rate
                yield AudioOut(turn, gen, chunk.audio, chunk.sample_rate, False, clause)
                if chunk.audio.size:
                    clause = ""
            if audio_s:
                metrics.figure(unit, turn, Figure.TTS_COMPUTE_S, time.perf_counter() - start, True, gen)
                metrics.figure(unit, turn, Figure.TTS_AUDIO_S, audio_s, True, gen)
        if msg.last:
            yield AudioOut(turn, gen, np.zeros(0, np.float32), self.model.sample_rate, True)
