"""The learned end-of-turn decision: commit a turn in its grace, or let the grace run.

Pure: the source stage reads a turn revision's ``TurnScores`` each frame of the grace and
asks ``commit_early``.
"""

from __future__ import annotations

from engine.stages.end_of_turn.board import TurnScores

#: The text signal must reach this on its own. Smart Turn hears falling pitch at the end of
#: a phrase as an end (0.94 after jfk's "And so, my fellow Americans,", 0.98 after the
#: lecture's "that take no account"), and sqrt(0.94 x 0.049) = 0.21 is close to the
#: threshold; the words, not the pitch, must say that a sentence may end. The finished
#: turns of resources/audio that commit early all had 0.09 or more (bench turn-taking
#: --signals, 2026-12-02).
MIN_TEXT_P = 0.07


def commit_early(scores: TurnScores, threshold: float) -> bool:
    """True when both signals are in, the text signal reaches ``MIN_TEXT_P`` and
    sqrt(audio x text) reaches ``threshold``."""
    combined = scores.combined
    return (combined is not None and combined >= threshold
            and scores.text is not None and scores.text >= MIN_TEXT_P)
