"""The decode loop every local LLM backend shares: KV reuse, sampling, tools, figures.

A backend's session says only how its KV cache is kept: ``_prefill`` keeps the cache's
common prefix with a new prompt and says how many tokens remain to run, ``_run`` runs
tokens on top of the cache and returns the last position's logits (a numpy row), and
``reset`` forgets it. This class does the rest, the same way for every backend: the
prompt from the chat template (thinking off), the repetition penalty and n-gram blocking,
streaming detokenization, ``<think>`` reasoning and tool calls kept out of the spoken
text, cancellation checked before every token, and each step's figures; and the
end-of-turn text signal (``sentence_end_probability``), read from the same cache machinery.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.base import ChatMessage, GenerationOptions, LlmModel, LlmSession, LlmStep, ToolCall
from engine.backends.llm import check_context
from engine.backends.llm.family import family_defaults
from engine.backends.llm.sampling import ReplyPenalties, choose_token, softmax_mass
from engine.backends.llm.text_stream import PROMPT_END_TOKENS, THINK_TAGS, TextStream, opens_thinking
from engine.backends.llm.tool_calls import (MARKERS, CallFilter, ToolFormat, no_tools_reason, offered_tools,
                                            render_chat)


class LocalLlm(LlmModel):
    """A loaded local model that the decode loop runs: the part of the model every local
    backend shares (chat template, tools, the end-of-turn signal, warm-up). A backend
    sets the attributes and writes ``encode``, ``memory_bytes`` and ``new_session``."""

    name: str
    folder: Path  # the model's files (its config decides its anti-repetition defaults)
    tokenizer: Any  # transformers' tokenizer or a ChatTokenizer (same names)
    tool_format: ToolFormat | None  # the call format the chat template asks for
    stop_ids: frozenset[int]
    context_tokens: int

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        raise NotImplementedError

    def memory_bytes(self) -> int | None:
        """The model's memory now (GPU peak, or the process RSS on a CPU)."""
        raise NotImplementedError

    def tool_support(self) -> str | None:
        """None when the chat template renders tools in a format we parse, else why not."""
        return None if self.tool_format else no_tools_reason(self.name)

    def end_of_turn_signal(self) -> bool:
        """True: a causal LM's next-token logits give ``sentence_end_probability``."""
        return True

    def render(self, messages: list[ChatMessage], options: GenerationOptions | None,
               add_generation_prompt: bool) -> str:
        """``messages`` through the chat template as text, with the tools ``options`` offer."""
        return render_chat(self.tokenizer, self.name, self.tool_format, messages, options,
                           add_generation_prompt=add_generation_prompt, tokenize=False)

    def warmup(self) -> None:
        """Run a one-token reply and one end-of-turn text signal, so the first real turn
        does not pay for lazy setup (finding the sentence-end tokens in the vocabulary
        took ~90 ms of the first turn's early commit, SmolLM2 on 2 cores)."""
        session = self.new_session()
        for _ in session.generate([{"role": "user", "content": "Hi"}],
                                  GenerationOptions(max_new_tokens=1), lambda: False):
            pass
        session.sentence_end_probability("Hi")


def end_of_message_id(tokenizer) -> int | None:
    """The token that closes a chat message (``<|im_end|>``, Llama's ``<|eot_id|>``...)."""
    for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        token = tokenizer.convert_tokens_to_ids(name)
        if isinstance(token, int) and token != tokenizer.unk_token_id:
            return token
    return tokenizer.eos_token_id


