"""Lagrangian bound of MVSP: never above a proven optimum, tighter than the routing bound."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_placement import _brute_force, tiny_problems

from deepedge.planning.placement import bound as placement_bound
from deepedge.planning.placement import plan_placement
from deepedge.planning.placement.bound import lagrangian_bound, load_free_kept
from deepedge.planning.placement.instance import index_problem
from deepedge.planning.placement.model import Method, PlacementProblem, SolveStatus
from deepedge.planning.placement.policies import lower_bound, routing_bound
from deepedge.sim.placement_scenarios import P1, P2, SCALE, generate

SPECS = [
    replace(P1, mean_rate_rps=99.0),
    replace(P1, max_colocated=1, seed=3),
    replace(P2, mean_rate_rps=5.5),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.mean_rate_rps}-{s.seed}")
def test_bound_below_proven_optimum(spec) -> None:
    problem = generate(spec)
    sol = plan_placement(problem, Method.MILP, time_limit_s=60)
    assert sol.status == SolveStatus.OPTIMAL and sol.objective is not None
    inst = index_problem(problem)
    # steer towards a target above the optimum: the ascent overshoots if it can
    lag = lagrangian_bound(inst, target=sol.objective * 1.2, max_iterations=60)
    assert lag is not None
    assert lag.bound <= sol.objective + 1e-9
    assert lag.start_bound == pytest.approx(routing_bound(inst), rel=1e-9)
    # the ascent closes most of what the routing bound leaves open
    assert lag.bound >= routing_bound(inst)
    assert (sol.objective - lag.bound) <= 0.5 * (sol.objective - routing_bound(inst)) + 1e-9


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_problems())
def test_bound_below_brute_force_optimum(problem: PlacementProblem) -> None:
    oracle = _brute_force(problem)
    inst = index_problem(problem)
    if oracle is None or inst.c_demand.size == 0:
        return
    for target in (oracle, 2.0 * oracle):
        lag = lagrangian_bound(inst, target=target, max_iterations=40)
        assert lag is not None
        assert lag.bound <= oracle + 1e-7 * max(1.0, abs(oracle))


def test_load_free_dominance_keeps_the_fastest_smallest() -> None:
    inst = index_problem(generate(P1))
    kept = load_free_kept(inst)
    # Nexus profiles: batch 1 is the fastest and smallest variant of every model
    assert kept.sum() == len(inst.problem.models)
    assert set(inst.g_variant[kept].tolist()) == {0}


def test_too_many_options_gives_no_bound() -> None:
    inst = index_problem(generate(replace(P1, max_colocated=3)))
    assert lagrangian_bound(inst, target=10.0, max_options=2) is None


def test_heuristic_bound_uses_the_best_proof() -> None:
    inst = index_problem(generate(replace(P1, mean_rate_rps=22.0)))
    bound, kind = lower_bound(inst, time_limit_s=10.0, target=10.0)
    assert bound >= routing_bound(inst)
    assert kind.value in {"Lagrangian bound", "LP relaxation", "routing bound"}


def test_sorted_sums_match_the_matrix() -> None:
    spec = replace(SCALE, n_sources=60, n_nodes=8, n_models=4, models_per_source=2)
    inst = index_problem(generate(spec))
    tables = placement_bound._tables(inst, max_options=5000)
    assert tables is not None and all(t.single for t in tables)
    lam0 = np.zeros(inst.n_demands)
    for t in tables:
        np.maximum.at(lam0, t.demands[t.entry_demand], t.entry_a + t.entry_r * 40.0)
    rng = np.random.default_rng(0)
    for scale in (0.5, 1.0, 2.0):
        lam = lam0 * scale * rng.uniform(0.8, 1.2, lam0.size)
        for t in tables:
            fast, fast_d = placement_bound._node_min_single(t, lam)
            slow, slow_d = placement_bound._node_min_matrix(t, lam)
            assert fast == pytest.approx(slow, rel=1e-9, abs=1e-12)
            assert sorted(fast_d.tolist()) == sorted(slow_d.tolist())
