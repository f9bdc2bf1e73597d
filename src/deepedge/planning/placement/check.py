"""Independent checker: recompute every MVSP constraint and the objective from documents.

It reads only the :class:`PlacementProblem` and the :class:`PlacementSolution` (no solver
arrays, its own shortest paths with scipy), and checks:

* (13) every demand ``(i, m)`` has exactly one route, and no route serves anything else;
* (10) a route's ``(m, v, e)`` has at least one instance; instance counts are integers >= 1;
* (11) at most ``K`` instances on a node (the per-node reading of the co-location limit,
  which with ``K = 1`` forbids any co-location; it implies the per-variant form);
* (12)/(8) memory ``sum R_mv n_mv^e <= C^e``;
* (9) load ``sum_i r_m^i x_mv^ie <= Load_mv^e n_mv^e``;
* (4) latency ``CL^ie + IL_mv^e <= Lmax_m^i`` with ``IL`` from eq. (3);
* the objective ``alpha L + (1 - alpha) C`` (eqs. 1, 5-7) and the reported averages.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from deepedge.planning.placement.model import PlacementProblem, PlacementSolution

_TOL = 1e-6


@dataclass(frozen=True)
class CheckReport:
    """Violations (empty when valid) and the recomputed figures."""

    violations: list[str] = field(default_factory=list)
    objective: float | None = None
    avg_latency_ms: float | None = None
    avg_cost: float | None = None

    @property
    def ok(self) -> bool:
        return not self.violations


def _round_trips(problem: PlacementProblem) -> dict[tuple[str, str], float]:
    names = [s.id for s in problem.sources] + [e.id for e in problem.edge_nodes] + problem.relays
    idx = {n: k for k, n in enumerate(names)}
    best: dict[tuple[int, int], float] = {}
    for link in problem.links:
        a, b = sorted((idx[link.a], idx[link.b]))
        if a != b:
            best[(a, b)] = min(best.get((a, b), np.inf), link.delay_ms)
    rows = [a for a, _ in best] + [b for _, b in best]
    cols = [b for _, b in best] + [a for a, _ in best]
    # a zero delay must stay an edge: shift every weight by a tiny epsilon, remove later
    vals = [w + 1e-9 for w in best.values()] * 2
    graph = coo_matrix((vals, (rows, cols)), shape=(len(names), len(names))).tocsr()
    starts = [idx[e.id] for e in problem.edge_nodes]
    dist = dijkstra(graph, directed=False, indices=starts)
    out = {}
    for j, e in enumerate(problem.edge_nodes):
        for s in problem.sources:
            out[(s.id, e.id)] = 2.0 * float(dist[j, idx[s.id]])
    return out


def check_solution(problem: PlacementProblem, sol: PlacementSolution) -> CheckReport:
    """Recompute constraints and objective; every broken constraint yields one line."""
    bad: list[str] = []
    models = {m.id: {v.id: v for v in m.variants} for m in problem.models}
    nodes = {e.id: e for e in problem.edge_nodes}
    demands = {(s.id, d.model): d for s in problem.sources for d in s.demands}
    n: dict[tuple[str, str, str], int] = {}
    for pl in sol.placements:
        slot = (pl.node, pl.model, pl.variant)
        if pl.node not in nodes or pl.variant not in models.get(pl.model, {}):
            bad.append(f"placement {slot}: unknown node, model or variant")
            continue
        if slot in n:
            bad.append(f"placement {slot}: listed twice")
        n[slot] = n.get(slot, 0) + pl.instances
    per_node: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for (e, m, v), k in n.items():
        per_node[e].append((m, v, k))
    interference = {}
    for e, node in nodes.items():
        items = per_node.get(e, [])
        count = sum(k for _, _, k in items)
        if count > problem.max_colocated:
            bad.append(f"(11) node {e}: {count} instances > K={problem.max_colocated}")
        mem = sum(models[m][v].memory_mb * k for m, v, k in items)
        if mem > node.memory_mb * (1 + _TOL):
            bad.append(f"(12) node {e}: memory {mem:.1f} MB > capacity {node.memory_mb:.1f} MB")
        interference[e] = sum(
            models[m][v].interference_coeff * models[m][v].latency_ms * node.speed_factor * k
            for m, v, k in items
        )
    seen: set[tuple[str, str]] = set()
    load: dict[tuple[str, str, str], float] = defaultdict(float)
    trips = _round_trips(problem)
    weighted_latency = 0.0
    for r in sol.routes:
        key = (r.source, r.model)
        if key not in demands:
            bad.append(f"(13) route {key}: no such demand")
            continue
        if key in seen:
            bad.append(f"(13) demand {key}: routed twice")
            continue
        seen.add(key)
        if r.node not in nodes or r.variant not in models[r.model]:
            bad.append(f"route {key}: unknown node or variant")
            continue
        inst_key = (r.node, r.model, r.variant)
        k = n.get(inst_key, 0)
        if k < 1:
            bad.append(f"(10) demand {key}: routed to {inst_key} which has no instance")
            continue
        dem, var, node = demands[key], models[r.model][r.variant], nodes[r.node]
        lat = var.latency_ms * node.speed_factor
        il = (
            lat
            + var.interference_coeff * lat * (k - 1)
            + (interference[r.node] - var.interference_coeff * lat * k)
        )
        total = trips[(r.source, r.node)] + il
        if total > dem.max_latency_ms * (1 + _TOL) + _TOL:
            bad.append(
                f"(4) demand {key}: latency {total:.2f} ms > limit {dem.max_latency_ms:.2f} ms"
            )
        if abs(total - r.latency_ms) > 1e-4 * max(1.0, total):
            bad.append(f"demand {key}: reported latency {r.latency_ms:.4f} != {total:.4f} ms")
        load[inst_key] += dem.rate_rps
        weighted_latency += dem.rate_rps * total
    for key in demands:
        if key not in seen:
            bad.append(f"(13) demand {key}: not routed")
    for (e, m, v), rate in load.items():
        cap = models[m][v].max_load_rps / nodes[e].speed_factor * n[(e, m, v)]
        if rate > cap * (1 + _TOL) + _TOL:
            bad.append(f"(9) {(e, m, v)}: load {rate:.2f} rps > {cap:.2f} rps")
    total_rate = sum(d.rate_rps for d in demands.values())
    avg_latency = weighted_latency / total_rate
    costs = []
    for e, node in nodes.items():
        mem = sum(models[m][v].memory_mb * k for m, v, k in per_node.get(e, []))
        costs.append(problem.cost.cost(mem / node.memory_mb))
    avg_cost = sum(costs) / len(costs)
    alpha = problem.latency_weight
    objective = alpha * avg_latency + (1 - alpha) * avg_cost
    if sol.objective is not None and abs(sol.objective - objective) > 1e-6 * max(1, objective):
        bad.append(f"objective: reported {sol.objective:.8g} != recomputed {objective:.8g}")
    return CheckReport(bad, objective, avg_latency, avg_cost)
