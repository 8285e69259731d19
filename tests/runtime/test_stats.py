"""engine.runtime.stats.percentile, the one percentile of the metrics, the reports and the MLX lock."""

from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.mlx_lock import MlxLock
from engine.runtime.stats import percentile


def test_percentile_interpolates_between_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)  # order does not matter
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert percentile([10.0, 20.0, 30.0], 25) == pytest.approx(15.0)


def test_percentile_ends_and_clamping():
    values = [3.0, 1.0, 2.0]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 3.0
    assert percentile(values, -5) == 1.0 and percentile(values, 250) == 3.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    assert percentile(iter([1.0, 3.0]), 50) == pytest.approx(2.0)  # any iterable


def test_percentile_matches_numpys_linear_method():
    rng = np.random.default_rng(7)
    for n in (2, 5, 20, 101):
        values = rng.exponential(size=n).tolist()
        for q in (5, 50, 90, 95, 99):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q))), (n, q)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_mlx_lock_reports_interpolated_percentiles_and_zero_before_any_hold():
    clock = _Clock()
    lock = MlxLock(clock=clock)
    empty = lock.snapshot()
    assert (empty.hold_p50, empty.hold_p95, empty.wait_p50, empty.wait_p95) == (0.0, 0.0, 0.0, 0.0)
    for seconds in (1.0, 2.0, 3.0, 4.0):
        with lock.hold("llm"):
            clock.now += seconds
    snap = lock.snapshot()
    # The nearest-rank rule the lock used before gave 3.0 and 4.0 here.
    assert snap.hold_p50 == pytest.approx(2.5)
    assert snap.hold_p95 == pytest.approx(3.85)
    assert snap.wait_p50 == 0.0 and snap.wait_p95 == 0.0  # nobody waited
