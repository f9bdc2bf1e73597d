"""MVSP policies: model-variant selection, placement and request routing.

Each policy is ``(problem, time_limit_s, ...) -> PlacementSolution``, chosen by its
:class:`~deepedge.planning.placement.model.Method` in
:data:`deepedge.planning.placement.PLACEMENT_POLICIES`:

* ``heuristic`` (:func:`plan_heuristic`): greedy + local search (``heuristic``), with a
  proven lower bound beside it: the best of the routing bound
  ``alpha / R * sum_d r_d min_c (CL + L)`` (every request pays at least its exclusive
  latency; costs are non-negative), the Lagrangian bound (``bound``) and, below a size
  limit, the LP relaxation of the tightened MILP (``milp`` with rows [12] where small enough);
* ``milp`` (:func:`plan_milp`): the exact MILP with HiGHS under a time limit and relative
  gap, warm-started from the heuristic; bound and gap are HiGHS's own;
* ``auto`` (:func:`plan_auto`): the heuristic, then the warm-started MILP when the model is
  small enough to gain from it, else the heuristic with its bound.

Infeasibility is explained per blocked demand (latency limit, memory, load, no path) or,
when each demand alone could be served but not all together, by the demands the heuristic
could not place. Raises :class:`InfeasibleError` (exit 3) in both cases.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from deepedge.core.errors import InfeasibleError
from deepedge.planning.placement import milp
from deepedge.planning.placement.bound import lagrangian_bound
from deepedge.planning.placement.heuristic import HeuristicResult, solve_heuristic
from deepedge.planning.placement.instance import (
    PlacementInstance,
    index_problem,
    round_trips_of_source,
)
from deepedge.planning.placement.model import (
    Method,
    PlacementProblem,
    PlacementSolution,
    SolveStatus,
)
from deepedge.planning.placement.solution import build_solution, evaluate

log = logging.getLogger(__name__)

AUTO_MILP_CANDIDATES = 40_000  # auto runs the MILP only below this many x columns


def explain_blocked(inst: PlacementInstance) -> list[str]:
    """One line per demand that no (variant, node) can serve even alone, naming the
    constraint that blocks it."""
    prob = inst.problem
    has = np.zeros(inst.n_demands, dtype=bool)
    has[inst.c_demand] = True
    lines = []
    for d in np.flatnonzero(~has):
        src = prob.sources[int(inst.d_source[d])]
        model = prob.models[int(inst.d_model[d])]
        who = f"source {src.id} model {model.id}"
        rate, lmax = float(inst.d_rate[d]), float(inst.d_lmax[d])
        gs = np.flatnonzero(inst.g_model == inst.d_model[d])
        comm = inst.comm_ms[int(inst.d_source[d])]
        if not np.isfinite(comm).any():
            comm = round_trips_of_source(prob, int(inst.d_source[d]))
        if not np.isfinite(comm).any():
            lines.append(f"{who}: no network path to any edge node")
            continue
        total = comm[None, :] + inst.lat[gs, :]
        fits = inst.nmax[gs, :] >= 1
        if not (total <= lmax + 1e-9).any():
            g, e = np.unravel_index(int(np.argmin(total)), total.shape)
            lines.append(
                f"{who}: latency limit {lmax:.1f} ms < best achievable {total[g, e]:.1f} ms "
                f"(node {prob.edge_nodes[e].id}, variant {model.variants[g].id}: "
                f"network {comm[e]:.1f} + inference {inst.lat[gs[g], e]:.1f} ms)"
            )
        elif not (fits & (total <= lmax + 1e-9)).any():
            need = min(v.memory_mb for v in model.variants)
            lines.append(
                f"{who}: memory: no node within the latency limit can hold a variant "
                f"(smallest needs {need:.0f} MB; largest node has {inst.node_mem.max():.0f} MB)"
            )
        else:
            ok = fits & (total <= lmax + 1e-9)
            best = float(np.max(np.where(ok, inst.load[gs, :] * inst.nmax[gs, :], 0.0)))
            lines.append(
                f"{who}: load: rate {rate:.1f} rps > {best:.1f} rps, the most that K "
                "instances of any variant within the latency limit can serve"
            )
    return lines


def routing_bound(inst: PlacementInstance) -> float:
    """``alpha / R * sum_d r_d min_c (CL + L)``: a lower bound valid for every solution."""
    least = np.full(inst.n_demands, np.inf)
    total = inst.c_base + inst.g_alpha[inst.c_variant] * (inst.lat[inst.c_variant, inst.c_node])
    np.minimum.at(least, inst.c_demand, total)
    return float(inst.alpha * np.sum(inst.d_rate * least) / inst.total_rate)


class BoundKind(StrEnum):
    """Which proof a reported lower bound comes from."""

    ROUTING = "routing bound"
    LAGRANGIAN = "Lagrangian bound"
    LP = "LP relaxation"


def lower_bound(
    inst: PlacementInstance,
    time_limit_s: float,
    target: float | None = None,
    lagrangian_iterations: int = 150,
) -> tuple[float, BoundKind]:
    """Best proven bound available: the largest of the routing bound, the Lagrangian bound
    (``bound``; steered towards ``target``, a feasible objective) and, for models
    small enough to solve (``AUTO_MILP_CANDIDATES``), the LP relaxation of the tightened
    MILP."""
    best, kind = routing_bound(inst), BoundKind.ROUTING
    if target is not None:
        lag = lagrangian_bound(inst, target, max_iterations=lagrangian_iterations)
        if lag is not None and lag.bound > best:
            best, kind = lag.bound, BoundKind.LAGRANGIAN
    if inst.c_demand.size <= AUTO_MILP_CANDIDATES:
        lp = milp.solve(inst, time_limit_s=time_limit_s, relax=True, strong=None)
        if lp.bound is not None and lp.bound > best:
            best, kind = lp.bound, BoundKind.LP
    return best, kind


@dataclass(frozen=True)
class _Start:
    """What every policy starts from: the indexed problem and the heuristic's solution."""

    inst: PlacementInstance
    heur: HeuristicResult
    unrouted: list[str]  # one line per demand the heuristic could not route