class LocalLlmSession(LlmSession):
    """One conversation on a shared local model; subclasses keep its KV cache."""

    def __init__(self, llm: LocalLlm) -> None:
        self.llm = llm

    def reset(self) -> None:
        """Forget the KV cache (the next turn prefills its whole prompt)."""
        raise NotImplementedError

    def _prefill(self, prompt: list[int]) -> int:
        """Keep the cache's common prefix with ``prompt``; how many tokens remain to run."""
        raise NotImplementedError

    def _run(self, token_ids: list[int]) -> np.ndarray:
        """Run ``token_ids`` on top of the cache; the last position's logits."""
        raise NotImplementedError

    def prompt_ids(self, messages: list[ChatMessage], options: GenerationOptions | None = None) -> list[int]:
        """The token ids of ``messages`` rendered by the chat template, ready for a reply
        (with the tools ``options`` offer, if any)."""
        return self.llm.encode(self.llm.render(messages, options, add_generation_prompt=True))

    def generate(self, messages: list[ChatMessage], options: GenerationOptions,
                 should_stop: Callable[[], bool]) -> Iterator[LlmStep]:
        """Stream the reply to ``messages``, one step per generated token.

        The last step has ``finished=True`` (end-of-turn token or ``max_new_tokens``)
        and the calls the model made, if tools were offered (``tool_calls``). When
        ``should_stop()`` turns true (checked before every token) the reply ends with no
        further step. Iterate in the thread that owns this session.
        """
        llm = self.llm
        opts = options
        max_new_tokens = options.max_new_tokens
        tools = offered_tools(options)
        prompt = self.prompt_ids(messages, options)
        check_context(len(prompt), max_new_tokens, llm.context_tokens)
        if should_stop():
            return
        started = time.perf_counter()
        prefilled = self._prefill(prompt)
        logits = self._run(prompt[len(prompt) - prefilled:])
        prefill_seconds = time.perf_counter() - started

        reply: list[int] = []
        fmt = llm.tool_format if tools else None
        penalties = ReplyPenalties(*family_defaults(llm.folder).for_reply(opts), fmt)
        text = TextStream(llm.tokenizer, (MARKERS[fmt] if fmt else ()) + THINK_TAGS)
        prompt_end = llm.tokenizer.decode(prompt[-PROMPT_END_TOKENS:], skip_special_tokens=False)
        calls = CallFilter(fmt, tools, thinking_open=opens_thinking(prompt_end))
        t_first = 0.0
        while True:
            token = choose_token(logits, opts.temperature, penalties.apply(logits))
            now = time.perf_counter()
            if not reply:
                t_first = now
            if token in llm.stop_ids:
                # The end-of-turn token cost a forward pass too: count it in the rate.
                yield self._step(*calls.split(text.flush(), True), reply, len(reply), prefilled,
                                 prefill_seconds, t_first, now, True)
                return
            reply.append(token)
            last = len(reply) >= max_new_tokens
            piece = text.push(reply) + (text.flush() if last else "")
            penalties.add(token, piece)
            yield self._step(*calls.split(piece, last), reply, len(reply) - 1, prefilled,
                             prefill_seconds, t_first, now, last)
            if last or should_stop():
                return
            logits = self._run([token])

    def _step(self, piece: str, tool_calls: tuple[ToolCall, ...], reply: list[int], forwards: int,
              prefilled: int, prefill_seconds: float, t_first: float, now: float,
              finished: bool) -> LlmStep:
        # The first token comes from the prefill's logits; the rate counts decode passes
        # since then (0.0 until there is one).
        rate = forwards / (now - t_first) if forwards > 0 and now > t_first else 0.0
        return LlmStep(text=piece, tokens=len(reply), prompt_tokens=prefilled,
                       prefill_seconds=prefill_seconds, tokens_per_second=rate,
                       peak_memory_bytes=self.llm.memory_bytes(), finished=finished,
                       tool_calls=tool_calls)

    def sentence_end_probability(self, text: str) -> float:
        """How likely a sentence ends right after ``text``: the next-token probability of
        the tokens that are sentence-final punctuation, the text run as it stands (no chat
        template), its own final punctuation dropped.

        Why not the chat template's end-of-message token after the user's message: an
        instruct model is not trained on user turns, and SmolLM2-135M gave it 0.001 after
        "Who's going to implement a 4% global wealth tax?" and 0.28 after the unfinished
        "...develops theories." (with Whisper's period). Whisper ends a cut-off clause with
        a period too, so the punctuation is the model's to predict, not the transcript's.
        Its periods inside the text are scored as commas: Whisper puts one where the
        speaker only paused as often as where a sentence ended, and the model then reads
        the words after it as a sentence of their own ("I tell you it is not poison. She
        cried" 0.09, with a comma 0.28; the speculative decode heard one or the other
        depending on when it started).
        Only the last ``TEXT_SIGNAL_WORDS`` words are scored: whether a sentence may end
        depends on the words before it, and a long turn read whole (its periods as commas)
        is one endless sentence to the model, which expects it to go on. The lecture's
        60-word turn ending "...in his book, Capital in the 21st Century, I use for a 40%
        global wealth tax." scored 0.017 whole and 0.103 on its last 16 words; the other
        texts of ``bench turn-taking`` moved by 0.002 at most, except another long finished
        one (jfk.flac's whole turn, 0.38 -> 0.56). The window also bounds the
        prefill. Successive revisions of a short turn share their start, so the cache runs
        only the new tokens.
        """
        last = _INNER_PERIOD.sub(",", _FINAL_PUNCTUATION.sub("", text).strip()).split()
        words = " ".join(last[-TEXT_SIGNAL_WORDS:])
        if not words:
            return 0.0
        ids = self.llm.encode(words)
        check_context(len(ids), 1, self.llm.context_tokens)
        remaining = self._prefill(ids)
        logits = self._run(ids[len(ids) - remaining:])
        return softmax_mass(logits, sentence_end_ids(self.llm.tokenizer, logits.shape[-1]))


#: The words of a turn's end that the text signal reads (``sentence_end_probability``):
#: measured on the 31 texts of a ``bench turn-taking`` run, 14 and 16 gave the same
#: verdicts; 8 raised jfk.flac's "...ask not what your country can do for you." (a pause
#: inside its sentence) from 0.09 to 0.34; from 20 on, the lower of the lecture's two
#: readings of its long finished turn stayed below ``decide.MIN_TEXT_P`` (0.063 at 20,
#: 0.055 at 24, 0.017 whole).
TEXT_SIGNAL_WORDS = 16
#: A period that ends a sentence inside the text (a word before it, more words after); a
#: CJK full stop needs no space after it.
_INNER_PERIOD = re.compile(r"(?<=\w)\.(?=\s+\S)|。(?=\s*\S)")
#: What a transcript may end with that the model should predict instead.
_FINAL_PUNCTUATION = re.compile(r"[\s.,;:!?…\-\"'”’)\]。！？、，」』]+$")
#: Tokens that end a sentence: . ? ! alone or with closing quotes and brackets; not "..",
#: which trails off, nor ".," or ".__" (code, abbreviations).
_SENTENCE_END = re.compile(r"\s*(?:[.?!。！？]|[?!？！]+)[\"'”’)\]」』]*\s*")


@functools.lru_cache(maxsize=4)
def sentence_end_ids(tokenizer, vocab_size: int) -> np.ndarray:
    """The ids of the tokens that end a sentence (``_SENTENCE_END``), once per tokenizer."""
    ids = [i for i in range(vocab_size) if _SENTENCE_END.fullmatch(tokenizer.decode([i]))]
    return np.array(ids, dtype=np.int64)
