"""The learned end of turn's text signal: which model gives it, and one unit's scorer.

The signal (how likely a sentence ends right after the user's words,
``LlmSession.sentence_end_probability``) used to be the reply LLM's alone, so mlx-lm and
remote LLMs gave none and their turns always waited for the grace. It now runs on a model
chosen for it (``turns.text_signal``): the reply LLM where it gives one, else the bundled
small model (SmolLM2-135M) on the CPU, which the engine loads beside any reply LLM. The
decision (``decide.commit_early``) takes the probability unchanged, whichever model gave it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from collections.abc import Callable

from engine.backends.base import LlmModel, LlmSession
from engine.config import TextSignal
from engine.runtime.compute_gate import UnitCompute


def signal_model(choice: TextSignal, reply: LlmModel | None, bundled: LlmModel | None
                 ) -> LlmModel | None:
    """The model that gives the text signal under ``choice``, or None (no text signal):
    ``reply`` is the reply LLM, ``bundled`` the bundled small model where it is loaded."""
    gives = reply is not None and reply.end_of_turn_signal()
    if choice is TextSignal.OFF:
        return None
    if choice is TextSignal.REPLY:
        return reply if gives else None
    if choice is TextSignal.BUNDLED:
        return bundled
    return reply if gives else bundled


def needs_bundled(choice: TextSignal, reply: LlmModel | None) -> bool:
    """Whether ``choice`` takes the signal from the bundled small model with this reply LLM
    (so the engine must load it)."""
    if choice is TextSignal.BUNDLED:
        return True
    return choice is TextSignal.AUTO and not (reply is not None and reply.end_of_turn_signal())


def describe(choice: TextSignal, reply: LlmModel | None, bundled: LlmModel | None) -> str:
    """The signal in words, for the engine's note."""
    model = signal_model(choice, reply, bundled)
    if model is None:
        why = ("turns.text_signal is off" if choice is TextSignal.OFF
               else "the bundled small model is not loaded" if choice is TextSignal.BUNDLED
               else "this LLM backend gives none")
        return f"no text signal ({why}), so turns wait for the reopen grace"
    if model is reply:
        return "the LLM's text signal"
    return f"the text signal of the bundled small model on {model.actual_device}"


class TextScorer:
    """One unit's text signal: a session of its own on the signal's model (with the
    conversation in the prompt the signal drifted with the history), renewed when the
    model changes. Used from one thread (the LLM stage's)."""

    def __init__(self) -> None:
        self._session: tuple[LlmModel, LlmSession] | None = None

    def probability(self, model: LlmModel, readings: tuple[str, ...]) -> float | None:
        """The least likely sentence end over ``readings`` (the STT's texts of one turn
        revision: a turn commits early only when every reading of it may end there), or
        None when no reading has words.

        jfk.flac's first pause, heard "And so am I fellow Americans." on the 30 s window
        and "And so my fellow Americans." on the fitted one, scored 0.22 and 0.05
        (SmolLM2-135M); the first ended the turn inside its sentence."""
        texts = [text for text in dict.fromkeys(readings) if text]
        if not texts:
            return None
        if self._session is None or self._session[0] is not model:
            self._session = (model, model.new_session())
        session = self._session[1]
        return min(session.sentence_end_probability(text) for text in texts)

    def reset(self) -> None:
        """Forget the session (a new model, or a new conversation's cache)."""
        self._session = None


def computing(model: LlmModel, compute: UnitCompute, give_up: Callable[[], bool]
              ) -> AbstractContextManager[bool]:
    """Hold the CPU's compute gate for one text-signal call where ``model`` computes on
    the CPU (the bundled model beside an MLX, GPU or remote reply LLM included); yields
    whether the call may run (False once ``give_up`` is true while waiting)."""
    if model.actual_device == "cpu":
        return compute.hold(give_up=give_up)
    return nullcontext(True)
