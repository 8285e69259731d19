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
