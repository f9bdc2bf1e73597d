"""Sweep planning: every stress level is visited, the budget bounds the number of points."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InvalidInputError
from deepedge.profiling.profiler import SweepConfig, plan_points, stress_levels


@pytest.mark.parametrize(
    ("cfg", "has_gpu", "n_levels"),
    [
        (SweepConfig(), False, 4 * 2 * 2),
        (SweepConfig(), True, 4 * 2 * 2 * 2),  # GPU duty cycles only with a GPU
        (SweepConfig.quick(), False, 2),
    ],
)
def test_levels(cfg, has_gpu, n_levels):
    levels = stress_levels(cfg, has_gpu)
    assert len(levels) == n_levels == len(set(levels))
    assert has_gpu or all(level.gpu_duty == 0 for level in levels)


@settings(max_examples=40, deadline=None)
@given(
    budget_s=st.floats(10.0, 2000.0),
    repeats=st.integers(1, 3),
    seed=st.integers(0, 100),
)
def test_points_cover_levels_and_fit_the_budget(budget_s, repeats, seed):
    cfg = SweepConfig(budget_s=budget_s, repeats=repeats, seed=seed)
    points = plan_points(cfg, has_gpu=False)
    levels = stress_levels(cfg, has_gpu=False)
    assert {p.stress for p in points} == set(levels)
    per_level = len(points) // len(levels)
    assert len(points) == per_level * len(levels)
    combos = len(cfg.batch_sizes) * len(cfg.worker_counts)
    assert per_level <= combos
    if per_level > 1:  # more than the one-per-level minimum only when the budget allows it
        assert len(points) * cfg.seconds_per_config <= budget_s
    for p in points:
        assert p.batch_size in cfg.batch_sizes and p.n_workers in cfg.worker_counts
        assert len(p.peer_batch_sizes) == p.n_workers - 1
    assert [p.config_id for p in points] == list(range(len(points)))


def test_default_sweep_is_planned_within_ten_minutes():
    cfg = SweepConfig()
    points = plan_points(cfg, has_gpu=False)
    assert cfg.budget_s <= 600 and len(points) * cfg.seconds_per_config <= cfg.budget_s
    quick = SweepConfig.quick()
    assert quick.budget_s <= 60


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_sizes": ()},
        {"worker_counts": (0,)},
        {"repeats": 0},
        {"cpu_loads": (1.5,)},
        {"cpu_load_slice_ms": -1},
    ],
)
def test_bad_sweeps(kwargs):
    with pytest.raises(InvalidInputError):
        SweepConfig(**kwargs)


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_each_pass_visits_every_level_once(repeats):
    from deepedge.profiling.profiler import Profiler, edge_workload

    cfg = SweepConfig(repeats=repeats)
    profiler = Profiler(cfg, edge_workload())
    visits = profiler.visits()
    levels = stress_levels(cfg, profiler.has_gpu)
    assert len(visits) == repeats * len(levels)
    orders = []
    for r in range(repeats):
        in_pass = [(level, points) for rep, level, points in visits if rep == r]
        assert sorted(map(repr, (lv for lv, _ in in_pass))) == sorted(map(repr, levels))
        for level, points in in_pass:  # the level's points, rotated by the pass
            expected = [p for p in profiler.points if p.stress == level]
            assert sorted(p.config_id for p in points) == [p.config_id for p in expected]
            assert points[0] == expected[r % len(expected)]
        orders.append([lv for lv, _ in in_pass])
    # the passes visit the levels in different (seeded) orders, not along the grid
    assert all(order != levels for order in orders)
    assert len({tuple(map(repr, o)) for o in orders}) == repeats
