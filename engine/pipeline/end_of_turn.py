"""What the stages ask of their unit's end-of-turn policy, as a contract.

``StageContext.end_of_turn`` is typed with ``EndOfTurnQuestions``: the source stage (VAD)
says when a turn revision's speculative work starts, offers its audio and asks whether to
commit early; the LLM stage asks for the text signal and whether a revision may end the
turn. The policy itself (silence or learned: the board, the scorers, the decision) is
``engine.stages.end_of_turn.policy.EndOfTurnPolicy``, built by whoever builds the stage
context (the pipeline unit, a stage test), above this layer: the pipeline names only
the questions.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from engine.backends.base import LlmModel


class RevisionScores(Protocol):
    """What is known about one turn revision (``engine.stages.end_of_turn.board.TurnScores``):
    each probability once computed, and when it was posted."""

    @property
    def audio(self) -> float | None: ...

    @property
    def text(self) -> float | None: ...

    @property
    def audio_at(self) -> float | None: ...

    @property
    def text_at(self) -> float | None: ...

    @property
    def combined(self) -> float | None:
        """Both signals combined; None until both are known."""
        ...


class EndOfTurnQuestions(Protocol):
    """The questions the stages of one unit ask its end-of-turn policy."""

    @property
    def learned(self) -> bool:
        """Whether the unit's turns end by the learned decision now."""
        ...

    @property
    def scores_audio(self) -> bool:
        """Whether revisions' audio is to be offered."""
        ...

    def scores(self, turn_id: int, generation: int) -> RevisionScores:
        """What is known about that revision."""
        ...

    def speculation_started(self, turn_id: int, generation: int, now: float | None = None) -> None:
        """A revision's speculative work started."""
        ...

    def audio_wanted(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's audio is still to be offered."""
        ...

    def offer_audio(self, turn_id: int, generation: int, audio: np.ndarray) -> None:
        """The revision's audio as it stands."""
        ...

    def commit_early(self, turn_id: int, generation: int) -> bool:
        """Whether the learned decision ends that revision's turn now."""
        ...

    def forget(self, turn_id: int) -> None:
        """The turn was decided: its scores go."""
        ...

    def wants_text(self, turn_id: int, reply: LlmModel | None) -> bool:
        """Whether a revision of ``turn_id`` is to be given its text signal now."""
        ...

    def score_text(self, turn_id: int, generation: int, readings: tuple[str, ...],
                   reply: LlmModel | None) -> float | None:
        """The text signal of a revision, posted; None when there is none."""
        ...

    def may_end_here(self, turn_id: int, generation: int) -> bool:
        """Whether that revision's words may end the turn, as far as is known."""
        ...

    def reset_text(self) -> None:
        """A new reply model: the text signal's session is renewed at its next use."""
        ...
