"""Choosing the next token: repetition penalty, no-repeat n-grams, greedy or sampled.

These act on one row of logits (a 1-D torch tensor over the vocabulary) and on the
reply's own token ids. The penalties look only at the reply, not the prompt: a system
prompt and the user's words are full of tokens a good answer must reuse ("you", "the",
the place the user asked about), while the loops the penalties exist for are the small
model repeating itself within one reply ("I'm glad to hear that. I'm glad to hear ...").
"""

from __future__ import annotations

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


def apply_repetition_penalty(logits, tokens: list[int], penalty: float):
    """Make every token already in ``tokens`` less likely (CTRL's rule, as in transformers).

    A positive logit is divided by ``penalty``, a negative one multiplied, once per
    distinct token. Returns ``logits`` (changed in place).
    """
    if penalty == 1.0 or not tokens:
        return logits
    import torch

    index = torch.tensor(sorted(set(tokens)), dtype=torch.long, device=logits.device)
    picked = logits.index_select(0, index)
    picked = torch.where(picked > 0, picked / penalty, picked * penalty)
    logits.index_copy_(0, index, picked)
    return logits


def choose_token(logits, temperature: float, banned: set[int], generator=None) -> int:
    """The next token: argmax when ``temperature`` is 0, else sampled from the top-k.

    ``banned`` tokens get probability zero. If every token is banned (impossible with a
    real vocabulary and n-gram size > 1), the unbanned argmax rule still picks one.
    """
    import torch

    if banned:
        index = torch.tensor(sorted(banned), dtype=torch.long, device=logits.device)
        if index.numel() < logits.numel():
            logits = logits.index_fill(0, index, float("-inf"))
    if temperature == 0.0:
        return int(torch.argmax(logits))
    k = min(SAMPLING_TOP_K, logits.numel())
    top, top_index = torch.topk(logits / temperature, k)
    probs = torch.softmax(top, dim=-1)
    pick = torch.multinomial(probs, 1, generator=generator)
    return int(top_index[pick])
