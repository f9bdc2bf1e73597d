"""Turn an assignment (one candidate per demand, instances per pair) into figures and a
:class:`PlacementSolution`.

For node ``e`` let ``S_e = sum_g alpha_g L_g^e n_g^e`` (the interference every instance on
``e`` adds). Eq. (3) then reads ``IL_g^e = (1 - alpha_g) L_g^e + S_e``, so the objective
``alpha L + (1 - alpha) C`` splits over nodes:

    f_e = alpha / R * (A_e + S_e Lambda_e) + (1 - alpha) / N_E * z_e(u_e)

with ``A_e = sum_{d -> e} r_d (CL_d^e + (1 - alpha_g) L_g^e)``, ``Lambda_e`` the rate routed
to ``e``, ``R`` the total rate and ``u_e = sum_g R_g n_g^e / C^e``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepedge.planning.placement.instance import IntArray, PlacementInstance, instances_needed
from deepedge.planning.placement.model import (
    InstancePlacement,
    Method,
    NodeUsage,
    PlacementSolution,
    Route,
    SolverReport,
    SolveStatus,
    relative_gap,
)


@dataclass(frozen=True)
class Assignment:
    """``choice[d]``: candidate of demand ``d``; ``instances[p]``: ``n`` of pair ``p``."""

    choice: IntArray
    instances: IntArray


@dataclass(frozen=True)
class Figures:
    objective: float
    avg_latency_ms: float
    avg_cost: float
    interference_ms: np.ndarray  # S_e per node


def minimal_instances(inst: PlacementInstance, choice: IntArray) -> IntArray:
    """The fewest instances per pair that carry the routed load (constraint 9 and 10)."""
    pairs = inst.c_pair[choice]
    load = np.bincount(pairs, weights=inst.d_rate, minlength=inst.p_node.size)
    count = np.bincount(pairs, minlength=inst.p_node.size)
    cap = inst.load[inst.p_variant, inst.p_node]
    out = [instances_needed(float(load[p]), float(cap[p]), int(count[p])) for p in range(cap.size)]
    return np.array(out, dtype=np.int64)


def evaluate(inst: PlacementInstance, a: Assignment) -> Figures:
    """Objective ``alpha L + (1 - alpha) C`` of an assignment (feasibility not checked)."""
    pv, pn, n = inst.p_variant, inst.p_node, a.instances
    s = np.bincount(pn, weights=inst.g_alpha[pv] * inst.lat[pv, pn] * n, minlength=inst.n_nodes)
    mem = np.bincount(pn, weights=inst.g_mem[pv] * n, minlength=inst.n_nodes)
    c = a.choice
    g, e, d = inst.c_variant[c], inst.c_node[c], inst.c_demand[c]
    per_request = inst.comm_ms[inst.d_source[d], e] + (1 - inst.g_alpha[g]) * inst.lat[g, e] + s[e]
    avg_latency = float(np.sum(inst.d_rate[d] * per_request) / inst.total_rate)
    avg_cost = float(np.mean([inst.node_cost(float(u)) for u in mem / inst.node_mem]))
    obj = inst.alpha * avg_latency + (1 - inst.alpha) * avg_cost
    return Figures(obj, avg_latency, avg_cost, s)


def build_solution(
    inst: PlacementInstance,
    a: Assignment,
    *,
    method: Method,
    status: SolveStatus,
    bound: float | None,
    solver: SolverReport | None = None,
) -> PlacementSolution:
    """The output document; ``bound`` is a proven lower bound (or None)."""
    prob = inst.problem
    fig = evaluate(inst, a)
    load = np.bincount(inst.c_pair[a.choice], weights=inst.d_rate, minlength=inst.p_node.size)
    placements = []
    for p in np.flatnonzero(a.instances > 0):
        g, e = int(inst.p_variant[p]), int(inst.p_node[p])
        m = prob.models[int(inst.g_model[g])]
        placements.append(
            InstancePlacement(
                node=prob.edge_nodes[e].id,
                model=m.id,
                variant=m.variants[int(inst.g_variant[g])].id,
                instances=int(a.instances[p]),
                load_rps=float(load[p]),
                max_load_rps=float(inst.load[g, e] * a.instances[p]),
            )
        )
    routes = []
    for d, c in enumerate(a.choice):
        g, e, i = int(inst.c_variant[c]), int(inst.c_node[c]), int(inst.d_source[d])
        m = prob.models[int(inst.g_model[g])]
        comm = float(inst.comm_ms[i, e])
        il = float((1 - inst.g_alpha[g]) * inst.lat[g, e] + fig.interference_ms[e])
        routes.append(
            Route(
                source=prob.sources[i].id,
                model=m.id,
                node=prob.edge_nodes[e].id,
                variant=m.variants[int(inst.g_variant[g])].id,
                rate_rps=float(inst.d_rate[d]),
                comm_latency_ms=comm,
                inference_latency_ms=il,
                latency_ms=comm + il,
                max_latency_ms=float(inst.d_lmax[d]),
            )
        )
    nodes = []
    for e, node in enumerate(prob.edge_nodes):
        sel = inst.p_node == e
        mem = float(np.sum(inst.g_mem[inst.p_variant[sel]] * a.instances[sel]))
        u = mem / node.memory_mb
        nodes.append(
            NodeUsage(
                node=node.id,
                instances=int(np.sum(a.instances[sel])),
                memory_used_mb=mem,
                utilisation=u,
                cost=inst.node_cost(u),
            )
        )
    gap = None if bound is None else relative_gap(fig.objective, bound)
    return PlacementSolution(
        problem=prob.name,
        method=method,
        status=status,
        objective=fig.objective,
        bound=bound,
        gap=gap,
        avg_latency_ms=fig.avg_latency_ms,
        avg_cost=fig.avg_cost,
        placements=placements,
        routes=routes,
        nodes=nodes,
        solver=solver,
    )
