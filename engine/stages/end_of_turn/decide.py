"""The learned end-of-turn decision: commit a turn in its grace, or let the grace run.

Pure: the source stage reads a turn revision's ``TurnScores`` each frame of the grace and
asks ``commit_early``.
"""

from __future__ import annotations

import time

from engine.config import TurnConfig, VadConfig
from engine.stages.end_of_turn.board import TurnScores

#: The text signal must reach this on its own. Smart Turn hears falling pitch at the end of
#: a phrase as an end (0.94 after jfk's "And so, my fellow Americans,", 0.98 after the
#: lecture's "that take no account"), and sqrt(0.94 x 0.049) = 0.21 is close to the
#: threshold; the words, not the pitch, must say that a sentence may end. The finished
#: turns of resources/audio that commit early all had 0.09 or more (bench turn-taking
#: --signals, 2026-12-02).
MIN_TEXT_P = 0.07


#: Silence the audio model hears after the words, at least, before it scores a pause,
#: whenever the speculative STT starts: Smart Turn scored finished turns lower on less
#: ("...by another door." 0.14 after 64 ms against 0.87 after 128 ms; with 64 or 96 ms,
#: 13 of 24 ends committed early against 17 at 128, bench turn-taking 2026-12-04). The
#: source stage offers the turn from then on and the score runs on the newest offer once
#: the CPU is free (``board.AudioScorer``): on a CPU after the speculative STT, some
#: 200-300 ms into the pause, nearer the ~200 ms of silence pipecat's VAD hands it. Its
#: verdict swings with the exact silence it gets (the lecture's "...from here, sonny."
#: 0.15 at 128 ms, 0.29-0.80 at 192-352 ms; "...by another door." 0.87 at 128 ms, 0.19-0.36
#: at 224-352 ms), so neither moment is right for every turn.
AUDIO_SCORE_SILENCE_S = 0.128


def commit_early(scores: TurnScores, threshold: float) -> bool:
    """True when both signals are in, the text signal reaches ``MIN_TEXT_P`` and
    sqrt(audio x text) reaches ``threshold``."""
    combined = scores.combined
    return (combined is not None and combined >= threshold
            and scores.text is not None and scores.text >= MIN_TEXT_P)


#: The share of the time left until the grace ends within which a turn's end-of-turn
#: scores must start, where other units' replies hold the CPU (several turns ended
#: together and the compute gate serves them one by one, engine.runtime.compute_gate).
#: On 2 cores a reply's chain (STT, LLM to the first clause, TTS) takes ~0.5 s: a score
#: that starts later than half of the 1.1 s left at the speculative start could release
#: the reply only as the grace ends anyway, and would delay the replies queued behind
#: it (4 clients: 1512-1541 ms p50 with this, 1578 ms without). A unit alone always
#: gets them.
SCORES_START_WITHIN = 0.5


def scores_start_by(vad: VadConfig, turns: TurnConfig, now: float | None = None) -> float:
    """The ``time.perf_counter`` time by which the end-of-turn scores of a turn whose
    speculative start is ``now`` must start (``SCORES_START_WITHIN``)."""
    start_ms = min(turns.speculative_start_ms, vad.min_silence_ms)
    left_s = (vad.min_silence_ms + turns.reopen_grace_ms - start_ms) / 1000
    return (time.perf_counter() if now is None else now) + SCORES_START_WITHIN * left_s
