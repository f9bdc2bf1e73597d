"""Section III cost model: the formulas, integer shards and the plan evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.planning.sharding.cost_model import (
    epoch_time_s,
    integer_shards,
    per_sample_time_s,
    proportional_shards,
    total_cost_s,
    transfer_cost_s,
)


@pytest.mark.parametrize(
    ("shard", "batch", "t_compute", "t_update", "expected"),
    [
        (100, 10, 0.1, 0.5, 10 * (10 * 0.1 + 0.5)),  # B_i = 10 batches
        (64, 64, 0.2, 1.0, 1 * (64 * 0.2 + 1.0)),  # one batch
        (0, 16, 0.1, 0.5, 0.0),  # gamma_i = 0
        (30, 60, 0.1, 0.6, 0.5 * (60 * 0.1 + 0.6)),  # B_i = d/b < 1
    ],
)
def test_epoch_time_is_batches_times_step(
    shard: int, batch: int, t_compute: float, t_update: float, expected: float
) -> None:
    assert epoch_time_s(shard, batch, t_compute, t_update) == pytest.approx(expected)
    if shard:
        t_total = per_sample_time_s(t_compute, t_update, batch)
        assert epoch_time_s(shard, batch, t_compute, t_update) == pytest.approx(shard * t_total)


def test_transfer_cost_is_linear_in_the_shard() -> None:
    assert transfer_cost_s(250, 0.004) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("shards", "transfers", "inits", "epochs", "n", "expected"),
    [
        ([10, 20], [1.0, 2.0], [5.0, 5.0], [10.0, 8.0], 2, max(1 + 5 + 20, 2 + 5 + 16)),
        ([0, 20], [100.0, 2.0], [100.0, 5.0], [100.0, 8.0], 1, 2 + 5 + 8),  # gamma = 0 ignored
        ([0, 0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 1, 0.0),
    ],
)
def test_total_cost_is_the_max_over_deployed_workers(
    shards: list[int],
    transfers: list[float],
    inits: list[float],
    epochs: list[float],
    n: int,
    expected: float,
) -> None:
    assert total_cost_s(shards, transfers, inits, epochs, n) == pytest.approx(expected)


def test_proportional_shards_equalise_finishing_times() -> None:
    t = [0.1, 0.2, 0.4]
    shards = proportional_shards(t, 700)
    assert sum(shards) == pytest.approx(700)
    finish = [d * ti for d, ti in zip(shards, t, strict=True)]
    assert max(finish) == pytest.approx(min(finish))
    assert shards == pytest.approx([400, 200, 100])


@given(
    st.lists(st.floats(0.001, 10.0), min_size=1, max_size=40),
    st.integers(1, 100_000),
)
def test_integer_shards_sum_exactly_and_stay_within_one(weights: list[float], size: int) -> None:
    real = proportional_shards(weights, size)
    rounded = integer_shards(real, size)
    assert sum(rounded) == size
    assert all(r >= 0 for r in rounded)
    assert all(abs(r - x) < 1.0 + 1e-9 for r, x in zip(rounded, real, strict=True))


@pytest.mark.parametrize(
    ("real", "size", "expected"),
    [
        ([2.0, 2.0], 7, [4, 3]),  # shares summing short of |M| by more than one per worker
        ([5.0, 5.0], 7, [4, 3]),  # shares over |M|: taken back, smallest remainder first
        ([0.4, 0.6], 1, [0, 1]),
        ([], 5, []),
    ],
)
def test_integer_shards_sum_to_m_even_when_the_shares_do_not(
    real: list[float], size: int, expected: list[int]
) -> None:
    rounded = integer_shards(real, size)
    assert rounded == expected and sum(rounded) == (size if real else 0)
