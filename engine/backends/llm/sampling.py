"""Choosing the next token: repetition penalty, no-repeat n-grams, greedy or sampled.

These act on one row of logits (a 1-D float32 numpy array over the vocabulary) and on the
reply's own token ids. The penalties look only at the reply, not the prompt: a system
prompt and the user's words are full of tokens a good answer must reuse ("you", "the",
the place the user asked about), while the loops the penalties exist for are the small
model repeating itself within one reply ("I'm glad to hear that. I'm glad to hear ...").
"""

from __future__ import annotations

import numpy as np

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
