"""One unit's end-of-turn policy: the board, the scorers and the decision, in one object.

Built by the pipeline unit (with the shared audio model and the text signal's model, where
learned end of turn has them) and asked by the stages: the source stage (VAD) says when a
turn revision's speculative work starts, offers its audio and asks whether to commit
early; the LLM stage, which has the revision's words, asks for the text signal and
whether a revision may end the turn. ``turns.end_of_turn`` is read at every question, so a
runtime change (silence <-> learned) takes effect at the next revision. Nothing here needs
a pipeline: tests drive it with scores and words alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from engine.backends.base import LlmModel
from engine.config import EndOfTurn, EngineConfig
from engine.runtime.compute_gate import UnitCompute
from engine.stages.end_of_turn import decide
from engine.stages.end_of_turn.board import AudioScorer, TurnEndBoard, TurnScores
from engine.stages.end_of_turn.text_signal import TextScorer, computing, signal_model


class AudioModel(Protocol):
    """The end-of-turn audio model's contract (``smart_turn.SmartTurn``)."""

    def probability(self, audio: np.ndarray) -> float:
        """P(the turn is complete) for 16 kHz mono speech ending now; thread-safe."""
        ...


class EndOfTurnPolicy:
    """Silence or learned end of turn for one pipeline unit.

    ``config()``: the unit's settings now. ``committed(turn)`` and ``stale(turn,
    generation)``: the unit's turn state (``EventHold.committed``,
    ``TurnControl.is_stale``). ``audio_model``: the shared Smart Turn model (its
    ``probability(audio)``), or None: no audio signal, so nothing commits early.
    ``text_model``: the text signal's own model where it is not the reply LLM (the
    bundled small model), or None; ``turns.text_signal`` chooses between the two
    (``text_signal.signal_model``). ``on_error``: an audio score failed (the message).
    """

    def __init__(self, unit: int, config: Callable[[], EngineConfig],
                 committed: Callable[[int], bool], stale: Callable[[int, int], bool], *,
                 audio_model: AudioModel | None = None, text_model: LlmModel | None = None,
                 on_error: Callable[[str], None] = lambda message: None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.unit = unit
        self.compute = UnitCompute(unit)  # the scorers' calls wait as urgently as the unit
        self._config = config
        self._committed = committed
        self._stale = stale
        self.board = TurnEndBoard(clock)
        self._text_model = text_model
        self._text = TextScorer()
        self.audio_scorer: AudioScorer | None = None
        if audio_model is not None:
            self.audio_scorer = AudioScorer(f"parley-u{unit}-turn", audio_model.probability,
                                            self.board, on_error, self.moot,
                                            compute=self.compute)

    # ------------------------------------------------------------------ the unit's
    def start(self) -> None:
        """Start the audio scorer's thread, if there is an audio model."""
        if self.audio_scorer is not None:
            self.audio_scorer.start()

    def stop(self, timeout: float) -> bool:
        """Stop the audio scorer's thread; True if it ended in time (or there is none)."""
        return self.audio_scorer is None or self.audio_scorer.stop(timeout)

    def use_text_model(self, model: LlmModel | None) -> None:
        """The text signal's own model from now on (the engine loaded or dropped it)."""
        self._text_model = model

    # ------------------------------------------------------------------ questions
    @property
    def learned(self) -> bool:
        """Whether the unit's turns end by the learned decision now."""
        return self._config().turns.end_of_turn is EndOfTurn.LEARNED

    def moot(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's end-of-turn signals are no longer worth computing: the
        turn was committed or the revision dropped, or other units' replies hold the CPU
        past the time they had to start (``TurnEndBoard.scores_wanted``). A unit alone
        always gets its signals, however long its own transcription took."""
        if self._committed(turn_id) or self._stale(turn_id, generation):
            return True
        return (not self.board.scores_wanted(turn_id, generation)
                and self.compute.others_ahead())

    def scores(self, turn_id: int, generation: int) -> TurnScores:
        return self.board.scores(turn_id, generation)

    # ------------------------------------------------------------------ the source stage's
    def speculation_started(self, turn_id: int, generation: int, now: float | None = None) -> None:
        """A revision's speculative work started: under learned end of turn its scores are
        worth computing until ``decide.scores_start_by``."""
        config = self._config()
        if self.learned:
            self.board.expect(turn_id, generation,
                              decide.scores_start_by(config.vad, config.turns, now))

    @property
    def scores_audio(self) -> bool:
        """Whether revisions' audio is to be offered (learned, with an audio model)."""
        return self.audio_scorer is not None and self.learned

    def audio_wanted(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's audio is still to be offered (its score not started)."""
        return self.audio_scorer is not None and not self.audio_scorer.taken(turn_id, generation)

    def offer_audio(self, turn_id: int, generation: int, audio: np.ndarray) -> None:
        """The revision's audio as it stands (``AudioScorer.offer``)."""
        if self.audio_scorer is not None:
            self.audio_scorer.offer(turn_id, generation, audio)

    def commit_early(self, turn_id: int, generation: int) -> bool:
        """Whether the learned decision ends that revision's turn now
        (``decide.commit_early`` with ``turns.end_of_turn_threshold``)."""
        return self.learned and decide.commit_early(
            self.board.scores(turn_id, generation), self._config().turns.end_of_turn_threshold)

    def forget(self, turn_id: int) -> None:
        """The turn was decided: its scores go."""
        self.board.forget(turn_id)

    # ------------------------------------------------------------------ the LLM stage's
    def text_model(self, reply: LlmModel | None) -> LlmModel | None:
        """The model that gives the text signal now, with ``reply`` the reply LLM; None:
        no text signal (``turns.text_signal``, ``text_signal.signal_model``)."""
        return signal_model(self._config().turns.text_signal, reply, self._text_model)

    def wants_text(self, turn_id: int, reply: LlmModel | None) -> bool:
        """Whether a revision of ``turn_id`` is to be given its text signal now: learned,
        not committed yet, and a model gives one."""
        return (self.learned and not self._committed(turn_id)
                and self.text_model(reply) is not None)

    def score_text(self, turn_id: int, generation: int, readings: tuple[str, ...],
                   reply: LlmModel | None) -> float | None:
        """The text signal of a revision (the least likely end over the STT's
        ``readings``), posted to the board; None when there is none (no model, no words,
        or the revision became moot while waiting for the CPU). Runs on the caller's
        thread (the LLM stage's), holding the CPU's gate where its model runs there."""
        model = self.text_model(reply)
        if model is None:
            return None
        # Under load the grace may end while this waits for the CPU: then it is moot.
        with computing(model, self.compute, lambda: self.moot(turn_id, generation)) as may_run:
            if not may_run:
                return None
            probability = self._text.probability(model, readings)
        if probability is not None:
            self.board.post_text(turn_id, generation, probability)
        return probability

    def may_end_here(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's words may end the turn, as far as is known: under
        learned end of turn with a text signal posted, that it reaches
        ``decide.MIN_TEXT_P`` (below it the decision never commits early); otherwise
        (silence, or no text signal) nothing says it may not."""
        text = self.board.scores(turn_id, generation).text
        return not self.learned or text is None or text >= decide.MIN_TEXT_P

    def reset_text(self) -> None:
        """A new reply model: the text signal's session is renewed at its next use."""
        self._text.reset()
