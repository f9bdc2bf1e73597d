"""MVSP planner: hand-checked optima, brute-force oracle, checker, K, MILP vs heuristic."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InfeasibleError
from deepedge.planning.placement import milp as placement_milp
from deepedge.planning.placement import plan_placement
from deepedge.planning.placement.check import check_solution
from deepedge.planning.placement.heuristic import solve_heuristic
from deepedge.planning.placement.instance import index_problem
from deepedge.planning.placement.model import (
    Demand,
    EdgeNode,
    InferenceModel,
    Link,
    Method,
    PlacementProblem,
    SolveStatus,
    Source,
    UtilisationCost,
    Variant,
)
from deepedge.planning.placement.solution import build_solution, evaluate
from deepedge.sim.placement_scenarios import P1, generate, random_small

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

LINEAR_COST = UtilisationCost(scale=0.1, rate=1.0, tangent_points=[0.0])  # z = 0.1 u


def _variant(vid: str, lat: float, mem: float, load: float, a: float = 0.1) -> Variant:
    return Variant(id=vid, latency_ms=lat, memory_mb=mem, max_load_rps=load, interference_coeff=a)


def _one_source(nodes_ms: dict[str, float], variants: list[Variant], rate: float = 10.0,
                lmax: float = 100.0, k: int = 2) -> PlacementProblem:  # fmt: skip
    return PlacementProblem(
        name="hand",
        sources=[Source(id="s", demands=[Demand(model="m", rate_rps=rate, max_latency_ms=lmax)])],
        edge_nodes=[EdgeNode(id=n, memory_mb=4096.0) for n in nodes_ms],
        links=[Link(a="s", b=n, delay_ms=d) for n, d in nodes_ms.items()],
        models=[InferenceModel(id="m", variants=variants)],
        max_colocated=k,
        latency_weight=0.1,
        cost=LINEAR_COST,
    )


# (problem, expected objective, expected node, expected variant)
HAND_CASES = [
    # near node wins: 0.1 * (2*5 + 10) + 0.9 * (0.1 * 1024/4096) / 2
    (_one_source({"a": 5.0, "b": 20.0}, [_variant("v", 10.0, 1024.0, 100.0)]),
     0.1 * 20.0 + 0.9 * 0.1 * 0.25 / 2, "a", "v"),
    # the faster variant is worth its memory: 0.1 * (10 + 4) + 0.9 * 0.1 * 0.5 / 2
    (_one_source({"a": 5.0}, [_variant("slow", 10.0, 1024.0, 100.0),
                               _variant("fast", 4.0, 2048.0, 100.0)]),
     0.1 * 14.0 + 0.9 * 0.1 * 0.5 / 1, "a", "fast"),
    # load 150 rps needs two instances of a 100-rps variant: IL = 10 + 0.1 * 10 * (2 - 1)
    (_one_source({"a": 5.0}, [_variant("v", 10.0, 1024.0, 100.0)], rate=150.0),
     0.1 * (10.0 + 11.0) + 0.9 * 0.1 * 0.5 / 1, "a", "v"),
    # the latency limit rules out the near-but-slow choice
    (_one_source({"a": 5.0, "b": 8.0}, [_variant("v", 30.0, 1024.0, 100.0)], lmax=45.0),
     0.1 * 40.0 + 0.9 * 0.1 * 0.25 / 2, "a", "v"),
]  # fmt: skip


@pytest.mark.parametrize("method", [Method.MILP, Method.HEURISTIC])
@pytest.mark.parametrize(("problem", "expected", "node", "variant"), HAND_CASES)
def test_hand_checked_optimum(problem, expected, node, variant, method) -> None:
    sol = plan_placement(problem, method, time_limit_s=30)
    assert sol.objective == pytest.approx(expected, rel=1e-6)
    assert (sol.routes[0].node, sol.routes[0].variant) == (node, variant)
    assert check_solution(problem, sol).ok
    assert sol.bound is not None and sol.bound <= sol.objective + 1e-9


def _brute_force(problem: PlacementProblem) -> float | None:
    """Third implementation: enumerate every route of every demand, fewest instances."""
    names = [x.id for x in problem.sources] + [e.id for e in problem.edge_nodes]
    dist = {(a, b): 0.0 if a == b else math.inf for a in names for b in names}
    for ln in problem.links:  # Floyd-Warshall: paths may relay through other nodes
        for a, b in ((ln.a, ln.b), (ln.b, ln.a)):
            dist[(a, b)] = min(dist[(a, b)], ln.delay_ms)
    for k in names:
        for a in names:
            for b in names:
                dist[(a, b)] = min(dist[(a, b)], dist[(a, k)] + dist[(k, b)])
    trips = {
        (s.id, e.id): 2 * dist[(s.id, e.id)] for s in problem.sources for e in problem.edge_nodes
    }
    models = {m.id: m for m in problem.models}
    demands = [(s.id, d) for s in problem.sources for d in s.demands]
    options = [
        [(v, e) for v in models[d.model].variants for e in problem.edge_nodes] for _, d in demands
    ]
    best = None
    total_rate = sum(d.rate_rps for _, d in demands)
    for combo in itertools.product(*options):
        load: dict[tuple[str, str, str], float] = {}
        for (_, d), (v, e) in zip(demands, combo, strict=True):
            key = (e.id, d.model, v.id)
            load[key] = load.get(key, 0.0) + d.rate_rps
        n = {}
        for (e_id, m_id, v_id), ld in load.items():
            var = next(v for v in models[m_id].variants if v.id == v_id)
            sp = next(e for e in problem.edge_nodes if e.id == e_id).speed_factor
            n[(e_id, m_id, v_id)] = (var, max(1, math.ceil(ld / (var.max_load_rps / sp) - 1e-9)))
        ok, cost = True, 0.0
        interference = {}
        for e in problem.edge_nodes:
            here = [(var, k) for (e_id, _, _), (var, k) in n.items() if e_id == e.id]
            mem = sum(var.memory_mb * k for var, k in here)
            if sum(k for _, k in here) > problem.max_colocated or mem > e.memory_mb:
                ok = False
            cost += problem.cost.cost(mem / e.memory_mb)
            interference[e.id] = sum(
                var.interference_coeff * var.latency_ms * e.speed_factor * k for var, k in here
            )
        lat_sum = 0.0
        for (s_id, d), (v, e) in zip(demands, combo, strict=True):
            lat = v.latency_ms * e.speed_factor
            total = trips[(s_id, e.id)] + (1 - v.interference_coeff) * lat + interference[e.id]
            ok &= total <= d.max_latency_ms + 1e-9
            lat_sum += d.rate_rps * total
        if not ok:
            continue
        obj = problem.latency_weight * lat_sum / total_rate + (1 - problem.latency_weight) * (
            cost / len(problem.edge_nodes)
        )
        best = obj if best is None else min(best, obj)
    return best


@st.composite
def tiny_problems(draw: st.DrawFn) -> PlacementProblem:
    n_nodes = draw(st.integers(1, 2))
    n_sources = draw(st.integers(1, 2))
    nodes = [
        EdgeNode(id=f"e{k}", memory_mb=draw(st.sampled_from([1500.0, 3000.0, 6000.0])),
                 speed_factor=draw(st.sampled_from([1.0, 2.0])))
        for k in range(n_nodes)
    ]  # fmt: skip
    variants = [
        _variant("b1", draw(st.floats(2.0, 30.0)), 1000.0, draw(st.floats(20.0, 80.0))),
        _variant("b4", draw(st.floats(10.0, 60.0)), 2500.0, draw(st.floats(60.0, 200.0))),
    ]
    models = [InferenceModel(id="m0", variants=variants),
              InferenceModel(id="m1", variants=variants[:1])]  # fmt: skip
    sources, links = [], []
    for i in range(n_sources):
        wanted = draw(st.sampled_from([["m0"], ["m1"], ["m0", "m1"]]))
        sources.append(Source(id=f"s{i}", demands=[
            Demand(model=m, rate_rps=draw(st.floats(1.0, 120.0)),
                   max_latency_ms=draw(st.floats(20.0, 150.0))) for m in wanted]))  # fmt: skip
        for e in nodes:
            links.append(Link(a=f"s{i}", b=e.id, delay_ms=draw(st.floats(0.0, 30.0))))
    return PlacementProblem(
        name="hyp", sources=sources, edge_nodes=nodes, links=links, models=models,
        max_colocated=draw(st.integers(1, 2)), latency_weight=draw(st.sampled_from([0.1, 0.5])),
    )  # fmt: skip


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_problems())
def test_random_instances_match_brute_force(problem: PlacementProblem) -> None:
    oracle = _brute_force(problem)
    try:
        sol = plan_placement(problem, Method.MILP, time_limit_s=30)
    except InfeasibleError:
        assert oracle is None
        return
    if oracle is None:
        raise AssertionError("planner found a solution where none exists")
    assert sol.status == SolveStatus.OPTIMAL
    assert check_solution(problem, sol).ok
    assert sol.objective == pytest.approx(oracle, rel=2e-4)


def _valid() -> tuple[PlacementProblem, object]:
    problem = generate(replace(P1, mean_rate_rps=22.0))
    return problem, plan_placement(problem, Method.HEURISTIC, time_limit_s=10)


def _plant(kind: str):
    problem, sol = _valid()
    r0 = sol.routes[0]
    if kind == "unrouted":
        return problem, sol.model_copy(update={"routes": sol.routes[1:]}), "(13)"
    if kind == "no-instance":
        other = next(v.id for m in problem.models if m.id == r0.model for v in m.variants
                     if not any(p.node == r0.node and p.model == r0.model and p.variant == v.id
                                for p in sol.placements))  # fmt: skip
        routes = [r0.model_copy(update={"variant": other}), *sol.routes[1:]]
        return problem, sol.model_copy(update={"routes": routes}), "(10)"
    if kind == "colocation":
        busiest = max(n.instances for n in sol.nodes)
        return problem.model_copy(update={"max_colocated": busiest - 1}), sol, "(11)"
    if kind == "memory":
        nodes = [e.model_copy(update={"memory_mb": 100.0}) for e in problem.edge_nodes]
        return problem.model_copy(update={"edge_nodes": nodes}), sol, "(12)"
    if kind == "load":
        sources = [s.model_copy(update={"demands": [d.model_copy(update={"rate_rps": 1e5})
                   for d in s.demands]}) for s in problem.sources]  # fmt: skip
        return problem.model_copy(update={"sources": sources}), sol, "(9)"
    if kind == "latency":
        sources = [s.model_copy(update={"demands": [d.model_copy(update={"max_latency_ms": 1.0})
                   for d in s.demands]}) for s in problem.sources]  # fmt: skip
        return problem.model_copy(update={"sources": sources}), sol, "(4)"
    assert kind == "objective"
    return problem, sol.model_copy(update={"objective": sol.objective * 0.99}), "objective"


@pytest.mark.parametrize(
    "kind", ["unrouted", "no-instance", "colocation", "memory", "load", "latency", "objective"]
)
def test_checker_rejects_planted_violation(kind: str) -> None:
    problem, sol, tag = _plant(kind)
    report = check_solution(problem, sol)
    assert not report.ok
    assert any(v.startswith(tag) for v in report.violations), report.violations


def test_checker_accepts_planner_output() -> None:
    problem, sol = _valid()
    report = check_solution(problem, sol)
    assert report.ok, report.violations
    assert report.objective == pytest.approx(sol.objective, rel=1e-9)


@pytest.mark.parametrize("method", [Method.MILP, Method.HEURISTIC])
def test_k1_forbids_colocation(method: Method) -> None:
    problem = generate(replace(P1, max_colocated=1))
    sol = plan_placement(problem, method, time_limit_s=30)
    assert all(n.instances <= 1 for n in sol.nodes)
    assert len({p.node for p in sol.placements}) == len(sol.placements)
    assert check_solution(problem, sol).ok


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_milp_never_worse_than_heuristic(seed: int) -> None:
    problem = generate(replace(P1, seed=seed, mean_rate_rps=22.0))
    inst = index_problem(problem)
    heur = solve_heuristic(inst)
    assert heur.assignment is not None
    milp = plan_placement(problem, Method.MILP, time_limit_s=30)
    assert milp.objective is not None
    assert milp.objective <= evaluate(inst, heur.assignment).objective + 1e-9
    assert milp.bound is not None and milp.bound <= milp.objective + 1e-9


def test_infeasible_latency_names_the_source() -> None:
    problem = _one_source({"a": 50.0}, [_variant("v", 10.0, 1024.0, 100.0)], lmax=60.0)
    with pytest.raises(InfeasibleError) as err:
        plan_placement(problem, Method.AUTO)
    assert "source s model m" in err.value.reasons[0]
    assert "latency limit" in err.value.reasons[0]


def test_infeasible_memory_is_explained() -> None:
    problem = _one_source({"a": 5.0}, [_variant("v", 10.0, 9000.0, 100.0)])
    with pytest.raises(InfeasibleError) as err:
        plan_placement(problem, Method.MILP)
    assert "memory" in err.value.reasons[0]


def test_joint_infeasibility_is_proven() -> None:
    # two models, one node, K = 1: each demand alone fits, both together do not
    base = _one_source({"a": 5.0}, [_variant("v", 10.0, 1024.0, 100.0)], k=1)
    problem = base.model_copy(update={
        "models": [*base.models,
                   InferenceModel(id="m2", variants=[_variant("w", 5.0, 512.0, 50.0)])],
        "sources": [Source(id="s", demands=[Demand(model="m", rate_rps=5, max_latency_ms=100),
                                            Demand(model="m2", rate_rps=5, max_latency_ms=100)])],
    })  # fmt: skip
    with pytest.raises(InfeasibleError, match="no placement serves every demand"):
        plan_placement(problem, Method.MILP)


def test_stop_predicate_leaves_a_feasible_solution() -> None:
    problem = generate(replace(P1, mean_rate_rps=22.0, max_colocated=1))
    inst = index_problem(problem)
    stopped = solve_heuristic(inst, stop=lambda: True)
    assert stopped.stopped and stopped.assignment is not None
    sol = build_solution(inst, stopped.assignment, method=Method.HEURISTIC,
                         status=SolveStatus.FEASIBLE, bound=None)  # fmt: skip
    assert check_solution(problem, sol).ok
    full = solve_heuristic(inst)
    assert not full.stopped and full.assignment is not None
    assert evaluate(inst, full.assignment).objective <= sol.objective + 1e-12


@pytest.mark.parametrize("limit_ms", [1e15, 1e18, 1e19, 1e300])
@pytest.mark.parametrize("method", [Method.MILP, Method.HEURISTIC])
def test_huge_latency_limits_keep_the_optimum(limit_ms: float, method: Method) -> None:
    """Limits that never bind give the same optimum as a merely loose one.

    Before: the exclusive latency was recovered as ``Lmax - slack``, which rounds to 0 or
    to a multiple of 128 ms once Lmax >= 1e18, so both solvers priced routes wrongly.
    """
    doc = json.loads((EXAMPLES / "placement-tiny.json").read_text())

    def with_limit(value: float) -> PlacementProblem:
        for s in doc["sources"]:
            for d in s["demands"]:
                d["max_latency_ms"] = value
        return PlacementProblem.model_validate(doc)

    loose = plan_placement(with_limit(1e6), Method.MILP, 20)
    huge = plan_placement(with_limit(limit_ms), method, 20)
    assert huge.objective == pytest.approx(loose.objective, rel=1e-9)
    assert [(r.node, r.variant) for r in huge.routes] == [(r.node, r.variant) for r in loose.routes]


def test_single_thread_milp_after_a_default_run() -> None:
    """HiGHS keeps one thread pool per process: a 1-thread solve after a default one used
    to come back at once with no solution (as the cold scale MILP of the benchmark did)."""
    inst = index_problem(generate(random_small(15069)))
    first = placement_milp.solve(inst, time_limit_s=60)
    second = placement_milp.solve(inst, time_limit_s=60, threads=1)
    assert first.status == second.status == SolveStatus.OPTIMAL
    assert second.objective == pytest.approx(first.objective, rel=1e-4)
