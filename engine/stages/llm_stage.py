"""LLM stage: final transcript -> streamed reply, cut into clauses for TTS."""

from __future__ import annotations

import time
from collections.abc import Iterator

from engine.chunker import ClauseChunker
from engine.config import LlmConfig
from engine.conversation import Conversation
from engine.events import ReplyText
from engine.messages import Message, TextChunk, Transcript
from engine.stage import Stage, StageContext


class LlmStage(Stage):
    """Owns this unit's LLM session (its KV cache) and its chat history."""

    def __init__(self, ctx: StageContext, model, config: LlmConfig,
                 conversation: Conversation) -> None:
        super().__init__("llm", ctx, maxsize=8)
        self.session = model.new_session()
        self.config = config
        self.conversation = conversation

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, Transcript):
            yield msg
            return
        if not msg.text:
            yield TextChunk(msg.turn_id, msg.generation, "", True)
            return
        unit, metrics, control = self.ctx.unit, self.ctx.metrics, self.ctx.control
        turn, gen = msg.turn_id, msg.generation
        start = time.perf_counter()
        metrics.mark(unit, turn, "llm_start", start, True, gen)
        chunker = ClauseChunker()
        spoken: list[str] = []
        step = None
        first = True

        def should_stop() -> bool:
            return control.is_stale(turn, gen) or self.ctx.stopping.is_set()

        def figure(name: str, value: float) -> None:
            metrics.figure(unit, turn, name, value, generation=gen)

        messages = self.conversation.messages_for(msg.text)
        figure("llm_history_turns", sum(m["role"] == "user" for m in messages) - 1)
        for step in self.session.generate(messages, self.config.max_new_tokens, should_stop):
            if step.tokens == 1:
                metrics.mark(unit, turn, "llm_first_token", time.perf_counter(), True, gen)
            for piece in chunker.feed(step.text):
                if first:
                    figure("llm_first_chunk_compute_s", time.perf_counter() - start)
                    first = False
                spoken.append(piece)
                yield self._chunk(turn, gen, piece)
            if chunker.sentences >= self.config.max_sentences:
                break
        if step is not None:
            figure("llm_tokens", step.tokens)
            figure("llm_tokens_per_s", step.tokens_per_second)
            figure("llm_prompt_tokens", step.prompt_tokens)
        if should_stop():
            # Cut off (barge-in, reopened turn, shutdown): record where it stopped.
            metrics.mark(unit, turn, "llm_stopped", time.perf_counter(), True, gen)
            return
        rest = chunker.flush() if chunker.sentences < self.config.max_sentences else ""
        capped = step is not None and step.tokens >= self.config.max_new_tokens
        if capped and spoken and rest and rest[-1] not in ".!?…\"')":
            rest = ""  # the token cap cut a sentence in half: end on the last whole one
        if rest:
            spoken.append(rest)
            if first:
                figure("llm_first_chunk_compute_s", time.perf_counter() - start)
        reply = " ".join(spoken)
        control.run_if_current(turn, gen, lambda: self.conversation.append(turn, msg.text, reply))
        yield self._chunk(turn, gen, rest, last=True)

    def _chunk(self, turn: int, gen: int, text: str, last: bool = False) -> TextChunk:
        if text:
            self.ctx.metrics.mark(self.ctx.unit, turn, "tts_first_text", time.perf_counter(),
                                  generation=gen)
            self.ctx.metrics.add_reply(self.ctx.unit, turn, text + " ", gen)
            self.ctx.gate.emit(turn, gen, ReplyText(self.ctx.unit, turn, text))
        return TextChunk(turn, gen, text, last)
