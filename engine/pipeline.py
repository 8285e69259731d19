"""One pipeline unit: source -> VAD -> STT -> LLM -> TTS -> sink, wired by bounded queues."""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.audio.base import AudioSink, AudioSource
from engine.config import EngineConfig
from engine.control import TurnControl
from engine.conversation import BARGE_IN, Conversation
from engine.events import EventHub, TurnCancelled
from engine.metrics import Metrics
from engine.stage import Stage, StageContext
from engine.stages.llm_stage import LlmStage
from engine.stages.sink_stage import SinkStage
from engine.stages.stt_stage import SttStage
from engine.stages.tts_stage import TtsStage
from engine.stages.vad_stage import PartialGate, VadStage


class PipelineUnit:
    """The stages of one conversation over shared models. Start once, stop once."""

    def __init__(self, unit: int, config: EngineConfig, models: dict[str, object],
                 source: AudioSource, sink: AudioSink, metrics: Metrics, events: EventHub,
                 next_turn_id: Callable[[], int]) -> None:
        self.unit = unit
        self.source = source
        self.sink = sink
        self.control = TurnControl()
        self.ctx = StageContext(unit, self.control, metrics, events)
        self.conversation = Conversation(config.llm.system_prompt, config.llm.history_turns)
        self.control.on_cancel(self.conversation.on_cancel)
        gate = PartialGate()
        self.sink_stage = SinkStage(self.ctx, sink)
        self.vad = VadStage(self.ctx, config, models["vad"], source, sink, self.sink_stage, gate,
                            next_turn_id)
        self.stt = SttStage(self.ctx, models["stt"], config.stt.language, gate)
        self.llm = LlmStage(self.ctx, models["llm"], config.llm, self.conversation)
        self.tts = TtsStage(self.ctx, models["tts"])
        self.vad.connect(self.stt).connect(self.llm).connect(self.tts).connect(self.sink_stage)
        self.stages: tuple[Stage, ...] = (self.vad, self.stt, self.llm, self.tts, self.sink_stage)
        self._started = False

    def start(self) -> None:
        """Open the sound devices and start every stage thread."""
        self.sink.open()
        try:
            self.source.open()
        except BaseException:
            self.sink.close()
            raise
        for stage in self.stages:
            stage.start()
        self._started = True

    def interrupt(self) -> None:
        """Cut off the reply in progress, as a barge-in would."""
        turn = self.vad.turn_id
        self.control.cancel_all(turn, BARGE_IN)
        self.sink.flush()
        self.ctx.metrics.set_cancelled(self.unit, turn)
        self.ctx.events.emit(TurnCancelled(self.unit, turn, BARGE_IN))

    @property
    def drained(self) -> threading.Event:
        """Set when the input ended and every reply was played."""
        return self.sink_stage.drained

    def stop(self, timeout: float) -> list[str]:
        """Stop and join everything; returns the names of threads that did not end."""
        self.ctx.stopping.set()
        self.control.cancel_all(self.vad.turn_id, BARGE_IN)  # LLM/TTS loops stop at once
        self.source.close()
        self.sink.flush()
        stuck = [s.name for s in self.stages if not s.join(timeout)]
        self.sink.close()
        return stuck

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        return {s.name: s.queue_depth() for s in self.stages}
