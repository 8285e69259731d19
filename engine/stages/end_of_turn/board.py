"""Where the two end-of-turn signals of a turn in its grace meet, and who computes them.

When the user pauses, the source stage (VAD) asks ``AudioScorer`` for the audio model's
probability on a thread of its own (never in the capture callback, never holding up the
frames), and the LLM stage, which prefills the speculative transcript anyway, posts the
probability that the user's message ends there. The source stage reads ``scores`` each
frame of the grace and decides. Scores are kept per turn revision (turn id, generation),
so a reopened turn never sees the scores of its dropped revision.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.runtime.compute_gate import UnitCompute, get_compute_gate

log = logging.getLogger("parley.end_of_turn")


@dataclass(frozen=True, slots=True)
class TurnScores:
    """What is known about one turn revision: each probability, once computed, and when
    it was posted (the board's clock), for the bench's end-of-turn budget."""

    audio: float | None = None
    text: float | None = None
    audio_at: float | None = field(default=None, compare=False)
    text_at: float | None = field(default=None, compare=False)

    @property
    def combined(self) -> float | None:
        """sqrt(audio x text): high only when both agree; None until both are known."""
        if self.audio is None or self.text is None:
            return None
        return math.sqrt(max(self.audio, 0.0) * max(self.text, 0.0))


class TurnEndBoard:
    """The scores of the turn revisions in flight; thread-safe, a few entries at most."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._scores: dict[tuple[int, int], TurnScores] = {}
        self._start_by: dict[tuple[int, int], float] = {}

    def expect(self, turn_id: int, generation: int, start_by: float) -> None:
        """Scores for that revision are worth computing only if they start by ``start_by``
        (a ``clock`` time; see ``scores_wanted``)."""
        with self._lock:
            self._start_by[(turn_id, generation)] = start_by
            _bound(self._start_by)

    def scores_wanted(self, turn_id: int, generation: int) -> bool:
        """False once the revision's ``expect`` time passed: a score starting later would
        release the reply only as the grace ends (``decide.SCORES_START_WITHIN``)."""
        with self._lock:
            start_by = self._start_by.get((turn_id, generation))
        return start_by is None or self._clock() <= start_by

    def post_audio(self, turn_id: int, generation: int, probability: float) -> None:
        with self._lock:
            old = self._entry(turn_id, generation)
            self._set(turn_id, generation, TurnScores(probability, old.text, self._clock(),
                                                      old.text_at))

    def post_text(self, turn_id: int, generation: int, probability: float) -> None:
        with self._lock:
            old = self._entry(turn_id, generation)
            self._set(turn_id, generation, TurnScores(old.audio, probability, old.audio_at,
                                                      self._clock()))

    def scores(self, turn_id: int, generation: int) -> TurnScores:
        with self._lock:
            return self._scores.get((turn_id, generation), TurnScores())

    def forget(self, turn_id: int) -> None:
        """The turn was decided: drop its entries (every revision)."""
        with self._lock:
            self._scores = {k: v for k, v in self._scores.items() if k[0] != turn_id}
            self._start_by = {k: v for k, v in self._start_by.items() if k[0] != turn_id}

    def _entry(self, turn_id: int, generation: int) -> TurnScores:
        return self._scores.get((turn_id, generation), TurnScores())

    def _set(self, turn_id: int, generation: int, scores: TurnScores) -> None:
        self._scores[(turn_id, generation)] = scores
        _bound(self._scores)


def _bound(entries: MutableMapping[tuple[int, int], Any]) -> None:
    """Keep the newest 8 revisions once there are more than 16: decided turns are
    forgotten, so this only bounds leaks."""
    if len(entries) > 16:
        for stale in sorted(entries)[:-8]:
            del entries[stale]


class AudioScorer:
    """One thread that scores turn audio with the audio model, one score per revision.

    The source stage offers a revision's audio every frame once it heard enough silence
    (``offer``); the score runs on the newest audio offered when the CPU is free for it
    (``engine.runtime.compute_gate``), which on a CPU is after the speculative STT: the
    model then hears more of the silence after the words at no cost in time, and Smart
    Turn's verdict on a finished turn swings less with the exact silence it is given (see
    ``decide.AUDIO_SCORE_SILENCE_S``). Once a revision's score has started, ``taken`` is
    true and later offers for it are ignored; an offer for another revision replaces a
    request not yet started.

    ``score(audio) -> probability`` is the shared model's call; results go to ``board``.
    ``moot(turn_id, generation)``: whether that revision no longer needs a score
    (``StageContext.end_of_turn_moot``); a request still waiting for the CPU then ends
    unscored. ``compute``: the unit's handle on the compute gate, whose urgency the
    scores wait with (None: no unit's, as a test's scorer).
    Started and joined by the pipeline unit.
    """

    def __init__(self, name: str, score: Callable[[np.ndarray], float], board: TurnEndBoard,
                 on_error: Callable[[str], None],
                 moot: Callable[[int, int], bool] = lambda turn_id, generation: False, *,
                 compute: UnitCompute | None = None) -> None:
        self._score = score
        self._compute = compute
        self._board = board
        self._on_error = on_error
        self._moot = moot
        self._cond = threading.Condition()
        self._request: tuple[int, int, np.ndarray] | None = None
        self._taken: tuple[int, int] | None = None  # the revision whose score started last
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, turn_id: int, generation: int, audio: np.ndarray) -> None:
        """``audio`` is that revision's turn as it stands: score it unless the revision's
        score already started (then ignored), replacing any request not yet started."""
        with self._cond:
            if self._taken == (turn_id, generation):
                return
            self._request = (turn_id, generation, audio)
            self._cond.notify()

    def taken(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's score has started (further offers are not needed)."""
        with self._cond:
            return self._taken == (turn_id, generation)

    def stop(self, timeout: float) -> bool:
        """End the thread (after the call in progress); True if it ended in time."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def thread_name(self) -> str:
        return self._thread.name

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._stopping:
                    self._cond.wait()
                if self._stopping or self._request is None:
                    return
                turn_id, generation, _audio = self._request
            try:
                # The CPU's gate, as the stages' model calls. Under load a score can come
                # after the grace ended: it would decide nothing and delay other replies.
                moot = functools.partial(self._moot, turn_id, generation)
                gate = (get_compute_gate().hold(give_up=moot) if self._compute is None
                        else self._compute.hold(give_up=moot))
                with gate as may_run:
                    request = self._take(turn_id, generation, may_run)
                    if request is None:
                        continue
                    turn_id, generation, audio = request
                    probability = self._score(audio)
                self._board.post_audio(turn_id, generation, probability)
            except Exception as exc:  # a failed score leaves the grace to decide (logged)
                log.exception("end-of-turn audio scoring failed")
                self._on_error(f"{type(exc).__name__}: {exc}")

    def _take(self, turn_id: int, generation: int, may_run: bool) -> tuple[int, int, np.ndarray] | None:
        """With the CPU held (or given up): the newest request to score now, or None.
        Given up, the revision waited for is dropped; a newer one offered meanwhile stays
        for the next round."""
        with self._cond:
            request = self._request
            if request is None:
                return None
            if not may_run:
                if request[:2] == (turn_id, generation):
                    self._request = None
                return None
            self._request = None
            self._taken = request[0], request[1]
            return request
