"""Summary statistics shared by the metrics, the reports and the MLX lock."""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (``q`` in 0..100, clamped) by linear interpolation between the
    two nearest ranks (NumPy's default ``"linear"`` method); None for no values.

    ``percentile([1, 2, 3, 4], 50)`` is 2.5; ``q=0`` is the minimum and ``q=100`` the
    maximum. ``values`` need not be sorted.
    """
    ordered = sorted(values)
    if not ordered:
        return None
    pos = (len(ordered) - 1) * min(max(q, 0.0), 100.0) / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
