"""Transcripts made comparable: what a test checks a recognizer or a reply against."""

from __future__ import annotations

import re

_DIGITS = {"0": "zero", "1": "one", "2": "two", "3": "three", "4": "four", "5": "five",
           "6": "six", "7": "seven", "8": "eight", "9": "nine"}


def normalize(text: str) -> str:
    """Lower case, letters, digits and apostrophes only, spaces collapsed: for comparing
    transcripts."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def normalize_spelled(text: str) -> str:
    """Lower case, single digits spelled out, punctuation dropped, spaces collapsed: a
    recognizer that writes "1, 2, 3" and one that writes "one two three" read the same."""
    text = re.sub(r"\d", lambda m: f" {_DIGITS[m.group()]} ", text.lower())
    text = re.sub(r"[^a-z' ]+", " ", text)
    return " ".join(text.split())
