"""The exact integer shard split: checked against enumeration of every split."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.planning.sharding.split import continuous_cost_s, min_max_split


def brute(c: list[float], a: list[float], lo: list[int], total: int, up: list[int] | None):
    best = None
    for d in itertools.product(*(range(lo_i, total + 1) for lo_i in lo)):
        if sum(d) != total or (up is not None and any(x > u for x, u in zip(d, up, strict=True))):
            continue
        cost = max(ci + ai * di for ci, ai, di in zip(c, a, d, strict=True))
        best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(0.0, 50.0), min_size=n, max_size=n),
            st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n),
            st.lists(st.integers(1, 4), min_size=n, max_size=n),
            st.integers(1, 14),
            st.one_of(st.none(), st.lists(st.integers(1, 14), min_size=n, max_size=n)),
        )
    )
)
def test_split_is_the_integer_optimum(case: tuple) -> None:
    c, a, lo, total, up = case
    if up is not None:
        up = [max(u, low) for u, low in zip(up, lo, strict=True)]
    expected = brute(c, a, lo, total, up)
    split = min_max_split(
        np.array(c), np.array(a), np.array(lo), total, None if up is None else np.array(up)
    )
    if expected is None:
        assert split is None
        return
    assert split is not None
    assert int(split.shards.sum()) == total
    assert all(d >= low for d, low in zip(split.shards, lo, strict=True))
    if up is not None:
        assert all(d <= u for d, u in zip(split.shards, up, strict=True))
    assert split.cost_s == max(ci + ai * di for ci, ai, di in zip(c, a, split.shards, strict=True))
    assert abs(split.cost_s - expected) <= 1e-9 * max(1.0, expected)
    relaxed = continuous_cost_s(
        np.array(c),
        np.array(a),
        np.array(lo, float),
        total,
        None if up is None else np.array(up, float),
    )
    assert relaxed <= split.cost_s + 1e-9  # the continuous optimum is a lower bound


def test_floors_beyond_the_data_set_have_no_split() -> None:
    assert min_max_split(np.zeros(2), np.ones(2), np.array([6, 6]), 10) is None


def test_a_worker_with_a_large_start_cost_takes_only_its_floor() -> None:
    split = min_max_split(np.array([0.0, 100.0]), np.array([1.0, 1.0]), np.array([1, 2]), 50)
    assert split is not None and split.shards.tolist() == [48, 2] and split.cost_s == 102.0


def test_a_worker_held_at_a_ceiling_equal_to_a_large_dataset_costs_its_full_shard() -> None:
    """|M| = 6,369,979,911 on one worker whose ceiling is |M|: rounding held the worker at
    its ceiling with nothing left free, the level came back as the floor's cost, and the
    integer split then added 6.4e9 units one by one (a hang found by the property test)."""
    fixed, rate, total = 2.697867137638703, 4.197352393619469e-08, 6_369_979_911
    f, a = np.array([fixed]), np.array([rate])
    level = continuous_cost_s(f, a, np.array([4.0]), total, np.array([float(total)]))
    assert np.isclose(level, fixed + rate * total)
    split = min_max_split(f, a, np.array([4]), total, np.array([total]))
    assert split is not None and int(split.shards[0]) == total
    assert np.isclose(split.cost_s, fixed + rate * total)


def test_two_workers_held_at_their_ceilings_cost_the_dearer_one() -> None:
    f, a = np.array([0.0, 5.0]), np.array([1.0, 1.0])
    level = continuous_cost_s(f, a, np.array([0.0, 0.0]), 30, np.array([10.0, 20.0]))
    assert level == 25.0  # 5 + 20, the ceilings sum to |M| exactly
