"""LLM stage: final transcript -> streamed reply, cut into clauses for TTS."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

from engine.backends.base import ChatMessage, GenerationOptions, LlmModel, LlmSession
from engine.stages.chunker import ClauseChunker
from engine.config import EndOfTurn
from engine.pipeline.chat_history import ChatHistory
from engine.pipeline.events import ReplyText, ToolCallsMade
from engine.pipeline.messages import Message, ReplyRequest, TextChunk, Transcript
from engine.pipeline.metrics import Figure, Mark
from engine.pipeline.stage import Stage, StageContext


class LlmStage(Stage[LlmModel]):
    """Owns this unit's LLM session (its KV cache); the chat history is the unit's.

    A new model (``use_model``) gets a new session: the next turn prefills the whole
    history on it, so the conversation goes on. ``reset_session`` empties the session's
    KV cache (a new conversation), likewise in the stage thread between two messages.
    """

    def __init__(self, ctx: StageContext, model: LlmModel, chat_history: ChatHistory) -> None:
        super().__init__("llm", ctx, model, maxsize=8)
        self.session = model.new_session()
        self._scorer: LlmSession | None = None  # the end-of-turn text signal's own session
        self.chat_history = chat_history
        self._reset_lock = threading.Lock()
        self._pending_reset: threading.Event | None = None

    def on_model(self) -> None:
        self.session = self.model.new_session()
        self._scorer = None

    def reset_session(self) -> threading.Event:
        """Ask for an empty KV cache; the event is set once the session was reset.

        The session is the stage thread's: it resets it between two messages (the next
        time it looks for a new model), never while it generates. A stage whose thread
        is not running resets it at once.
        """
        with self._reset_lock:
            if self._pending_reset is None:
                self._pending_reset = threading.Event()
            done = self._pending_reset
        if not self.alive:
            self.adopt_pending_model()
        return done

    def adopt_pending_model(self) -> None:
        """A new model first (it brings a new session), then a reset asked for."""
        super().adopt_pending_model()
        with self._reset_lock:
            done, self._pending_reset = self._pending_reset, None
        if done is not None:
            self.session.reset()
            done.set()

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, Transcript):
            yield msg
            return
        request = msg.request or self.ctx.reply
        if not msg.text and msg.request is None:  # nothing was said: nothing to answer
            yield TextChunk(msg.turn_id, msg.generation, "", True, request.speak)
            return
        unit, metrics, control = self.ctx.unit, self.ctx.metrics, self.ctx.control
        turn, gen = msg.turn_id, msg.generation
        config = self.ctx.config.llm  # one settings snapshot for the whole reply
        if (self.ctx.config.turns.end_of_turn is EndOfTurn.LEARNED and msg.text
                and not self.ctx.held.committed(turn) and self.model.end_of_turn_signal()):
            self._score_turn_end(turn, gen, msg.text)
        options = dataclasses.replace(
            GenerationOptions.from_config(config),
            tools=request.tools if request.tool_choice != "none" else (),
            tool_choice=request.tool_choice,
            max_new_tokens=request.max_new_tokens or config.max_new_tokens)
        start = time.perf_counter()
        waited = self.lock_waits_so_far()
        metrics.mark(unit, turn, Mark.LLM_START, start, True, gen)
        metrics.figure(unit, turn, Figure.QUEUE_WAIT_S, self.queue_wait_s, True, gen)
        chunker = ClauseChunker(self.ctx.config.tts.first_clause_words)
        spoken: list[str] = []
        step = None
        first = True
        speak = request.speak

        def should_stop() -> bool:
            return control.is_stale(turn, gen) or self.ctx.stopping.is_set()

        def figure(name: Figure, value: float) -> None:
            metrics.figure(unit, turn, name, value, generation=gen)

        def first_piece() -> None:
            figure(Figure.LLM_FIRST_CHUNK_COMPUTE_S, time.perf_counter() - start)
            figure(Figure.LLM_LOCK_WAIT_S, self.lock_waits_so_far() - waited)

        messages = self._messages(msg, request, config)
        figure(Figure.LLM_HISTORY_TURNS, max(0, sum(m["role"] == "user" for m in messages) - 1))
        for step in self.session.generate(messages, options, should_stop):
            if step.tokens == 1:
                metrics.mark(unit, turn, Mark.LLM_FIRST_TOKEN, time.perf_counter(), True, gen)
                metrics.figure_once(unit, turn, Figure.LLM_FIRST_TOKEN_S,
                                    time.perf_counter() - start, gen)
            for piece in chunker.feed(step.text):
                if first:
                    first_piece()
                    first = False
                spoken.append(piece)
                yield self._chunk(turn, gen, piece, speak=speak)
            if chunker.sentences >= config.max_sentences:
                break
        if step is not None:
            figure(Figure.LLM_TOKENS, step.tokens)
            figure(Figure.LLM_TOKENS_PER_S, step.tokens_per_second)
            figure(Figure.LLM_PROMPT_TOKENS, step.prompt_tokens)
        for name, value in self.session.figures.items():  # a remote model's network share
            figure(name, value)
        if should_stop():
            # Cut off (barge-in, reopened turn, shutdown): record where it stopped.
            metrics.mark(unit, turn, Mark.LLM_STOPPED, time.perf_counter(), True, gen)
            return
        rest = chunker.flush() if chunker.sentences < config.max_sentences else ""
        capped = step is not None and step.tokens >= options.max_new_tokens
        if capped and spoken and rest and rest.rstrip()[-1] not in ".!?…\"')":
            rest = ""  # the token cap cut a sentence in half: end on the last whole one
        if rest:
            spoken.append(rest)
            if first:
                first_piece()
        reply = " ".join(spoken)
        calls = step.tool_calls if step is not None and step.finished else ()
        if request.record:
            # A typed turn's text is the reply's user message; a reply to the conversation
            # as it stands (no text) adds only what the assistant said and called.
            user = msg.text if msg.text else None
            control.run_if_current(turn, gen, lambda: self.chat_history.append_turn(
                turn, user, reply, calls))
        if calls:
            self.ctx.held.emit(turn, gen, ToolCallsMade(unit, turn, calls))
        yield self._chunk(turn, gen, rest, last=True, speak=speak)

    def _score_turn_end(self, turn: int, gen: int, text: str) -> None:
        """A speculative turn under learned end of turn: how likely the user's words end a
        sentence, for the source stage to weigh with the audio model. Scored on the words
        alone, in a session of its own (a few tokens, since revisions of a turn share their
        start): with the conversation in the prompt the signal drifted with the history."""
        if self._scorer is None:
            self._scorer = self.model.new_session()
        self.ctx.turn_end.post_text(turn, gen, self._scorer.sentence_end_probability(text))

    def _messages(self, msg: Transcript, request: ReplyRequest, config) -> list[ChatMessage]:
        """The prompt: the request's own context, else the history, then the user's text."""
        system = config.system_prompt if request.instructions is None else request.instructions
        if request.context is None:
            return self.chat_history.messages_for(msg.text or None, system, config.history_turns)
        user = [{"role": "user", "content": msg.text}] if msg.text else []
        return [{"role": "system", "content": system}, *request.context, *user]

    def _chunk(self, turn: int, gen: int, text: str, last: bool = False,
               speak: bool = True) -> TextChunk:
        if text:
            self.ctx.metrics.mark(self.ctx.unit, turn, Mark.TTS_FIRST_TEXT, time.perf_counter(),
                                  generation=gen)
            self.ctx.metrics.add_reply(self.ctx.unit, turn, text + " ", gen)
            self.ctx.held.emit(turn, gen, ReplyText(self.ctx.unit, turn, text))
        return TextChunk(turn, gen, text, last, speak)
