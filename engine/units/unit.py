"""One pipeline unit: source -> VAD -> STT -> LLM -> TTS -> sink, wired by bounded queues."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from engine.audio.base import AudioSink, AudioSource
from engine.audio.echo import canceller_for
from engine.backends.base import LlmModel, StageModels, model_of
from engine.config import EngineConfig
from engine.measures import Mark
from engine.pipeline.control import CancelReason, TurnControl
from engine.pipeline.chat_history import ChatHistory
from engine.pipeline.events import EngineError, EventHub
from engine.pipeline.messages import PLAIN_REPLY, ReplyRequest, TextChunk, Transcript
from engine.pipeline.metrics import Metrics, TurnKind
from engine.pipeline.playback import Playback
from engine.pipeline.stage import SourceStage, Stage, StageContext
from engine.stages.llm_stage import LlmStage
from engine.stages.sink_stage import SinkStage
from engine.stages.stt_stage import SttStage
from engine.stages.tts_stage import TtsStage
from engine.stages.vad_stage import PartialSequence, VadStage
from engine.stages.end_of_turn.board import AudioScorer
from engine.stages.end_of_turn.policy import AudioModel, EndOfTurnPolicy


class PipelineUnit:
    """The stages of one conversation over shared models. Start once, stop once.

    The unit owns its turn state, chat history and LLM session; the models are shared.
    ``apply`` changes its settings and models while it runs, keeping the conversation.
    """

    def __init__(self, unit: int, config: EngineConfig, models: StageModels,
                 source: AudioSource, sink: AudioSink, metrics: Metrics, events: EventHub,
                 next_turn_id: Callable[[], int], turn_model: AudioModel | None = None,
                 summarize_history: bool = True, text_model: LlmModel | None = None) -> None:
        """``turn_model``: the shared end-of-turn audio model (``SmartTurn``), or None.
        ``text_model``: the learned end of turn's own text-signal model (the bundled small
        model, where ``turns.text_signal`` wants it with this reply LLM), or None.
        ``summarize_history`` False: this unit never summarises the turns its prompt no
        longer keeps, whatever ``llm.summarize_history`` says (a realtime client's unit)."""
        self.unit = unit
        self._next_turn_id = next_turn_id
        self._typed_turn = 0  # the latest turn started by ``say``
        self.source = source
        self.sink = sink
        self.control = TurnControl()
        # Built with the context, before the stages, which ask it (silence or learned, the
        # scorers, the decision); it reads the context's settings and held turns when asked.
        self.end_of_turn = EndOfTurnPolicy(unit, lambda: self.ctx.config,
                                           lambda turn: self.ctx.held.committed(turn),
                                           self.control.is_stale, audio_model=turn_model,
                                           text_model=text_model, on_error=self._turn_scorer_failed)
        self.ctx = StageContext(unit, self.control, metrics, events, config,
                                end_of_turn=self.end_of_turn)
        # A barged-in reply keeps, in the history, the words that were heard.
        self.chat_history = ChatHistory(heard=lambda turn: self.playback.heard_text(turn))
        self.control.on_cancel(self.chat_history.on_cancel)
        # One echo canceller per unit: playback feeds it what is heard, the VAD stage cleans
        # the input with it (None without livekit, or when the reply is not on a speaker).
        self.echo = canceller_for(lambda: self.ctx.config, sink)
        self.playback = Playback(unit, sink, self.control, metrics, events,
                                 echo=None if self.echo is None else self.echo.tap(sink))
        partials = PartialSequence()
        self.vad = VadStage(self.ctx, model_of(models, "vad"), source, self.playback, partials,
                            next_turn_id, echo=self.echo)
        self.stt = SttStage(self.ctx, model_of(models, "stt"), partials)
        self.llm = LlmStage(self.ctx, model_of(models, "llm"), self.chat_history,
                            summarize=summarize_history)
        self.tts = TtsStage(self.ctx, model_of(models, "tts"))
        self.sink_stage = SinkStage(self.ctx, self.playback)
        self.vad.connect(self.stt).connect(self.llm).connect(self.tts).connect(self.sink_stage)
        self.stages = (self.vad, self.stt, self.llm, self.tts, self.sink_stage)
        # By stage name, for ``apply``: each takes the model the registry loaded for its stage.
        self._models: dict[str, SourceStage[Any] | Stage[Any]] = {
            "vad": self.vad, "stt": self.stt, "llm": self.llm, "tts": self.tts}

    @property
    def turn_scorer(self) -> AudioScorer | None:
        """The end-of-turn audio model's scorer, or None (learned end of turn unavailable)."""
        return self.end_of_turn.audio_scorer

    @property
    def config(self) -> EngineConfig:
        return self.ctx.config

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
        self.end_of_turn.start()

    def _turn_scorer_failed(self, message: str) -> None:
        self.ctx.events.emit(EngineError(self.unit, "turn", f"end-of-turn model failed: {message}; "
                                         "this turn waits for the reopen grace"))

    def apply(self, config: EngineConfig, models: StageModels) -> None:
        """Run on ``config`` from the next message on, with ``models`` (stage -> model)
        replacing the current ones; returns once every stage uses its new model."""
        self.ctx.config = config
        pending = [(self._models[stage], self._models[stage].use_model(model))
                   for stage, model in models.items()]
        for stage, adopted in pending:
            while not adopted.wait(0.1) and not self.ctx.stopping.is_set():
                if not stage.alive:  # its input ended meanwhile: nobody else will adopt it
                    stage.adopt_pending_model()

    def say(self, text: str, request: ReplyRequest = PLAIN_REPLY, turn: int | None = None) -> int:
        """A typed user message: answered like a committed spoken turn; returns its id.

        ``text`` "" answers the conversation as it stands (a greeting, or the reply after
        a tool's output); ``request`` says how (``ReplyRequest``). It goes straight to the
        LLM stage (no audio, no STT). May wait while the LLM's queue is full: call it off
        an event loop. The turn's record says it was typed (``TurnKind.TYPED``).
        ``turn``: answer in the turn ``speak`` opened, after the words it spoke.
        """
        now = time.perf_counter()
        if turn is None:
            turn = self._open_typed_turn(text, now)
        # Typed words are in the language set (stt.language; None with auto: unknown).
        self.llm.put(Transcript(turn, self.control.generation, text, True, now, request=request,
                                language=self.ctx.config.stt.spoken_language))
        return turn

    def speak(self, text: str, turn: int | None = None, *, ends_turn: bool = False) -> int:
        """Words spoken without the LLM (a tool's acknowledgement, an apology) in ``turn``,
        before its reply (``say(..., turn=turn)``); None opens a new typed turn for them.
        ``ends_turn``: the words are the turn's whole reply, and it finishes once they
        were played (``TurnFinished``: Parley's MCP ``speak``).
        Speech or an interrupt cuts them off like any reply; they are not the model's, so
        neither the chat history nor the reply text holds them. Returns the turn."""
        if turn is None:
            turn = self._open_typed_turn("", time.perf_counter())
        self.tts.put(TextChunk(turn, self.control.generation, text, ends_turn))
        return turn

    def _open_typed_turn(self, text: str, now: float) -> int:
        """A new turn, committed at once (nothing to wait for: no speech can reopen it)."""
        turn = self._typed_turn = self._next_turn_id()
        metrics, unit = self.ctx.metrics, self.unit
        turn_metrics = metrics.for_turn(unit, turn)
        for mark in (Mark.SPEECH_START, Mark.SPEECH_END, Mark.COMMITTED):
            turn_metrics.mark(mark, now)
        turn_metrics.set_transcript(text)
        metrics.set_kind(unit, turn, TurnKind.TYPED)
        self.ctx.held.commit(turn)
        self.playback.commit(turn)
        self.vad.note_reply(turn)
        return turn

    def set_reply_defaults(self, request: ReplyRequest) -> None:
        """How every reply is made from now on unless a typed turn says otherwise (a
        Realtime session's tools and output modalities)."""
        self.ctx.reply = request

    def truncate_reply(self, turn: int, seconds: float) -> str:
        """Only the first ``seconds`` of ``turn``'s reply were heard: the history keeps
        just those words (as a barge-in does). Returns the words kept."""
        heard = self.playback.heard_text(turn, seconds)
        record = self.ctx.metrics.turn(self.unit, turn)
        self.chat_history.keep_heard(turn, record.transcript if record and record.transcript
                                     else None, heard)
        return heard

    def interrupt(self) -> None:
        """Cut off the reply in progress, as a barge-in would."""
        # Turn ids only grow: the newer of the spoken and the typed turn is the one answered.
        self.vad.cut_off(max(self.vad.turn_id, self._typed_turn))

    def new_conversation(self, timeout: float = 10.0) -> bool:
        """Start over: cut off any turn in flight, forget the chat history and empty the
        LLM session's KV cache. Returns True once the KV cache was reset (False if
        ``timeout`` passed first, or the unit stopped: it is then reset before its next
        message). Blocks up to ``timeout``: call it off an event loop.

        A reply in flight is cut off as by ``interrupt`` (and reported cancelled); work
        queued for it is dropped. The LLM stage resets its session in its own thread,
        between two messages, since it may be generating right now.
        """
        turn = max(self.vad.turn_id, self._typed_turn)
        record = self.ctx.metrics.turn(self.unit, turn) if turn else None
        if record is not None and not record.finished and not record.cancelled:
            self.interrupt()  # heard or on its way: cut off and reported, as Interrupt does
        # Every generation so far becomes stale: queued transcripts and clauses are dropped,
        # and an LLM reply finishing now cannot add its exchange (run_if_current).
        self.control.cancel_all(turn, CancelReason.NEW_CONVERSATION)
        self.playback.cut()
        self.chat_history.clear()
        reset = self.llm.reset_session()
        deadline = time.monotonic() + timeout
        while not reset.wait(0.1):
            if self.ctx.stopping.is_set() or time.monotonic() > deadline:
                return False
            if not self.llm.alive:  # its input ended meanwhile: nobody else will reset it
                self.llm.adopt_pending_model()
        return True

    @property
    def drained(self) -> threading.Event:
        """Set when the input ended and every reply was played."""
        return self.sink_stage.drained

    def stop(self, timeout: float) -> list[str]:
        """Stop and join everything; returns the names of threads that did not end."""
        self.ctx.stopping.set()
        self.control.cancel_all(self.vad.turn_id, CancelReason.BARGE_IN)  # LLM/TTS loops stop at once
        self.source.close()
        self.playback.cut()
        stuck = [s.name for s in self.stages if not s.join(timeout)]
        if not self.end_of_turn.stop(timeout):
            stuck.append("turn")
        self.sink.close()
        return stuck

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        return {s.name: s.queue_depth() for s in self.stages}
