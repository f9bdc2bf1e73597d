"""Index a :class:`PlacementProblem` into arrays shared by the MILP and the heuristic.

Indices: demands ``d = (i, m)`` (one per source and requested model), global variants
``g = (m, v)``, nodes ``e``. Candidates ``c = (d, g, e)`` are the routes that can ever be
feasible: ``g`` is a variant of ``d``'s model, not dominated, fits node ``e`` at least once,
``CL^ie + L_g^e <= Lmax_d`` (the least latency ``(m, v)`` can have on ``e``, alone) and
``r_d <= Load_g^e * nmax_ge`` (a demand is never split). Pairs ``p = (g, e)`` are the
instance slots that appear in some candidate.

Dominance: ``v'`` dominates ``v`` of the same model when it is no slower, no larger, no
less loaded, and no more interfering (``alpha L``), one of them strictly (ties: lower
index wins). Replacing ``v`` by ``v'`` everywhere keeps a solution feasible and never raises
the objective, so dominated variants are left out of the search, never out of the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np
import numpy.typing as npt

from deepedge.planning.placement.model import PlacementProblem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _graph(problem: PlacementProblem) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from([s.id for s in problem.sources] + [e.id for e in problem.edge_nodes])
    graph.add_nodes_from(problem.relays)
    for link in problem.links:
        if graph.has_edge(link.a, link.b):
            graph[link.a][link.b]["w"] = min(graph[link.a][link.b]["w"], link.delay_ms)
        else:
            graph.add_edge(link.a, link.b, w=link.delay_ms)
    return graph


def round_trips_of_source(problem: PlacementProblem, source: int) -> FloatArray:
    """``CL^ie`` of one source to every node, without any cutoff (for explanations)."""
    dist = nx.single_source_dijkstra_path_length(
        _graph(problem), problem.sources[source].id, weight="w"
    )
    return np.array([2.0 * float(dist.get(e.id, np.inf)) for e in problem.edge_nodes])


def round_trip_ms(problem: PlacementProblem) -> FloatArray:
    """``CL^ie`` (eq. 2): twice the shortest-path delay from each source to each node.

    Paths longer than half the largest latency limit can serve nobody; they are not
    explored and their round trip is reported as infinite.
    """
    cutoff = max(d.max_latency_ms for s in problem.sources for d in s.demands) / 2.0
    graph = _graph(problem)
    out = np.full((len(problem.sources), len(problem.edge_nodes)), np.inf)
    source_index = {s.id: k for k, s in enumerate(problem.sources)}
    for j, node in enumerate(problem.edge_nodes):
        dist = nx.single_source_dijkstra_path_length(graph, node.id, cutoff=cutoff, weight="w")
        for name, d in dist.items():
            k = source_index.get(name)
            if k is not None:
                out[k, j] = 2.0 * float(d)
    return out


@dataclass(frozen=True)
class PlacementInstance:
    """Arrays of one problem; all latencies in ms, rates in requests/s, memory in MB."""

    problem: PlacementProblem
    k_max: int  # K
    alpha: float  # weight of the average latency
    total_rate: float  # sum_i sum_m r_m^i
    cost_lines: FloatArray  # (k, 2): intercept, slope of each tangent y_k
    comm_ms: FloatArray  # (I, E): CL^ie
    node_mem: FloatArray  # (E,): C^e
    # demands
    d_source: IntArray
    d_model: IntArray
    d_rate: FloatArray
    d_lmax: FloatArray
    # global variants
    g_model: IntArray
    g_variant: IntArray  # index of the variant within its model
    g_alpha: FloatArray
    g_mem: FloatArray
    lat: FloatArray  # (G, E): L_g^e
    load: FloatArray  # (G, E): Load_g^e
    nmax: IntArray  # (G, E): min(K, floor(C^e / R_g))
    # candidates and pairs
    c_demand: IntArray
    c_pair: IntArray
    c_node: IntArray
    c_variant: IntArray
    c_base: FloatArray  # CL^ie + (1 - alpha_g) L_g^e: latency before interference
    c_slack: FloatArray  # Lmax_d - c_base: room left for S_e
    p_variant: IntArray
    p_node: IntArray

    @property
    def n_demands(self) -> int:
        return int(self.d_rate.size)

    @property
    def n_nodes(self) -> int:
        return int(self.node_mem.size)

    def node_cost(self, utilisation: float) -> float:
        """``z_e``: the piecewise-linear utilisation cost."""
        return max(0.0, float(np.max(self.cost_lines[:, 0] + self.cost_lines[:, 1] * utilisation)))

    def candidates_of(self, d: int) -> IntArray:
        """Candidate indices of demand ``d`` (candidates are sorted by demand)."""
        lo, hi = np.searchsorted(self.c_demand, [d, d + 1])
        return np.arange(lo, hi, dtype=np.int64)


def _dominated(lat: list[float], mem: list[float], load: list[float], a: list[float]) -> list[bool]:
    out = []
    for v in range(len(lat)):
        dom = False
        for w in range(len(lat)):
            if w == v:
                continue
            le = (
                lat[w] <= lat[v]
                and mem[w] <= mem[v]
                and load[w] >= load[v]
                and a[w] * lat[w] <= a[v] * lat[v]
            )
            strict = (lat[w], mem[w], -load[w], a[w] * lat[w]) != (
                lat[v],
                mem[v],
                -load[v],
                a[v] * lat[v],
            )
            if le and (strict or w < v):
                dom = True
                break
        out.append(dom)
    return out


def index_problem(problem: PlacementProblem) -> PlacementInstance:
    """Build the arrays; pure and deterministic."""
    model_index = {m.id: k for k, m in enumerate(problem.models)}
    d_source, d_model, d_rate, d_lmax = [], [], [], []
    for i, s in enumerate(problem.sources):
        for dem in s.demands:
            d_source.append(i)
            d_model.append(model_index[dem.model])
            d_rate.append(dem.rate_rps)
            d_lmax.append(dem.max_latency_ms)
    g_model, g_variant, g_alpha, g_lat, g_mem, g_load, g_dom = [], [], [], [], [], [], []
    for mi, m in enumerate(problem.models):
        lat = [v.latency_ms for v in m.variants]
        mem = [v.memory_mb for v in m.variants]
        load = [v.max_load_rps for v in m.variants]
        a = [v.interference_coeff for v in m.variants]
        g_dom.extend(_dominated(lat, mem, load, a))
        for vi, _ in enumerate(m.variants):
            g_model.append(mi)
            g_variant.append(vi)
            g_alpha.append(a[vi])
            g_lat.append(lat[vi])
            g_mem.append(mem[vi])
            g_load.append(load[vi])
    speed = np.array([e.speed_factor for e in problem.edge_nodes])
    node_mem = np.array([e.memory_mb for e in problem.edge_nodes])
    lat_ge = np.outer(np.array(g_lat), speed)
    load_ge = np.outer(np.array(g_load), 1.0 / speed)
    gm = np.array(g_mem)
    nmax = np.minimum(problem.max_colocated, np.floor(node_mem[None, :] / gm[:, None] + 1e-9))
    nmax = nmax.astype(np.int64)
    comm = round_trip_ms(problem)
    g_model_a = np.array(g_model, dtype=np.int64)
    g_alpha_a = np.array(g_alpha)
    dom = np.array(g_dom, dtype=bool)
    c_d: list[IntArray] = []
    c_g: list[IntArray] = []
    c_e: list[IntArray] = []
    for d in range(len(d_rate)):
        gs = np.flatnonzero((g_model_a == d_model[d]) & ~dom)
        total = comm[d_source[d]][None, :] + lat_ge[gs, :]
        ok = (total <= d_lmax[d] + 1e-9) & (nmax[gs, :] >= 1)
        ok &= d_rate[d] <= load_ge[gs, :] * nmax[gs, :] + 1e-9
        gi, ei = np.nonzero(ok)
        c_d.append(np.full(gi.size, d, dtype=np.int64))
        c_g.append(gs[gi].astype(np.int64))
        c_e.append(ei.astype(np.int64))
    cd = np.concatenate(c_d) if c_d else np.zeros(0, dtype=np.int64)
    cg = np.concatenate(c_g) if c_g else np.zeros(0, dtype=np.int64)
    ce = np.concatenate(c_e) if c_e else np.zeros(0, dtype=np.int64)
    n_nodes = len(problem.edge_nodes)
    pair_key = cg * n_nodes + ce
    uniq, c_pair = np.unique(pair_key, return_inverse=True)
    d_source_a = np.array(d_source, dtype=np.int64)
    d_lmax_a = np.array(d_lmax)
    # Kept apart from the slack: ``Lmax - slack`` loses the base entirely once Lmax >= 1e18.
    base = comm[d_source_a[cd], ce] + (1.0 - g_alpha_a[cg]) * lat_ge[cg, ce]
    slack = d_lmax_a[cd] - base
    return PlacementInstance(
        problem=problem,
        k_max=problem.max_colocated,
        alpha=problem.latency_weight,
        total_rate=float(sum(d_rate)),
        cost_lines=np.array(problem.cost.lines(), dtype=np.float64).reshape(-1, 2),
        comm_ms=comm,
        node_mem=node_mem,
        d_source=d_source_a,
        d_model=np.array(d_model, dtype=np.int64),
        d_rate=np.array(d_rate),
        d_lmax=d_lmax_a,
        g_model=g_model_a,
        g_variant=np.array(g_variant, dtype=np.int64),
        g_alpha=g_alpha_a,
        g_mem=gm,
        lat=lat_ge,
        load=load_ge,
        nmax=nmax,
        c_demand=cd,
        c_pair=c_pair.astype(np.int64).reshape(-1),
        c_node=ce,
        c_variant=cg,
        c_base=base,
        c_slack=slack,
        p_variant=(uniq // n_nodes).astype(np.int64),
        p_node=(uniq % n_nodes).astype(np.int64),
    )


def instances_needed(load_rps: float, max_load_rps: float, demands: int) -> int:
    """Fewest instances serving ``load_rps``: ``max(1, ceil(load / Load))`` when used."""
    if demands <= 0:
        return 0
    return max(1, math.ceil(load_rps / max_load_rps - 1e-9))
