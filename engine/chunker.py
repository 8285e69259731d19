"""Split a streaming reply into speakable pieces: the first clause early, then sentences."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)")
_CLAUSE_END = re.compile(r"[,;:—–]+(?=\s)")
_MARKUP = re.compile(r"[*_#`~>|]+")
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "prof", "jr", "sr"}


def clean_for_speech(text: str) -> str:
    """Drop markdown symbols and collapse whitespace; TTS would read them aloud."""
    return re.sub(r"\s+", " ", _MARKUP.sub("", text)).strip()


class ClauseChunker:
    """Feed text deltas, get pieces for TTS.

    The first piece goes out at the first clause boundary once it holds
    ``min_first_words`` words (so audio starts after a few tokens); later pieces go out
    per sentence. A boundary counts only once the next character is whitespace, so
    ``3.5`` or a trailing ``Mr.`` mid-stream is not split.
    """

    def __init__(self, min_first_words: int = 3) -> None:
        self._buffer = ""
        self._sent_any = False
        self._min_first_words = min_first_words
        self.sentences = 0

    def feed(self, delta: str) -> list[str]:
        """Add generated text; return the pieces now complete."""
        self._buffer += delta
        pieces = []
        while True:
            piece = self._next_piece()
            if piece is None:
                break
            pieces.append(piece)
        return pieces

    def flush(self) -> str:
        """The rest of the reply, at its end."""
        rest, self._buffer = clean_for_speech(self._buffer), ""
        if rest and _SENTENCE_END.search(rest + " ") is None:
            self.sentences += 1
        elif rest:
            self.sentences += len(_SENTENCE_END.findall(rest + " "))
        return rest

    def _sentence_end(self) -> re.Match | None:
        for match in _SENTENCE_END.finditer(self._buffer):
            word = self._buffer[: match.start()].rsplit(None, 1)[-1:] or [""]
            if word[0].lower().lstrip("(\"'") not in _ABBREVIATIONS:
                return match
        return None

    def _next_piece(self) -> str | None:
        sentence = self._sentence_end()
        cut = sentence.end() if sentence else None
        if not self._sent_any:
            clause = _CLAUSE_END.search(self._buffer)
            if clause and (cut is None or clause.end() < cut):
                head = self._buffer[: clause.end()]
                if len(head.split()) >= self._min_first_words:
                    cut = clause.end()
                    sentence = None
        if cut is None:
            return None
        piece = clean_for_speech(self._buffer[:cut])
        self._buffer = self._buffer[cut:].lstrip()
        if sentence is not None:
            self.sentences += 1
        if not piece:
            return None if not self._buffer else self._next_piece()
        self._sent_any = True
        return piece
