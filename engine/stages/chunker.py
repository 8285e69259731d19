"""Cut a streaming reply into pieces for TTS: the first clause early, then sentences.

The chunker only decides where to cut. Every piece is the LLM's text exactly as written,
less the whitespace at the cut, so the conversation view and the chat history get the
reply unchanged; what the voice says is made from each piece later
(``engine.stages.speech_text.speakable``).
"""

from __future__ import annotations

import re

# Markup that may close around a sentence end ("**Done.** Next", '"Yes." She').
_CLOSERS = r"(?:\*{1,3}|_{1,3}|~~|[\"')\]”’»])*"
_SENTENCE_END = re.compile(r"[.!?…]+" + _CLOSERS + r"(?=\s)")
# CJK writing puts no space after a full stop: the next character itself is the proof.
_CJK_END = re.compile(r"[。！？｡]+[」』）】〉》\"”’]*")
_CLAUSE_END = re.compile(r"[,;:—–]+" + _CLOSERS + r"(?=\s)")
# CJK clause marks need no space after them either.
_CJK_CLAUSE = re.compile(r"[、，；：]+")
# A hyphen written as a dash between two words ("Paris - the capital"); never between
# digits ("3 - 2") and never a list marker (that starts a line, with no word before it).
_SPACED_DASH = re.compile(r"(?<=[^\W\d_]) --?(?=[ \t]+[^\W\d_])")
# Before these a clause starts ("..., but", "... because it"): the first piece may end
# just before one. Only the unambiguous ones: "and", "or", "so", "while", "since" and
# "which" as often join two words or start a phrase ("salt and pepper", "so much").
_CONJUNCTIONS = {
    "en": "but|because|although|whereas|unless",
    "fr": "mais|parce|car|puisque|quoique|tandis",
    "de": "aber|weil|obwohl|sondern|denn|während",
    "es": "pero|porque|aunque|sino|mientras",
}
_CONJUNCTION = {lang: re.compile(r"[ \t]+(?=(?:" + words + r")[ \t])")
                for lang, words in _CONJUNCTIONS.items()}
# "all but", "nothing but": no new clause follows these.
_NOT_BEFORE_BUT = {"all", "anything", "nothing", "everything", "everyone", "nobody", "none",
                   "not", "last", "cannot", "can't", "couldn't"}
_NEWLINE = re.compile(r"\n")

# Before these a "." never ends a sentence: a name or an example follows.
_NEVER_END = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "e.g", "i.e", "cf", "approx"}
# These end a sentence only when a capital letter follows ("apples, etc. and pears").
_END_BEFORE_CAPITAL = {"etc", "jr", "sr", "inc", "ltd", "co"}
# The same per language (the words before the ".", lowercased), on top of the above.
_NEVER_END_IN = {
    "fr": {"mme", "mlle", "mm", "p", "ex", "p.ex", "env", "c.-à-d", "n°"},
    "de": {"z", "z.b", "d", "d.h", "u", "u.a", "bzw", "nr", "str", "ca", "evtl", "vgl",
           "hr", "fr", "sog", "bzgl"},
    "es": {"sra", "srta", "dra", "ud", "uds", "p", "ej", "p.ej", "núm", "aprox", "pág"},
}
_END_BEFORE_CAPITAL_IN = {"fr": {"av", "apr"}, "de": {"usw", "etc"}, "es": {"etc"}}
# A German ordinal ("am 3. Mai"): a number and "." before a month or a lowercase word.
_GERMAN_MONTHS = {"januar", "februar", "märz", "april", "mai", "juni", "juli", "august",
                  "september", "oktober", "november", "dezember", "jänner"}
# Marks that open a sentence before its first letter: "¿Qué?", "¡Sí!", "«Oui»".
_OPENERS = "¿¡\"'“‘«(["
# Languages written without spaces between words: a first clause counts characters.
_UNSPACED = {"ja", "zh"}

