"""Words made comparable, and the word error rate: what transcripts and replies are scored by.

``normalize_words`` is the one normalizer: the self-test checks the words it heard with it,
``bench --quality`` scores STT and replies with it. Numbers become words ("1, 2, 3." and
"One, two, three!" both read "one two three"; "10" reads "ten", "25" "twenty five") so a
recognizer that writes digits is not charged for it; case and punctuation go.
"""

from __future__ import annotations

import re

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """``n`` (0..999999) in English words, without "and": 342 -> "three hundred forty two".
    Larger numbers are read digit by digit."""
    if n < 0 or n >= 1_000_000:
        return " ".join(_ONES[int(d)] for d in str(abs(n)))
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    return f"{number_words(thousands)} thousand" + (f" {number_words(rest)}" if rest else "")


def _spell(match: re.Match) -> str:
    digits = match.group().replace(",", "")
    # A leading zero ("007") or a long digit string is read digit by digit, as said.
    if len(digits) > 1 and digits.startswith("0"):
        return " " + " ".join(_ONES[int(d)] for d in digits) + " "
    return f" {number_words(int(digits))} "


def normalize_words(text: str) -> str:
    """Lower-case words, numbers spelled out, punctuation dropped, spaces collapsed
    ("1, 2, 3." -> "one two three"; "Ten-minute" -> "ten minute")."""
    # Thousands separators only between digit groups ("1,000"), not in "1, 2, 3".
    text = re.sub(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+", _spell, text.lower())
    words = (w.strip("'") for w in re.sub(r"[^a-z' ]+", " ", text).split())
    return " ".join(w for w in words if w)


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, words in the reference), after
    ``normalize_words``: the edit distance between the two word sequences."""
    ref, hyp = normalize_words(reference).split(), normalize_words(hypothesis).split()
    return edit_distance(ref, hyp), len(ref)


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Substitutions + deletions + insertions from ``reference`` to ``hypothesis`` (word
    lists, compared as given)."""
    previous = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, 1):
        current = [i]
        for j, heard in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (word != heard)))
        previous = current
    return previous[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word errors over reference words (0.0 for a perfect transcript; it can exceed 1.0
    with many insertions). An empty reference scores 0.0 for an empty hypothesis and 1.0
    otherwise."""
    errors, words = word_errors(reference, hypothesis)
    if words == 0:
        return 0.0 if errors == 0 else 1.0
    return errors / words


def corpus_word_error_rate(pairs: list[tuple[str, str]]) -> float:
    """All the errors over all the reference words of (reference, hypothesis) pairs: long
    items weigh as their length, as WER is usually quoted."""
    errors = words = 0
    for reference, hypothesis in pairs:
        e, w = word_errors(reference, hypothesis)
        errors, words = errors + e, words + w
    return errors / words if words else 0.0


def contains_word(text: str, keyword: str) -> bool:
    """True when the normalized ``keyword`` (one or more words) occurs as whole words in
    the normalized ``text``, or with a plural ending: "cat" is in "A cat says meow." and
    in "Cats purr.", not in "category"."""
    needle = normalize_words(keyword)
    return bool(needle) and re.search(rf"(?:^| ){re.escape(needle)}(?:s|es)?(?: |$)",
                                      normalize_words(text)) is not None
