"""``stt.language = auto``: the language of each turn, held steady across a conversation.

Whisper detects a language from the first 30 s of each call, and on a short turn it
guesses. ``parley-cli bench language`` (Whisper base, multilingual, espeak-ng speech in
en/fr/de/es, 64 turns, a conversation going en -> fr -> de -> es) measured, turn by turn,
the right language first on 13 of 32 turns under 2 s (41 %: "Danke schön." came out
English, "Rappelle-moi..." Thai) and on 29 of 32 longer ones (91 %). So a conversation
keeps one language (``LanguageHold``), and only a turn long enough (``SWITCH_MIN_S``), or
a short one whose detection is sure (``SURE_PROBABILITY``), sets it (``switches``); any
other turn is transcribed in the held language. Of the rules compared on the same
detections, this one kept the most turns right: 28/32 short and 29/32 long (88 %, 91 %).
Asking a long turn for a probability as well lost turns: at 0.5, 24/32 and 25/32, as the
espeak-ng French was detected right but unsure (0.16-0.25 on its first choice); a 1.5 s
bound, 21/32 and 29/32; 3 s, 21/32 and 22/32.

``stt.languages`` narrows detection to a set: the probabilities of the languages outside
it are dropped and the rest scaled to sum to 1, so a turn is always heard as one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: A turn at least this long (seconds of speech) switches the held language...
SWITCH_MIN_S = 2.0
#: ...when its detected language has at least this probability (none: measured above).
SWITCH_MIN_PROBABILITY = 0.0
#: A turn of any length switches at this probability: short greetings with a clear
#: accent ("Buenos días." 0.95) are heard right; wrong first choices on short turns
#: reached 0.72 ("Oui, s'il vous plaît." as English).
SURE_PROBABILITY = 0.9

Probabilities = tuple[tuple[str, float], ...]


def within(probabilities: Probabilities, allowed: Sequence[str]) -> Probabilities:
    """``probabilities`` (most likely first) narrowed to ``allowed`` and scaled to sum to
    1; unchanged where ``allowed`` is empty (any language) or none of it was scored."""
    if not allowed:
        return probabilities
    kept = [(code, p) for code, p in probabilities if code in allowed]
    total = sum(p for _code, p in kept)
    if not kept or total <= 0.0:
        return probabilities
    return tuple((code, p / total) for code, p in kept)


def switches(seconds: float, probability: float) -> bool:
    """Whether a turn of ``seconds`` of speech, whose detected language has
    ``probability``, is sure enough to set the conversation's language."""
    return probability >= SURE_PROBABILITY or (
        seconds >= SWITCH_MIN_S and probability >= SWITCH_MIN_PROBABILITY)


@dataclass(frozen=True, slots=True)
class LanguageChoice:
    """The language a turn is transcribed in, Whisper's probability of it in that turn
    (None where the model gave none), and whether the turn set it for the conversation."""

    language: str | None
    probability: float | None
    switched: bool


class LanguageHold:
    """One conversation's spoken language under ``stt.language = auto`` (one per unit).

    ``language`` is None until a turn is sure enough (``switches``); until then each turn
    is transcribed in its own detected language."""

    def __init__(self, allowed: Sequence[str] = ()) -> None:
        self.allowed = tuple(allowed)
        self.language: str | None = None

    def choose(self, detected: Probabilities, seconds: float,
               fallback: str | None = None) -> LanguageChoice:
        """The language of a turn of ``seconds`` whose detection gave ``detected`` (most
        likely first). With no detection (a model that reports only its language),
        ``fallback``, the model's own, is taken as is."""
        scored = within(detected, self.allowed)
        if not scored:
            return LanguageChoice(fallback, None, switched=False)
        top, probability = scored[0]
        if top != self.language and switches(seconds, probability):
            self.language = top
            return LanguageChoice(top, probability, switched=True)
        language = self.language or top
        return LanguageChoice(language, dict(scored).get(language, 0.0), switched=False)
