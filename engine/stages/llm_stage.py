"""LLM stage: final transcript -> streamed reply, cut into clauses for TTS."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator

from engine.backends.base import ChatMessage, GenerationOptions, LlmModel, LlmSession, LlmStep
from engine.runtime.failures import describe_failure
from engine.backends.languages import reply_instruction
from engine.stages.chunker import ClauseChunker
from engine.backends.llm.text_stream import ThinkFilter
from engine.measures import Figure, Mark
from engine.pipeline.chat_history import ChatHistory, SummaryWork
from engine.pipeline.control import CancelReason
from engine.pipeline.events import EngineError, HistorySummarized, ReplyText, ToolCallsMade
from engine.pipeline.messages import Message, ReplyRequest, TextChunk, Transcript
from engine.pipeline.stage import Stage, StageContext
from engine.runtime.compute_gate import Urgency
from engine.stages.end_of_turn.speculation import SpeculationBudget, speculation_limit
from engine.stages.summary import NOTE_TOKENS, clean_note, grow_summary, note_messages

log = logging.getLogger("parley.llm")
#: How often a speculative revision past its budget looks whether its turn was committed.
_COMMIT_POLL_S = 0.005


class LlmStage(Stage[LlmModel]):
    """Owns this unit's LLM session (its KV cache); the chat history is the unit's.

    A new model (``use_model``) gets a new session: the next turn prefills the whole
    history on it, so the conversation goes on. ``reset_session`` empties the session's
    KV cache (a new conversation), likewise in the stage thread between two messages.

    Between turns (``idle``: the inbox empty, the last reply played), the turns the
    prompt no longer keeps are summarised in a session of their own (``llm.summarize_history``;
    ``summarize`` False turns it off for this unit); a new message cancels the summary at
    its next token, and it is redone at the next pause.
    """

    def __init__(self, ctx: StageContext, model: LlmModel, chat_history: ChatHistory,
                 summarize: bool = True) -> None:
        super().__init__("llm", ctx, model, maxsize=8)
        self.session = model.new_session()
        self._speculation = SpeculationBudget()  # speculative requests per turn (remote LLM)
        self._spent: dict[int, tuple[int, int, int]] = {}  # turn -> requests, prompt, completion
        self._summarizer: LlmSession | None = None  # the history summary's own session
        self.chat_history = chat_history
        self._reset_lock = threading.Lock()
        self._pending_reset: threading.Event | None = None
        self._summarize = summarize
        self._last_turn = 0  # the turn answered last: the summary waits for its reply's end
        self._summary_failed = -1  # the turn after which a summary failed: retried after the next

    def on_model(self) -> None:
        self.session = self.model.new_session()
        self.ctx.end_of_turn.reset_text()
        self._summarizer = None

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
            if self._summarizer is not None:
                self._summarizer.reset()
            self._summary_failed = -1
            done.set()

    def is_stale(self, msg: Message) -> bool:
        """A spoken turn's words whose reply a barge-in cut off before it started are
        still taken (``process`` keeps them in the history, and answers nothing)."""
        if self._words_only(msg):
            return False
        return super().is_stale(msg)

    def _words_only(self, msg: Message) -> bool:
        return (isinstance(msg, Transcript) and msg.final and msg.request is None
                and self.ctx.control.only_reply_cut(msg.turn_id, msg.generation))

    def process(self, msg: Message) -> Iterator[Message]:
        if not isinstance(msg, Transcript):
            yield msg
            return
        if self._words_only(msg):
            if msg.text:
                self.chat_history.keep_cut_off(msg.turn_id, msg.text, CancelReason.BARGE_IN)
            return
        request = msg.request or self.ctx.reply
        if not msg.text and msg.request is None:  # nothing was said: nothing to answer
            yield TextChunk(msg.turn_id, msg.generation, "", True, request.speak)
            return
        if not request.answer:  # the words are only heard (Parley's MCP ``listen``)
            yield TextChunk(msg.turn_id, msg.generation, "", True, False)
            return
        unit, control = self.ctx.unit, self.ctx.control
        turn, gen = msg.turn_id, msg.generation
        turn_metrics = self.ctx.metrics.for_turn(unit, turn, gen)
        self._last_turn = turn
        config = self.ctx.config.llm  # one settings snapshot for the whole reply
        if msg.text and self.ctx.end_of_turn.wants_text(turn, self.model):
            scored, waited = time.perf_counter(), self.lock_waits_so_far()
            self._score_turn_end(turn, gen, (msg.text, *msg.other_readings))
            waited = self.lock_waits_so_far() - waited
            # On the critical path (the reply starts after it): its own part of the budget.
            turn_metrics.figure(Figure.EOT_TEXT_S, max(0.0, time.perf_counter() - scored - waited))
            turn_metrics.figure(Figure.EOT_TEXT_LOCK_WAIT_S, waited)
        if not self._may_request(turn, gen):
            return  # the revision was dropped (or the unit stops) before its commit
        options = dataclasses.replace(
            GenerationOptions.from_config(config),
            tools=request.tools if request.tool_choice != "none" else (),
            tool_choice=request.tool_choice,
            max_new_tokens=request.max_new_tokens or config.max_new_tokens)
        start = time.perf_counter()
        waited = self.lock_waits_so_far()
        turn_metrics.mark(Mark.LLM_START, start, overwrite=True)
        turn_metrics.add(Figure.QUEUE_WAIT_S, self.queue_wait_s)
        chunker = ClauseChunker(self.ctx.config.tts.first_clause_words, msg.language)
        # Reasoning a backend passes on (a remote server's Qwen3): never shown, spoken or kept.
        thinking = ThinkFilter()
        spoken: list[str] = []
        step = None
        first = True
        speak = request.speak

        def should_stop() -> bool:
            return control.is_stale(turn, gen) or self.ctx.stopping.is_set()

        def first_piece() -> None:
            turn_metrics.figure(Figure.LLM_FIRST_CHUNK_COMPUTE_S, time.perf_counter() - start)
            turn_metrics.figure(Figure.LLM_LOCK_WAIT_S, self.lock_waits_so_far() - waited)
            if not speak:  # its text is what the user waited for (TTS marks spoken ones)
                self.ctx.compute.set_urgency(Urgency.REPLY)

        messages = self._messages(msg, request, config)
        turn_metrics.figure(Figure.LLM_HISTORY_TURNS, max(0, sum(m["role"] == "user" for m in messages) - 1))
        for step in self.computed(self.session.generate(messages, options, should_stop)):
            if step.tokens == 1:
                turn_metrics.mark(Mark.LLM_FIRST_TOKEN, time.perf_counter(), overwrite=True)
                turn_metrics.figure_once(Figure.LLM_FIRST_TOKEN_S, time.perf_counter() - start)
            for piece in chunker.feed(thinking.feed(step.text)):
                if first:
                    first_piece()
                    first = False
                spoken.append(piece)
                yield self._chunk(turn, gen, piece, speak=speak, language=msg.language)
            if chunker.sentences >= config.max_sentences:
                break
        if step is not None:
            turn_metrics.figure(Figure.LLM_TOKENS, step.tokens)
            turn_metrics.figure(Figure.LLM_TOKENS_PER_S, step.tokens_per_second)
            turn_metrics.figure(Figure.LLM_PROMPT_TOKENS, step.prompt_tokens)
        if step is not None or not should_stop():  # a call stopped before it began sent nothing
            self._count_request(turn, gen, step)
        turn_metrics.figures(self.session.figures)  # a remote model's network share
        if should_stop():
            # Cut off (barge-in, reopened turn, shutdown): record where it stopped.
            turn_metrics.mark(Mark.LLM_STOPPED, time.perf_counter(), overwrite=True)
            reason = control.cut_reason(turn, gen)
            if request.record and msg.text and reason is not None:
                self.chat_history.keep_cut_off(turn, msg.text, reason)
            return
        rest = chunker.flush() + thinking.finish() if chunker.sentences < config.max_sentences else ""
        capped = step is not None and step.tokens >= options.max_new_tokens
        if capped and spoken and rest and rest.rstrip()[-1] not in ".!?…\"')。！？」":
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
        yield self._chunk(turn, gen, rest, last=True, speak=speak, language=msg.language)

    def _score_turn_end(self, turn: int, gen: int, readings: tuple[str, ...]) -> None:
        """A speculative turn under learned end of turn: how likely the user's words end a
        sentence, for the source stage to weigh with the audio model, on the model the
        unit's policy chose for it (the reply LLM's, or the bundled small model's beside
        an mlx-lm or remote one: ``EndOfTurnPolicy.score_text``). Scored on the words
        alone (the last ``local_session.TEXT_SIGNAL_WORDS``: a few tokens), in a session
        of its own; where the STT was unsure of the words (``readings`` holds more than
        its text), the least likely end counts."""
        self.ctx.end_of_turn.score_text(turn, gen, readings, self.model)

    def _may_request(self, turn: int, gen: int) -> bool:
        """Whether this revision's reply may be requested now; a speculative revision past
        the LLM's budget (``speculation.speculation_limit``: a remote LLM's requests are
        metered) waits here for its commit. A revision whose words cannot end the turn
        (``EndOfTurnPolicy.may_end_here``) does not spend the budget: it waits too, so
        the request goes to a revision that may be the last. False: the revision was
        dropped (the user went on) or the unit stops while it waited."""
        ctx = self.ctx
        limit = speculation_limit(self.model, ctx.config.turns)
        if limit is None or ctx.held.committed(turn):
            return True
        if (self._speculation.may_speculate(turn, limit)
                and ctx.end_of_turn.may_end_here(turn, gen)):
            self._speculation.spend(turn)
            return True
        while not ctx.held.committed(turn):
            if ctx.control.is_stale(turn, gen) or ctx.stopping.is_set():
                return False
            time.sleep(_COMMIT_POLL_S)
        return True

    def _count_request(self, turn: int, gen: int, step: LlmStep | None) -> None:
        """Add one request and its tokens to the turn's totals, dropped revisions included
        (what a metered API bills), and record the totals so far on the revision."""
        requests, prompt, completion = self._spent.get(turn, (0, 0, 0))
        if step is not None:
            prompt, completion = prompt + step.prompt_tokens, completion + step.tokens
        self._spent[turn] = totals = (requests + 1, prompt, completion)
        for stale in sorted(self._spent)[:-16]:  # only the turns in flight matter
            del self._spent[stale]
        self.ctx.metrics.for_turn(self.ctx.unit, turn, gen).figures(dict(zip(
            (Figure.LLM_REQUESTS, Figure.LLM_TURN_PROMPT_TOKENS, Figure.LLM_TURN_COMPLETION_TOKENS),
            totals)))

    # ------------------------------------------------------------------ the history summary
    def idle(self) -> None:
        """Between turns: fold the turns the prompt no longer keeps into the summary, once
        the last turn's reply ended (played, cut off or failed), never during one."""
        config = self.ctx.config.llm
        if not (self._summarize and config.summarize_history) or self._pending_reset is not None:
            return
        if self._summary_failed == self._last_turn or (
                self._last_turn and not self._reply_over(self._last_turn)):
            return
        work = self.chat_history.pending_summary(config.history_turns)
        if work is not None:
            self._write_summary(work, config)

    def _reply_over(self, turn: int) -> bool:
        record = self.ctx.metrics.turn(self.ctx.unit, turn)
        return record is None or record.finished or record.cancelled

    def _write_summary(self, work: SummaryWork, config) -> None:
        """One summarising call; its start and end are marks of the turn after which it
        ran. A new message, a new conversation, a new model or shutdown stops it at its
        next token (it is redone at the next pause); a failure is reported and retried after the next
        turn; a turn the model writes no note about is left out of the summary."""
        unit, metrics, turn = self.ctx.unit, self.ctx.metrics, self._last_turn
        if self._summarizer is None:
            self._summarizer = self.model.new_session()
        # The reply's anti-repetition settings (the model family's where left at default).
        options = dataclasses.replace(GenerationOptions.from_config(config),
                                      max_new_tokens=NOTE_TOKENS, temperature=0.0)

        def should_stop() -> bool:  # a message, shutdown, a reset or a model swap waits
            return (not self.inbox.empty() or self.ctx.stopping.is_set()
                    or self._pending_reset is not None or self._next_model is not None)

        if turn:
            metrics.for_turn(unit, turn).mark(Mark.SUMMARY_START, time.perf_counter(), overwrite=True)
        pieces: list[str] = []
        try:
            for step in self.computed(self._summarizer.generate(note_messages(work.items),
                                                                options, should_stop)):
                pieces.append(step.text)
        except Exception as exc:  # the conversation goes on without it (logged, reported)
            self._summary_failed = turn
            log.warning("the history summary failed", exc_info=exc)
            self.ctx.events.emit(EngineError(unit, self.name, "summarising the turns the prompt "
                                             "no longer keeps failed: "
                                             f"{describe_failure(exc, self.model.actual_device)}"))
            return
        finally:
            if turn:
                metrics.for_turn(unit, turn).mark(Mark.SUMMARY_END, time.perf_counter(),
                                                  overwrite=True)
        if should_stop():
            return
        note = clean_note("".join(pieces))
        summary = grow_summary(work.previous, note)
        if self.chat_history.set_summary(work, summary) and note:
            self.ctx.events.emit(HistorySummarized(unit, summary, work.through_turn))

    def _messages(self, msg: Transcript, request: ReplyRequest, config) -> list[ChatMessage]:
        """The prompt: the request's own context, else the history, then the user's text.

        A turn in another language than English, or any turn while ``stt.language`` is
        auto, adds to the system prompt the instruction to answer in its language, written
        in that language. Measured with SmolLM2-135M (bundled, onnx-genai) on 12 French,
        German and Spanish questions, replies in the question's language: none 4/12, the
        instruction in English in the system prompt 6/12, in the language 9/12, in the
        language after the user's message 11/12; but that one was read back aloud in 3 of
        12 replies ("(Réponds en français.)"), and a per-turn instruction changes the
        prompt's history every turn (the KV cache is re-filled), so it is the system prompt.
        """
        system = config.system_prompt if request.instructions is None else request.instructions
        if msg.language and (msg.language != "en" or self.ctx.config.stt.detects_language):
            system = f"{system} {reply_instruction(msg.language)}"
        if request.context is None:
            return self.chat_history.messages_for(msg.text or None, system, config.history_turns,
                                                  self._summarize and config.summarize_history)
        user = [{"role": "user", "content": msg.text}] if msg.text else []
        return [{"role": "system", "content": system}, *request.context, *user]

    def _chunk(self, turn: int, gen: int, text: str, last: bool = False,
               speak: bool = True, language: str | None = None) -> TextChunk:
        if text:
            turn_metrics = self.ctx.metrics.for_turn(self.ctx.unit, turn, gen)
            turn_metrics.mark(Mark.TTS_FIRST_TEXT, time.perf_counter())
            turn_metrics.add_reply(text + " ")
            self.ctx.held.emit(turn, gen, ReplyText(self.ctx.unit, turn, text))
        return TextChunk(turn, gen, text, last, speak, language)