# A line that is a Markdown block of its own: list item, heading, table row, fence, rule.
# A line break before or after one is a cut, so each list item is its own piece. (Quote
# lines are not: "> " lines wrap one paragraph, whose sentences are cut as usual.)
_BLOCK_LINE = re.compile(r"[ \t]*(?:[-*+][ \t]|\d{1,9}[.)][ \t]|#{1,6}(?:[ \t]|$)|\||`{3}|~{3}"
                         r"|([-*_=])(?:[ \t]*\1){2,}[ \t]*$)")
# What a block line may look like before enough of it has streamed in to tell.
_BLOCK_PREFIX = re.compile(r"[ \t]*(?:[-*+=_]+|\d{1,9}[.)]?|#{1,6}|`{1,2}|~{1,2})?$")
_NUMBERED_MARKER = re.compile(r"[ \t]*\d{1,9}$")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(`{3,}(?=[^`\n]*$)|~{3,})[^\n]*", re.MULTILINE)
_URL = re.compile(r"(?:https?://|www\.)[^\s<>]*[^\s<>.,;:!?'\"*_~)\]]", re.IGNORECASE)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_MAX_LABEL = 200  # a "[" this far from its "]" is not a link: stop holding cuts back

_END, _CLAUSE, _SKIP, _WAIT = range(4)


