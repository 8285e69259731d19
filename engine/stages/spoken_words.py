"""Numbers and abbreviations written out in the reply's language, right before TTS.

A voice reads "42" in the language of its phonemizer, which need not be the reply's (an
English G2P reads a French reply's "1 500 €" as "one five hundred"), and each language
writes numbers its own way: "3.5" and "3,000" in English are "3,5" and "3.000" in German
and Spanish, "3 000" in French. So ``spoken(text, language)`` writes them as words, with
``num2words`` (LGPL-2.1, pure Python) for the words of each number:

* abbreviations of the language ("e.g.", "z. B.", "p. ej.", "M. Dupont") become words;
* percentages, ordinals ("1st", "2e", "3º"), decimals and integers with the language's
  separators become words, a bare number from 1100 to 2099 read as a year; a number
  glued to letters or written as a time ("10:30", a version "1.2.3") is left as written
  for the voice;
* languages ``num2words`` does not know keep their digits (the voice reads them).

Rules exist for English, French, German and Spanish, numbers for every language
``num2words`` has.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# (pattern, words) per language; a pattern matches at a word start. An abbreviation that
# ends the text keeps its period as the sentence's end.
_ABBREVIATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "en": ((r"e\.\s?g\.", "for example"), (r"i\.\s?e\.", "that is"), (r"etc\.", "et cetera"),
           (r"Dr\.", "Doctor"), (r"Mr\.", "Mister"), (r"Mrs\.", "Missus"), (r"vs\.", "versus"),
           (r"approx\.", "approximately"), (r"No\.(?=\s?\d)", "number")),
    "fr": ((r"p\.\s?ex\.", "par exemple"), (r"c\.-à-d\.", "c'est-à-dire"), (r"etc\.", "et cetera"),
           (r"M\.(?=\s[A-ZÀ-Ý])", "Monsieur"), (r"MM\.(?=\s[A-ZÀ-Ý])", "Messieurs"),
           (r"Mme(?=\s)", "Madame"), (r"Mlle(?=\s)", "Mademoiselle"), (r"Dr\.?(?=\s)", "Docteur"),
           (r"n°\s?(?=\d)", "numéro "), (r"env\.", "environ")),
    "de": ((r"z\.\s?B\.", "zum Beispiel"), (r"d\.\s?h\.", "das heißt"), (r"u\.\s?a\.", "unter anderem"),
           (r"usw\.", "und so weiter"), (r"bzw\.", "beziehungsweise"), (r"ca\.", "circa"),
           (r"evtl\.", "eventuell"), (r"Dr\.", "Doktor"), (r"Nr\.", "Nummer"), (r"Str\.", "Straße"),
           (r"Hr\.", "Herr"), (r"Fr\.(?=\s[A-ZÄÖÜ])", "Frau")),
    "es": ((r"p\.\s?ej\.", "por ejemplo"), (r"etc\.", "etcétera"), (r"Srta\.", "señorita"),
           (r"Sra\.", "señora"), (r"Sr\.", "señor"), (r"Dra\.", "doctora"), (r"Dr\.", "doctor"),
           (r"Uds\.", "ustedes"), (r"Ud\.", "usted"), (r"aprox\.", "aproximadamente"),
           (r"(?:núm\.|n\.º)\s?(?=\d)", "número ")),
}

_PERCENT = {"en": "percent", "fr": "pour cent", "de": "Prozent", "es": "por ciento",
            "it": "per cento", "pt": "por cento"}
_DECIMAL = {"en": "point", "fr": "virgule", "de": "Komma", "es": "coma", "it": "virgola",
            "pt": "vírgula", "nl": "komma"}
#: Languages that write a decimal comma (and so a "." or a space between thousands).
_DECIMAL_COMMA = frozenset({"fr", "de", "es", "it", "pt", "nl", "pl", "ru", "uk", "cs", "sv",
                            "da", "no", "fi", "el", "tr", "ca", "hu", "ro", "id", "vi"})
# Ordinal suffixes: "1st" "2nd"; "1er" "1re" "2e" "2ème"; "1º" "1ª" "1.º".
_ORDINAL = {"en": r"(?:st|nd|rd|th)", "fr": r"(?:er|re|e|ème|è)", "es": r"\.?[ºª°]"}

# Private-use characters delimit text the caller holds verbatim (speech_text's code spans).
_NO_DIGIT_BEFORE = r"(?<![\w.,:/'’\ue000-\uf8ff])"
_NO_DIGIT_AFTER = r"(?![\w:/]|[.,]\d)"
_SPACES = "[ \u00a0\u202f]"
# A bare four-digit number of these is read as a year (the usual reading of "1984").
_YEAR = re.compile(r"1[1-9]\d\d|20\d\d")


def spoken(text: str, language: str | None) -> str:
    """``text`` with its abbreviations and numbers written as words in ``language``.

    None (the reply's language is unknown) returns ``text`` unchanged.
    """
    if not language:
        return text
    for pattern, words in _abbreviations(language):
        text = pattern.sub(functools.partial(_expand, words=words), text)
    say = _number_words(language)
    if say is None:
        return text
    return _numbers(language).sub(lambda m: _say_match(m, language, say), text)


def _expand(m: re.Match, *, words: str) -> str:
    """An abbreviation's words; one that ends the text keeps its period as the sentence's."""
    ends = m.end() == len(m.string) and m.group(0).endswith(".")
    return words + ("." if ends else "")


@functools.lru_cache(maxsize=16)
def _abbreviations(language: str) -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(r"(?<![\w.])" + pattern), words)
                 for pattern, words in _ABBREVIATIONS.get(language, ()))


@functools.lru_cache(maxsize=16)
def _number_words(language: str) -> Callable[..., str] | None:
    """num2words for ``language``, or None where it has no rules for it."""
    from num2words import num2words

    try:
        num2words(1, lang=language)
    except NotImplementedError:
        return None

    def say(number: int, *, ordinal: bool = False, year: bool = False) -> str:
        kind = "ordinal" if ordinal else "year" if year else "cardinal"
        try:
            words = num2words(number, lang=language, to=kind)
        except NotImplementedError:  # a language without its year reading
            words = num2words(number, lang=language)
        return words.replace(",", "")  # "one thousand, five hundred": no pause inside
    return say


@functools.lru_cache(maxsize=16)
def _numbers(language: str) -> re.Pattern:
    comma = language in _DECIMAL_COMMA
    group = r"(?:[.]|" + _SPACES + r")" if comma else ","
    point = "," if comma else r"\."
    ordinal = _ORDINAL.get(language)
    return re.compile(
        r"(?P<sign>(?<![^\s(])-)?" + _NO_DIGIT_BEFORE +
        r"(?P<int>\d{1,3}(?:" + group + r"\d{3})+|\d+)"
        r"(?:" + point + r"(?P<frac>\d+))?"
        + r"(?:(?P<ord>" + (ordinal or "(?!)") + r")(?!\w))?"
        + r"(?P<pct>" + _SPACES + r"?%)?" + _NO_DIGIT_AFTER)


def _say_match(m: re.Match, language: str, say: Callable[..., str]) -> str:
    whole = int(re.sub(r"\D", "", m.group("int")))
    if m.group("ord") and not m.group("frac"):
        words = say(whole, ordinal=True)
    elif _YEAR.fullmatch(m.group(0)):
        words = say(whole, year=True)  # "1984": "nineteen eighty-four", "neunzehnhundert..."
    else:
        words = say(whole)
        if m.group("frac"):
            frac = m.group("frac")
            zeros = len(frac) - len(frac.lstrip("0"))
            digits = [say(0)] * zeros + ([say(int(frac))] if frac.strip("0") else [])
            words = f"{words} {_DECIMAL.get(language, '.')} {' '.join(digits)}"
    if m.group("sign"):
        minus, one = say(-1), say(1)  # the language's "minus": "moins un" less "un"
        words = f"{minus.removesuffix(one).strip() or '-'} {words}"
    if m.group("pct"):
        words = f"{words} {_PERCENT.get(language, '%')}"
    return words
