"""Turn a piece of an LLM's reply into the words the voice says.

The reply is kept as the LLM wrote it everywhere else (the conversation view renders its
Markdown, the chat history stores it); this is the one place it is changed, right before
TTS. A TTS engine reads ``**`` as "asterisk asterisk" (espeak) or as noise and a URL as a
string of letters, so the markup goes and the words stay.

Rules, in the order they are applied:

* fenced code blocks (```` ``` ```` or ``~~~``) are dropped whole, fence lines and code: code
  read aloud symbol by symbol is noise, and the conversation view shows it;
* inline code spans keep their content, verbatim, without the backticks;
* Markdown backslash escapes (``\\*``) become the bare character;
* at line starts: heading ``#``, blockquote ``>``, bullet ``-``/``*``/``+``, task box
  ``[ ]``/``[x]`` and numbered-list ``1.``/``1)`` markers are dropped; rule lines
  (``---``), table separator rows and link reference definitions are dropped;
* ``[label](url)`` and ``![alt](src)`` become ``label``/``alt``; ``[label][ref]`` becomes
  ``label``;
* a bare URL (``https://…``, ``www.…``, ``<https://…>``) becomes its host name without
  ``www.`` (``https://www.example.com/a?b`` -> ``example.com``): that is how a person says a
  link, and the host is in the text, so no word is invented;
* emphasis markers (``**bold**``, ``*it*``, ``_it_``, ``__b__``, ``~~x~~``) are dropped when
  they pair up around text; a marker between two word characters never counts, so
  ``snake_case``, ``a_b_c``, ``2*3`` and ``my_file.txt`` are kept; a lone ``*``/``~`` run at
  the edge of a word (half of a pair split across two pieces) is dropped too;
* table pipes and emoji are dropped;
* whitespace is collapsed to single spaces on one line;
* with the reply's ``language`` known, its numbers and abbreviations are written as words
  of that language (``engine.stages.spoken_words``; code spans keep their digits).

Everything else is kept as written, in order: non-Latin text, ellipses (the TTS reads
those), and without a language decimal numbers, "Dr." and "e.g.". Nothing is added but
spaces and those words.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from engine.stages.spoken_words import spoken

# Private-use characters delimit placeholders for text that must come out verbatim (code
# span contents, escaped characters): no later rule matches them.
_HOLD_OPEN, _HOLD_CLOSE = "\ue000", "\ue001"
_HOLD = re.compile(f"{_HOLD_OPEN}(\\d+){_HOLD_CLOSE}")

# A fence line opens a block that runs to a closing fence of the same kind, or to the end.
# (A backtick fence's info string has no backticks: "```code```" is an inline code span.)
_FENCED = re.compile(r"^[ \t]*(`{3,}(?=[^`\n]*$)|~{3,})[^\n]*\n?(?:.*?^[ \t]*\1[`~]*[ \t]*$|.*\Z)",
                     re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")

_RULE_LINE = re.compile(r"^[ \t]*(?:([-*_=])(?:[ \t]*\1){2,})[ \t]*$", re.MULTILINE)
_TABLE_SEPARATOR = re.compile(r"^[ \t]*\|?(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*(?::?-+:?)?[ \t]*$",
                              re.MULTILINE)
_REFERENCE_DEF = re.compile(r"^[ \t]*\[[^\]\n]+\]:[ \t]*\S+.*$", re.MULTILINE)
# Applied repeatedly, so "> - item" and "> > quote" lose every marker.
_LINE_MARKER = re.compile(r"^[ \t]*(?:#{1,6}(?=[ \t]|$)|>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t])"
                          r"|\[[ xX]\](?=[ \t]))[ \t]*", re.MULTILINE)
_HEADING_CLOSE = re.compile(r"[ \t]+#+[ \t]*$", re.MULTILINE)

_IMAGE_OR_LINK = re.compile(r"!?\[([^\[\]\n]*)\]\((?:[^()\s]|\([^()\s]*\))*(?:[ \t]+\"[^\"\n]*\")?\)")
_REFERENCE_LINK = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
_AUTOLINK = re.compile(r"<((?:https?://|www\.)[^\s<>]+)>", re.IGNORECASE)
_URL = re.compile(r"(?<![\w@/])(?:https?://|www\.)[^\s<>]+", re.IGNORECASE)
_URL_TRAILER = re.compile(r"[.,;:!?'\"*_~)\]]+$")

# Emphasis pairs: the opener is not preceded by a word character and is followed by
# non-space; the closer is preceded by non-space and not followed by a word character,
# nor by one punctuation mark and a word character (``__init__.py`` stays a file name).
_EMPHASIS = re.compile(r"(?<![\w*_~\\])(\*{1,3}|_{1,3}|~~)(?=[^\s*_~])(.+?)(?<=[^\s*_~])\1"
                       r"(?![\w*_~])(?![^\w\s]\w)", re.DOTALL)
# Half a pair left by a cut between pieces: a ``*``/``~~`` run at one edge of a word.
# ``_`` is left alone here: loose underscores are far likelier part of a name; so is a
# single ``~`` ("~5 minutes").
_STRAY_EMPHASIS = re.compile(r"(?:(?<=\s)|^)(?:\*{1,3}|~~)(?=[^\s*~])|(?<=[^\s*~])(?:\*{1,3}|~~)(?=\s|$)",
                             re.MULTILINE)

_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u231A\u231B\u23E9-\u23FA"
                    "\uFE0E\uFE0F\u200D\u20E3\U000E0020-\U000E007F]")
_SPACE = re.compile(r"\s+")
# Whitespace a dropped emoji or URL left before closing punctuation ("docs 🙂." -> "docs.").
_SPACE_BEFORE_PUNCT = re.compile(r" ([.,!?;:…])(?= |$)")


def speakable(text: str, language: str | None = None) -> str:
    """What the voice should say for ``text``, a piece of the LLM's reply, on one line.

    Drops Markdown markup, links' targets, code blocks and emoji and keeps every word in
    its order (see the module docstring for the rules); ``language`` (ISO 639-1, the
    reply's) writes its numbers and abbreviations as words. Returns ``""`` when nothing
    alphanumeric is left: there is nothing to say.
    """
    held: list[str] = []

    def hold(value: str) -> str:
        held.append(value)
        return f"{_HOLD_OPEN}{len(held) - 1}{_HOLD_CLOSE}"

    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _FENCED.sub("\n", text)
    text = _CODE_SPAN.sub(lambda m: hold(_code_content(m.group(2))), text)
    text = text.replace("`", "")  # an unmatched backtick is not a word
    text = _ESCAPE.sub(lambda m: hold(m.group(1)), text)
    text = _line_markup(text)
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    text = _REFERENCE_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _URL.sub(_spoken_url, text)
    text = _emphasis(text)
    text = text.replace("|", " ")
    text = _EMOJI.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = spoken(text, language)
    text = _HOLD.sub(lambda m: held[int(m.group(1))], text)
    text = _SPACE.sub(" ", text).strip()  # code spans may hold newlines
    return text if any(ch.isalnum() for ch in text) else ""


def _code_content(code: str) -> str:
    # CommonMark strips one space on each side when both are there (`` `x` `` pads).
    if len(code) >= 2 and code[0] == " " and code[-1] == " " and code.strip():
        code = code[1:-1]
    return code


def _line_markup(text: str) -> str:
    text = _RULE_LINE.sub("", text)
    text = _TABLE_SEPARATOR.sub("", text)
    text = _REFERENCE_DEF.sub("", text)
    lines = []
    for line in text.split("\n"):
        stripped = _LINE_MARKER.sub("", line, count=1)
        while stripped != line:
            if line.lstrip().startswith("#"):
                stripped = _HEADING_CLOSE.sub("", stripped)  # "## Title ##"
            line, stripped = stripped, _LINE_MARKER.sub("", stripped, count=1)
        lines.append(line)
    return "\n".join(lines)


def _spoken_url(match: re.Match) -> str:
    url = match.group(0)
    trailer = _URL_TRAILER.search(url)
    tail = ""
    if trailer:
        tail = trailer.group(0)
        # A ")" that closes a parenthesis inside the URL belongs to it (Wikipedia links).
        while tail.startswith(")") and url[: len(url) - len(tail)].count("(") > \
                url[: len(url) - len(tail)].count(")"):
            tail = tail[1:]
        url = url[: len(url) - len(tail)]
    target = url if "://" in url else f"//{url}"
    try:
        host = urlsplit(target).hostname or ""
    except ValueError:
        host = ""
    host = host.removeprefix("www.")
    return f"{host}{tail}" if host else f" {tail}"


def _emphasis(text: str) -> str:
    # Pairs nest ("**a *b* c**"): strip the outer pair, then look again.
    for _ in range(4):
        stripped = _EMPHASIS.sub(r"\2", text)
        if stripped == text:
            break
        text = stripped
    return _STRAY_EMPHASIS.sub("", text)
