"""The figures every decision is made on: Wilson's interval of one accuracy, Newcombe's
interval of a paired difference, McNemar's exact test."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.controlplane.evidence import (
    accuracy,
    compare_paired,
    paired_from_counts,
    wilson,
)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (81, 263, 0.2553, 0.3662),  # Newcombe (1998), single proportion, 95 %
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (20, 20, 0.8389, 1.0),
    ],
)
def test_wilson_matches_the_published_intervals(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson(k, n, 0.95)
    assert lo == pytest.approx(low, abs=2e-4) and hi == pytest.approx(high, abs=2e-4)


def test_no_sample_says_nothing() -> None:
    assert wilson(0, 0, 0.95) == (0.0, 1.0)
    empty = paired_from_counts(0, 0, 0, 0, 0.95)
    assert empty.n == 0 and (empty.low, empty.high, empty.p_value) == (-1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("f", "g", "p"),
    [(10, 0, 2 * 0.5**10), (0, 0, 1.0), (5, 5, 1.0), (3, 9, 0.146)],
)
def test_mcnemars_exact_test(f: int, g: int, p: float) -> None:
    assert paired_from_counts(40, f, g, 40, 0.95).p_value == pytest.approx(p, abs=1e-3)


def test_the_paired_interval_holds_the_difference_and_mirrors_when_swapped() -> None:
    c = paired_from_counts(50, 12, 3, 35, 0.95)
    assert c.n == 100 and c.diff == pytest.approx(0.09)
    assert c.low < c.diff < c.high
    swapped = paired_from_counts(50, 3, 12, 35, 0.95)
    assert swapped.low == pytest.approx(-c.high) and swapped.high == pytest.approx(-c.low)


def test_agreement_on_few_samples_is_no_evidence_of_equality() -> None:
    """Two versions that never disagree on 5 samples: the interval stays wide (a
    conditional test would say [0, 0]); on 500 it is narrow."""
    few, many = paired_from_counts(4, 0, 0, 1, 0.95), paired_from_counts(400, 0, 0, 100, 0.95)
    assert few.high - few.low > 0.3
    assert many.high - many.low < 0.02


def test_evidence_adds_up_over_windows() -> None:
    a = paired_from_counts(10, 4, 1, 5, 0.9)
    b = paired_from_counts(20, 6, 2, 2, 0.9)
    total = a + b
    assert (total.both, total.a_only, total.b_only, total.neither) == (30, 10, 3, 7)
    assert total.confidence == 0.9 and total.high - total.low < a.high - a.low


@pytest.mark.parametrize(
    ("p_a", "p_b", "rho"), [(0.9, 0.9, 0.5), (0.7, 0.5, 0.3), (0.3, 0.25, 0.0)]
)
def test_the_paired_interval_covers_the_true_difference(p_a: float, p_b: float, rho: float) -> None:
    """Coverage by simulation: correlated correctness of two versions on 60 samples, 600
    draws; the 95 % interval holds the true difference in at least 93 % of them."""
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(600):
        shared = rng.random(60) < rho
        u = rng.random(60)
        a_right = u < p_a
        b_right = np.where(shared, u < p_b, rng.random(60) < p_b)
        c = compare_paired(a_right, b_right, 0.95)
        covered += c.low <= p_a - p_b <= c.high
    assert covered / 600 >= 0.93


def test_compare_needs_the_same_samples() -> None:
    with pytest.raises(ValueError, match="differ in number"):
        compare_paired(np.ones(3, bool), np.ones(4, bool), 0.95)
    one = accuracy(np.array([True, True, False, True]), 0.95)
    assert one.n == 4 and one.value == 0.75 and one.low < 0.75 < one.high