class ClauseChunker:
    """Feed text deltas, get pieces for TTS.

    The first piece goes out at the first natural break once it holds ``min_first_words``
    words: a clause boundary (``, ; : — –``, a hyphen used as a dash) or the space before a
    conjunction that starts a clause ("but", "because", "although", "whereas", "unless"),
    so TTS gets a short first chunk after a few tokens; a sentence end before that cuts as
    usual. ``min_first_words=0`` turns this off (the first piece is a sentence too). Later
    pieces go out per sentence, for prosody, and per line where the reply is a list (each
    item is a piece).

    A cut is never made inside a code span, a code block, a link or a URL; a decimal point
    or an abbreviation ("Dr.", "e.g.", "etc." mid-sentence) is not a sentence end; an
    ellipsis is one only before a capital letter; a clause cut needs the space after its
    mark, so "3,000" and "10:30" stay whole. Where that depends on text still to come, the
    cut waits for it. ``sentences`` counts the pieces that ended a sentence or a
    line (first-clause pieces do not count), for the caller's cap on reply length.

    ``language`` (ISO 639-1, the reply's) adds that language's abbreviations and the
    conjunctions that start its clauses (French, German, Spanish; English by default);
    CJK sentence ends (``。！？``) and clause marks (``、，``) cut without a space after
    them, and a Spanish sentence may open with ``¿`` or ``¡``.
    """

    def __init__(self, min_first_words: int = 3, language: str | None = None) -> None:
        self._buffer = ""
        # The start of the line the buffer begins in (text already cut off before it):
        # tells whether the buffer starts a line and whether that line is a list item.
        self._line_head = ""
        self._sent_any = False
        self._min_first_words = min_first_words
        self._language = language or "en"
        self._conjunction = _CONJUNCTION.get(self._language)
        self._never_end = _NEVER_END | _NEVER_END_IN.get(self._language, set())
        self._end_before_capital = (_END_BEFORE_CAPITAL
                                    | _END_BEFORE_CAPITAL_IN.get(self._language, set()))
        self.sentences = 0

    def feed(self, delta: str) -> list[str]:
        """Add generated text; return the pieces now complete, each as written."""
        self._buffer += delta
        self._skip_leading_space()
        pieces = []
        while True:
            piece = self._next_piece()
            if piece is None:
                break
            pieces.append(piece)
        return pieces

    def flush(self) -> str:
        """The rest of the reply, at its end ("" if nothing is left)."""
        rest, self._buffer, self._line_head = self._buffer.strip(), "", ""
        if rest:
            self.sentences += 1
            self._sent_any = True
        return rest

    # ------------------------------------------------------------------ internals
    def _next_piece(self) -> str | None:
        cut = self._find_cut()
        if cut is None:
            return None
        at, kind = cut
        piece = self._buffer[:at].rstrip()
        self._advance(self._buffer[:at])
        self._buffer = self._buffer[at:]
        self._skip_leading_space()
        if kind == _END:
            self.sentences += 1
        self._sent_any = True
        return piece

    def _advance(self, consumed: str) -> None:
        newline = consumed.rfind("\n")
        head = consumed[newline + 1:] if newline >= 0 else self._line_head + consumed
        self._line_head = head[:64]  # only the line's start matters (its marker)

    def _skip_leading_space(self) -> None:
        rest = self._buffer.lstrip()
        if len(rest) != len(self._buffer):
            self._advance(self._buffer[: len(self._buffer) - len(rest)])
            self._buffer = rest

    def _find_cut(self) -> tuple[int, int] | None:
        text = self._buffer
        if not text:
            return None
        held = _held_spans(text, self._line_head)
        candidates = []
        for m in _SENTENCE_END.finditer(text):
            candidates.append((m.end(), 0, m))
        for m in _CJK_END.finditer(text):
            candidates.append((m.end(), 1, m))
        for m in _NEWLINE.finditer(text):
            candidates.append((m.start(), 2, m))
        if not self._sent_any and self._min_first_words > 0:
            for pattern in (_CLAUSE_END, _SPACED_DASH, _CJK_CLAUSE):
                for m in pattern.finditer(text):
                    candidates.append((m.end(), 3, m))
            if self._conjunction is not None:
                for m in self._conjunction.finditer(text):
                    candidates.append((m.start(), 4, m))
        for at, rule, m in sorted(candidates, key=lambda c: (c[0], c[1])):
            if at == 0 or any(start < at < end for start, end in held):
                continue
            if rule == 0:
                verdict = self._sentence_verdict(m)
            elif rule == 1:
                verdict = _END if at < len(text) else _WAIT
            elif rule == 2:
                verdict = self._line_verdict(m.start())
            else:
                words = text[:at].split()
                # Words say something: a lone "-" or "**" before the break is no word.
                enough = sum(any(c.isalnum() for c in w) for w in words) >= self._min_first_words
                if self._language in _UNSPACED and not enough:
                    # No spaces: two characters stand for a word (most words are two).
                    enough = sum(c.isalnum() for c in text[:at]) >= 2 * self._min_first_words
                if rule == 4 and enough:
                    enough = (text[at - 1].isalnum()  # not after a mark: "idiom) but"
                              and words[-1].lower() not in _NOT_BEFORE_BUT)
                verdict = _CLAUSE if enough else _SKIP
            if verdict == _WAIT:
                return None  # a later cut would swallow this undecided one
            if verdict != _SKIP:
                return at, verdict
        return None

    def _line_start(self, at: int) -> str:
        """The text of the line holding ``at``, from the line's start up to ``at``."""
        newline = self._buffer.rfind("\n", 0, at)
        if newline >= 0:
            return self._buffer[newline + 1:at]
        return self._line_head + self._buffer[:at]

    def _sentence_verdict(self, m: re.Match) -> int:
        text = self._buffer
        marks = m.group(0).rstrip("*_~\"')]”’»")
        before = self._line_start(m.start())
        word = before.rsplit(None, 1)[-1] if before.strip() else ""
        word = word.lstrip("(\"'*_[“‘«").lower()
        following = text[m.end():].lstrip()
        next_char = following.lstrip(_OPENERS)[:1] or following[:1]
        if "…" in marks or ".." in marks:
            # "Wait... no" goes on; "Wait... No" is a new sentence.
            if not next_char:
                return _WAIT
            return _END if next_char.isupper() else _SKIP
        if marks != ".":
            return _END
        if _NUMBERED_MARKER.fullmatch(before):
            return _SKIP  # "1. " opening a numbered list item
        if word in self._never_end:
            return _SKIP
        if self._language == "de" and word.isdigit():
            if not any(c.isspace() for c in following):
                return _WAIT  # the next word is still coming
            after = following.split(None, 1)[0].strip(".,;:!?").lower()
            if after in _GERMAN_MONTHS or following[:1].islower():
                return _SKIP  # "am 3. Mai", "der 2. und"
        if len(word) == 1 and word.isalpha() and before[-1:].isupper() and before[-1:] != "I":
            return _SKIP  # an initial: "J. R. R. Tolkien" (but "So do I." ends)
        if word in self._end_before_capital:
            if not next_char:
                return _WAIT
            return _END if next_char.isupper() else _SKIP
        return _END

    def _line_verdict(self, at: int) -> int:
        """Whether the line break at ``at`` ends a piece."""
        text = self._buffer
        line = self._line_start(at)
        if _BLOCK_LINE.match(line):
            return _END  # after a list item, heading or table row
        if _BLANK_LINE.match(text, at):
            return _END  # a paragraph break
        end = text.find("\n", at + 1)
        next_line = text[at + 1:] if end < 0 else text[at + 1:end]
        if end < 0 and _BLOCK_PREFIX.fullmatch(next_line):
            return _WAIT  # "\n-", "\n1" or "\n#" may turn out to start a list item
        if _BLOCK_LINE.match(next_line):
            return _END  # a list (or heading, table, ...) starts on the next line
        return _SKIP  # a line wrapped inside a paragraph


