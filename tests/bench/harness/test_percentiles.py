"""The benchmarks' one percentile: linear between order statistics, or a measured sample."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.bench.harness.percentiles import PercentileMethod, percentile

LINEAR, RANK = PercentileMethod.LINEAR, PercentileMethod.RANK
FIVE = [5.0, 1.0, 4.0, 2.0, 3.0]
samples = st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=60)
whole_percents = st.integers(0, 100)


@pytest.mark.parametrize(
    ("values", "q", "method", "expected"),
    [([3.0], 95, LINEAR, 3.0), (FIVE, 50, LINEAR, 3.0), (FIVE, 95, LINEAR, 4.8),
     ([5.0, 1.0], 100, LINEAR, 5.0), ([8.5, 2.0], 50, LINEAR, 5.25), ([8.5, 2.0], 0, LINEAR, 2.0),
     ([3.0], 95, RANK, 3.0), (FIVE, 50, RANK, 3.0), (FIVE, 95, RANK, 5.0),
     ([4.0, 1.0, 3.0, 2.0], 50, RANK, 3.0), ([8.5, 2.0], 50, RANK, 8.5),
     ([8.5, 2.0], 0, RANK, 2.0), (list(range(1, 101)), 99, RANK, 100.0)],
)  # fmt: skip
def test_percentile_by_method(
    values: list[float], q: float, method: PercentileMethod, expected: float
) -> None:
    assert percentile(values, q, method) == pytest.approx(expected)


def test_linear_is_the_default() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


@pytest.mark.parametrize("method", list(PercentileMethod))
def test_no_values_give_nan(method: PercentileMethod) -> None:
    assert math.isnan(percentile([], 95, method))


@pytest.mark.parametrize("q", [-1, 100.5, 150])
def test_a_percentile_outside_0_to_100_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0, 2.0], q)


@given(samples, whole_percents)
def test_linear_interpolates_between_the_order_statistics_around_q(
    values: list[float], q: int
) -> None:
    ordered = sorted(values)
    position = q / 100 * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    expected = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    assert percentile(values, q) == pytest.approx(expected, rel=1e-12, abs=1e-9)


@given(samples, whole_percents)
def test_rank_picks_the_sample_at_the_fraction_written_out(values: list[float], q: int) -> None:
    fraction = float(f"{q / 100:.2f}")  # 0.99, as a caller on the 0..1 scale writes it
    ordered = sorted(values)
    expected = ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]
    assert percentile(values, q, RANK) == expected
    assert percentile(values, q, RANK) in values


@given(samples, whole_percents, whole_percents, st.sampled_from(list(PercentileMethod)))
def test_a_percentile_lies_within_the_samples_and_grows_with_q(
    values: list[float], q1: int, q2: int, method: PercentileMethod
) -> None:
    low, high = sorted((q1, q2))
    a, b = percentile(values, low, method), percentile(values, high, method)
    assert min(values) <= a <= b <= max(values)