def _start(problem: PlacementProblem) -> _Start:
    """Index ``problem``, raise InfeasibleError for demands that nothing can serve, and run
    the heuristic (every policy warm-starts from it or returns it)."""
    inst = index_problem(problem)
    blocked = explain_blocked(inst)
    if blocked:
        raise InfeasibleError(
            f"{len(blocked)} demand(s) cannot be served: " + "; ".join(blocked[:3]),
            reasons=blocked,
        )
    heur = solve_heuristic(inst)
    unrouted = [
        f"source {problem.sources[int(inst.d_source[d])].id} model "
        f"{problem.models[int(inst.d_model[d])].id}: no room left within its latency limit "
        "(co-location limit K, memory or load of the reachable nodes)"
        for d in heur.unrouted
    ]
    return _Start(inst, heur, unrouted)


def _heuristic_solution(
    start: _Start,
    bound: float | None,
    time_limit_s: float,
    mip_rel_gap: float,
    bound_time_limit_s: float | None,
) -> PlacementSolution:
    """The heuristic's solution with ``bound`` (None: the best of :func:`lower_bound`)."""
    inst, heur = start.inst, start.heur
    if heur.assignment is None:
        return PlacementSolution(
            problem=inst.problem.name, method=Method.HEURISTIC, status=SolveStatus.NO_SOLUTION,
            explanation=start.unrouted,
        )  # fmt: skip
    if bound is None:
        limit = bound_time_limit_s if bound_time_limit_s is not None else time_limit_s
        target = evaluate(inst, heur.assignment).objective
        bound, kind = lower_bound(inst, limit, target)
        log.debug("heuristic bound from %s: %.6g", kind, bound)
    sol = build_solution(inst, heur.assignment, method=Method.HEURISTIC,
                         status=SolveStatus.FEASIBLE, bound=bound)  # fmt: skip
    if sol.gap is not None and sol.gap <= mip_rel_gap:
        sol = sol.model_copy(update={"status": SolveStatus.OPTIMAL})
    return sol


def _milp_solution(
    start: _Start, time_limit_s: float, mip_rel_gap: float, bound_time_limit_s: float | None
) -> PlacementSolution:
    """The MILP warm-started from the heuristic; the heuristic's solution with the MILP's
    bound when HiGHS found none within its limit."""
    inst, heur, unrouted = start.inst, start.heur, start.unrouted
    res = milp.solve(
        inst, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap, warm_start=heur.assignment
    )
    if res.status == SolveStatus.INFEASIBLE:
        raise InfeasibleError(
            "no placement serves every demand together (proven by the MILP)"
            + (": " + "; ".join(unrouted[:3]) if unrouted else ""),
            reasons=unrouted or ["joint capacity (K, memory, load) is insufficient"],
        )
    if res.assignment is not None:
        return build_solution(inst, res.assignment, method=Method.MILP, status=res.status,
                              bound=res.bound, solver=res.report)  # fmt: skip
    if heur.assignment is None:
        return PlacementSolution(
            problem=inst.problem.name, method=Method.MILP, status=SolveStatus.NO_SOLUTION,
            bound=res.bound, solver=res.report, explanation=unrouted,
        )  # fmt: skip
    return _heuristic_solution(start, res.bound, time_limit_s, mip_rel_gap, bound_time_limit_s)


def plan_heuristic(
    problem: PlacementProblem,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    bound_time_limit_s: float | None = None,
) -> PlacementSolution:
    """Greedy + local search + LNS, with the best proven lower bound beside it."""
    return _heuristic_solution(_start(problem), None, time_limit_s, mip_rel_gap,
                               bound_time_limit_s)  # fmt: skip


def plan_milp(
    problem: PlacementProblem,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    bound_time_limit_s: float | None = None,
) -> PlacementSolution:
    """The exact MILP (HiGHS) warm-started from the heuristic, whatever the model's size."""
    return _milp_solution(_start(problem), time_limit_s, mip_rel_gap, bound_time_limit_s)


def plan_auto(
    problem: PlacementProblem,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    bound_time_limit_s: float | None = None,
) -> PlacementSolution:
    """The MILP when the model is small enough to gain from it
    (``AUTO_MILP_CANDIDATES``), else the heuristic with its bound."""
    start = _start(problem)
    if start.inst.c_demand.size <= AUTO_MILP_CANDIDATES:
        return _milp_solution(start, time_limit_s, mip_rel_gap, bound_time_limit_s)
    return _heuristic_solution(start, None, time_limit_s, mip_rel_gap, bound_time_limit_s)
