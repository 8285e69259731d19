"""Turn an LLM's reply text into text a voice should read aloud.

Small models answer in markdown now and then; a TTS engine reads ``**`` as "asterisk
asterisk" (espeak) or as noise, and a URL as a string of letters. This keeps the words
and drops the markup. It never invents words.
"""

from __future__ import annotations

import re

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # [label](target) -> label
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
_CODE_FENCE = re.compile(r"```[^\n]*")
_LINE_MARKUP = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]*|[-*+][ \t]+|\d{1,3}[.)][ \t]+)",
                          re.MULTILINE)
# Emphasis markers not inside a word: keeps snake_case and 2*3, drops **bold** and _it_.
_EMPHASIS = re.compile(r"(?<!\w)[*_~]+|[*_~]+(?!\w)")
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F\u200D\u20E3]")
_SPACE = re.compile(r"\s+")


def speakable(text: str) -> str:
    """``text`` without markdown, links, URLs and emoji, on one line.

    An empty result means there is nothing to say.
    """
    text = _CODE_FENCE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub(" ", text)
    text = _LINE_MARKUP.sub("", text)
    text = text.replace("`", "")
    text = _EMPHASIS.sub("", text)
    text = _EMOJI.sub("", text)
    text = _SPACE.sub(" ", text).strip()
    return text if any(ch.isalnum() for ch in text) else ""
