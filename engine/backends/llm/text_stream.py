"""Streaming detokenization: the new text each generated token adds."""

from __future__ import annotations


class TextStream:
    """Incremental detokenizer: new text per token, whole characters only.

    Decodes a short window of recent tokens twice (with and without the newest ones) and
    emits the difference, holding text back while it ends in a partial UTF-8 character
    (U+FFFD). Decoding a window rather than the whole reply keeps this O(1) per token.
    Special tokens are skipped, except those named in ``keep`` (a tool format's markers).
    """

    def __init__(self, tokenizer, keep: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # tokens whose text has been emitted
        self.emitted = ""
        self.dropped = special_ids(tokenizer, keep) if keep else None

    def _decode(self, ids: list[int]) -> str:
        if self.dropped is None:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        return self.tokenizer.decode([i for i in ids if i not in self.dropped], skip_special_tokens=False)

    def push(self, ids: list[int]) -> str:
        """The text that ``ids`` (the whole reply so far) adds to what was emitted."""
        self.ids = ids
        before = self._decode(ids[self.prefix:self.read])
        after = self._decode(ids[self.prefix:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(ids)
        piece = after[len(before):]
        self.emitted += piece
        return piece

    def flush(self) -> str:
        """Whatever the full reply decodes to beyond the emitted text (held-back bytes)."""
        full = self._decode(self.ids)
        if full.startswith(self.emitted) and len(full) > len(self.emitted):
            piece = full[len(self.emitted):]
            self.emitted = full
            return piece
        return ""


def special_ids(tokenizer, keep: tuple[str, ...]) -> frozenset[int]:
    """The ids a decode that skips special tokens drops, less the tokens named in ``keep``."""
    special = set(tokenizer.all_special_ids)
    special.update(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)
    return frozenset(i for i in special if tokenizer.convert_ids_to_tokens(i) not in keep)


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """How many trailing characters of ``text`` could be the start of one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest


THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
#: The reasoning markers of hybrid thinking models (Qwen3, DeepSeek-R1 distills, SmolLM3):
#: decoded even where a tokenizer holds them as special tokens, so the block can be found.
THINK_TAGS = (THINK_OPEN, THINK_CLOSE)


#: How many of a prompt's last tokens ``opens_thinking`` needs to see.
PROMPT_END_TOKENS = 4


def opens_thinking(prompt_end: str) -> bool:
    """Whether a rendered prompt ending in ``prompt_end`` (the text of its last
    ``PROMPT_END_TOKENS`` tokens) leaves a ``<think>`` block open (a thinking-only
    template's generation prompt): the reply then starts inside it."""
    text = prompt_end.rstrip()
    return text.endswith(THINK_OPEN)


class ThinkFilter:
    """Drops ``<think>…</think>`` reasoning from a reply fed piece by piece.

    Thinking is switched off in the template where it has a switch (``enable_thinking``);
    this is the safety net for a model that reasons anyway, so that no reasoning is
    shown, spoken or kept in the history. ``feed`` returns the text outside any block,
    holding back a trailing partial ``<think>``; the blanks after a block are dropped
    (``</think>\\n\\n`` precedes the answer). An unclosed block at the end is dropped
    whole; a stray ``</think>`` is dropped. ``opened``: the prompt already opened a block.
    """

    def __init__(self, *, opened: bool = False) -> None:
        self._inside = opened
        self._pending = ""
        self._after_block = False  # drop the blanks that follow a closing tag
        self.dropped = False  # some reasoning was dropped from this reply

    def feed(self, piece: str) -> str:
        """The text of ``piece`` (with what was held back) that is no reasoning."""
        self._pending += piece
        out: list[str] = []
        while self._pending:
            text = self._pending
            if self._inside:
                end = text.find(THINK_CLOSE)
                self.dropped = True
                if end < 0:
                    self._pending = text[len(text) - partial_marker(text, (THINK_CLOSE,)):]
                    break
                self._pending, self._inside, self._after_block = text[end + len(THINK_CLOSE):], False, True
                continue
            if self._after_block:
                text = self._pending = text.lstrip()
                if not text:
                    break
                self._after_block = False
            start, stray = text.find(THINK_OPEN), text.find(THINK_CLOSE)
            if stray >= 0 and (start < 0 or stray < start):
                out.append(text[:stray])
                self._pending, self._after_block = text[stray + len(THINK_CLOSE):], True
                continue
            if start >= 0:
                out.append(text[:start])
                self._pending, self._inside = text[start + len(THINK_OPEN):], True
                continue
            keep = partial_marker(text, THINK_TAGS)
            out.append(text[:len(text) - keep])
            self._pending = text[len(text) - keep:]
            break
        return "".join(out)

    def finish(self) -> str:
        """The text still held back once the reply is over (none of an unclosed block)."""
        pending, self._pending = self._pending, ""
        return "" if self._inside else pending