def _held_spans(text: str, line_head: str) -> list[tuple[int, int]]:
    """Ranges of ``text`` no cut may fall inside: code blocks and spans, links, URLs.

    A range still open at the end of ``text`` runs to its end (more may close it).
    """
    held: list[tuple[int, int]] = []
    starts_line = not line_head.strip()
    for m in _FENCE_OPEN.finditer(text):
        if m.start() == 0 and not starts_line:
            continue
        if any(s <= m.start() < e for s, e in held):
            continue
        fence = m.group(1)
        closing = re.compile(r"^[ \t]{0,3}" + re.escape(fence) + r"[`~]*[ \t]*$", re.MULTILINE)
        close = closing.search(text, m.end() + 1)
        held.append((m.start(), close.end() if close else len(text)))
    i = 0
    while i < len(text):
        inside = next(((s, e) for s, e in held if s <= i < e), None)
        if inside:
            i = inside[1]
            continue
        ch = text[i]
        if ch == "`":
            span = _code_span(text, i)
            if span:
                held.append(span)
                i = span[1]
                continue
            i = _run_end(text, i)
            continue
        if ch == "[":
            span = _link(text, i)
            if span:
                held.append(span)
                i = span[1]
                continue
        elif ch in "hHwW":
            m = _URL.match(text, i)
            if m and (i == 0 or not text[i - 1].isalnum()):
                held.append((i, m.end()))
                i = m.end()
                continue
        i += 1
    return held


def _run_end(text: str, i: int) -> int:
    j = i
    while j < len(text) and text[j] == text[i]:
        j += 1
    return j


def _code_span(text: str, i: int) -> tuple[int, int] | None:
    """A code span opening at ``i``: closed by a backtick run of the same length, or open
    to the end of ``text`` while no blank line says it was a stray backtick."""
    opening = _run_end(text, i)
    width = opening - i
    blank = _BLANK_LINE.search(text, opening)
    limit = blank.start() if blank else len(text)
    j = opening
    while j < limit:
        if text[j] == "`":
            k = _run_end(text, j)
            if k - j == width:
                return i, k
            j = k
        else:
            j += 1
    return (i, len(text)) if blank is None else None


def _link(text: str, i: int) -> tuple[int, int] | None:
    """A ``[label](target)`` starting at ``i``, or one that may still become one."""
    close = -1
    for j in range(i + 1, min(len(text), i + 1 + _MAX_LABEL)):
        if text[j] == "]":
            close = j
            break
        if text[j] in "[\n":
            return None
    if close < 0:
        open_to_end = len(text) - i <= _MAX_LABEL
        return (i, len(text)) if open_to_end else None
    after = close + 1
    if after == len(text):
        return i, len(text)  # "(" may follow
    if text[after] != "(":
        return i, after  # "[label][ref]" or plain brackets: keep the bracket whole
    depth = 0
    for j in range(after, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return i, j + 1
        elif text[j] == "\n":
            return None
    return i, len(text)
