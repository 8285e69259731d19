"""Choosing the next token: repetition penalty, no-repeat n-grams, greedy or sampled.

``ReplyPenalties`` applies the penalty and the ban to one reply, with tool-call text
exempt; ``PenaltyDefaults`` are a model's own settings (``engine.backends.llm.family``).

These act on one row of logits (a 1-D float32 numpy array over the vocabulary) and on the
reply's own token ids. The penalties look only at the reply, not the prompt: a system
prompt and the user's words are full of tokens a good answer must reuse ("you", "the",
the place the user asked about), while the loops the penalties exist for are the small
model repeating itself within one reply ("I'm glad to hear that. I'm glad to hear ...").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.backends.base import GenerationOptions
from engine.backends.llm.tool_calls import CLOSE_TAG, HERMES, OPEN_TAG, PYTHON_TAG, ToolFormat

#: Sampling keeps only the most likely tokens, as transformers' generate() does by default:
#: a 135M model's long tail is mostly junk that pure temperature sampling would pick.
SAMPLING_TOP_K = 50


class NgramBlocker:
    """Remembers the reply's n-grams and names the tokens that would repeat one.

    Incremental: ``add`` each generated token, then ``banned()`` lists the tokens that
    would complete an n-gram already present in the reply. O(1) per token.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._tokens: list[int] = []
        self._next: dict[tuple[int, ...], set[int]] = {}

    def add(self, token: int) -> None:
        """Append one generated token."""
        self._tokens.append(token)
        n = self.size
        if n > 0 and len(self._tokens) >= n:
            gram = self._tokens[-n:]
            self._next.setdefault(tuple(gram[:-1]), set()).add(gram[-1])

    def banned(self) -> set[int]:
        """Tokens that may not come next (empty when the blocker is off)."""
        n = self.size
        if n <= 0 or len(self._tokens) < n - 1:
            return set()
        prefix = tuple(self._tokens[len(self._tokens) - (n - 1):]) if n > 1 else ()
        return self._next.get(prefix, set())


def apply_repetition_penalty(logits: np.ndarray, tokens: list[int], penalty: float) -> np.ndarray:
    """Make every token already in ``tokens`` less likely (CTRL's rule, as in transformers).

    A positive logit is divided by ``penalty``, a negative one multiplied, once per
    distinct token. Returns ``logits`` (changed in place).
    """
    if penalty == 1.0 or not tokens:
        return logits
    index = np.fromiter(set(tokens), dtype=np.int64)
    picked = logits[index]
    logits[index] = np.where(picked > 0, picked / penalty, picked * penalty)
    return logits


def choose_token(logits: np.ndarray, temperature: float, banned: set[int],
                 rng: np.random.Generator | None = None) -> int:
    """The next token: argmax when ``temperature`` is 0, else sampled from the top-k.

    ``banned`` tokens get probability zero. If every token is banned (impossible with a
    real vocabulary and n-gram size > 1), the unbanned argmax rule still picks one.
    """
    if banned and len(banned) < logits.size:
        logits = logits.copy()
        logits[np.fromiter(banned, dtype=np.int64)] = -np.inf
    if temperature == 0.0:
        return int(np.argmax(logits))
    k = min(SAMPLING_TOP_K, logits.size)
    top_index = np.argpartition(logits, -k)[-k:]
    top = logits[top_index].astype(np.float64) / temperature
    probs = np.exp(top - top.max())
    probs /= probs.sum()
    return int(top_index[(rng or _rng).choice(k, p=probs)])


_rng = np.random.default_rng()


def softmax_mass(logits: np.ndarray, tokens: np.ndarray) -> float:
    """The probability softmax gives the ``tokens`` (ids) of ``logits`` together."""
    if tokens.size == 0:
        return 0.0
    row = logits.astype(np.float64)
    row = np.exp(row - row.max())
    return float(row[tokens].sum() / row.sum())


@dataclass(frozen=True, slots=True)
class PenaltyDefaults:
    """A model's own anti-repetition settings (``engine.backends.llm.family``), and why
    it has them (``why``, for messages and the model's description)."""

    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    why: str = ""

    def for_reply(self, options: GenerationOptions) -> tuple[float, int]:
        """(penalty, n-gram size) of one reply: the options' values where they are set
        (the user's), these defaults where they are None."""
        penalty = options.repetition_penalty
        ngram = options.no_repeat_ngram_size
        return (self.repetition_penalty if penalty is None else penalty,
                self.no_repeat_ngram_size if ngram is None else ngram)


class CallText:
    """Whether a reply, fed piece by piece, is inside a tool call's text right now.

    Hermes: between ``<tool_call>`` and ``</tool_call>``; Llama 3: from a leading ``{``
    or ``<|python_tag|>`` on (the rest of the reply is the call). A trailing piece of a
    marker counts as inside (a marker split over several tokens). Only tracks; the
    parsing and checking is ``tool_calls.ToolCallSplitter``'s.
    """

    def __init__(self, fmt: ToolFormat) -> None:
        self.format = fmt
        self.text = ""

    def add(self, piece: str) -> None:
        """Append the text one token added (may be empty)."""
        self.text += piece

    @property
    def inside(self) -> bool:
        """True while call text (or a marker's start) ends the reply so far."""
        text = self.text
        if self.format == HERMES:
            return text.rfind(OPEN_TAG) > text.rfind(CLOSE_TAG) or _ends_with_part_of(text, OPEN_TAG)
        return (text.lstrip().startswith("{") or PYTHON_TAG in text
                or _ends_with_part_of(text, PYTHON_TAG))


def _ends_with_part_of(text: str, marker: str) -> bool:
    return any(text.endswith(marker[:size]) for size in range(1, len(marker)))


class ReplyPenalties:
    """The repetition penalty and n-gram ban of one reply, over its own words only.

    Tool-call text is exempt both ways (``fmt``: the call format, None when no tools are
    offered): its tokens are not remembered, so a second call may repeat the first's
    ``<tool_call>\\n{"name`` (the 4-gram ban forbade it), and nothing is penalised or
    banned while a call is being written (JSON repeats its keys and quotes by nature).
    """

    def __init__(self, penalty: float, ngram_size: int, fmt: ToolFormat | None = None) -> None:
        self.penalty = penalty
        self.ngrams = NgramBlocker(ngram_size)
        self.spoken: list[int] = []  # the reply's tokens outside calls
        self.calls = CallText(fmt) if fmt else None

    def add(self, token: int, piece: str) -> None:
        """Remember one generated token and the text it added to the reply."""
        calls = self.calls
        if calls is None:
            self._remember(token)
            return
        before = calls.inside
        calls.add(piece)
        if not (before or calls.inside):
            self._remember(token)

    def _remember(self, token: int) -> None:
        self.spoken.append(token)
        self.ngrams.add(token)

    @property
    def active(self) -> bool:
        """False while a call is being written: no penalty, no ban."""
        return self.calls is None or not self.calls.inside

    def penalised(self) -> list[int]:
        """The distinct tokens the repetition penalty applies to next (none: it is off)."""
        if self.penalty == 1.0 or not self.active:
            return []
        return sorted(set(self.spoken))

    def banned(self) -> set[int]:
        """The tokens the n-gram ban forbids next."""
        return self.ngrams.banned() if self.active else set()

    def apply(self, logits: np.ndarray) -> set[int]:
        """Penalise ``logits`` in place; the banned tokens, for ``choose_token``."""
        if self.active:
            apply_repetition_penalty(logits, self.spoken, self.penalty)
        return self.banned()
