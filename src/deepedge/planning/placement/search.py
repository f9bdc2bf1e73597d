"""Incremental search state of the MVSP heuristic: routes, instances, node prices.

Search space: one candidate route per demand. Instances follow from routes: a pair
``(g, e)`` holds ``n = max(1, ceil(load / Load_g^e))`` instances when used, else none;
in MVSP an extra replica only adds interference and memory cost, so the fewest instances
that carry the load are always best. A node is feasible when its instances fit ``K`` and
``C^e`` and its interference ``S_e`` leaves every routed demand within its limit
(``S_e <= min slack``, see ``instance``). The objective is a sum of node terms
(``solution``), so every move is priced on the one or two nodes it touches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deepedge.planning.placement.instance import PlacementInstance
from deepedge.planning.placement.solution import Assignment

EPS = 1e-9


@dataclass
class _Node:
    demands: dict[int, int]  # demand -> candidate
    count: dict[int, int]  # pair -> routed demands
    load: dict[int, float]  # pair -> routed rate
    n: dict[int, int]  # pair -> instances
    a_sum: float = 0.0  # sum r (CL + (1 - alpha) L)
    lam: float = 0.0  # routed rate
    s: float = 0.0  # interference S_e
    mem: float = 0.0
    slots: int = 0
    min_slack: float = math.inf  # least slack of the routed demands
    z: float = 0.0  # utilisation cost at ``mem``
    version: int = 0  # renewed by every change (keys memoised prices)


class PlacementSearch:
    """Mutable search state over one :class:`PlacementInstance` (owned by one heuristic run)."""

    def __init__(self, inst: PlacementInstance) -> None:
        self.inst = inst
        self.w_lat = inst.alpha / inst.total_rate
        self.w_cost = (1 - inst.alpha) / inst.n_nodes
        pg, pe = inst.p_variant, inst.p_node
        self.p_al = (inst.g_alpha[pg] * inst.lat[pg, pe]).tolist()
        self.p_mem = inst.g_mem[pg].tolist()
        self.p_cap = inst.load[pg, pe].tolist()
        self.c_pair = inst.c_pair.tolist()
        self.c_node = inst.c_node.tolist()
        self.c_slack = inst.c_slack.tolist()
        rate = inst.d_rate[inst.c_demand]
        self.c_a = (rate * inst.c_base).tolist()
        self.d_rate = inst.d_rate.tolist()
        # candidates of each demand, cheapest exclusive latency first
        self.cands = [
            sorted(inst.candidates_of(d).tolist(), key=self.c_a.__getitem__)
            for d in range(inst.n_demands)
        ]
        self.evaluations = 0  # priced moves so far: the deterministic effort measure
        self.pair_cands: list[list[int]] = [[] for _ in range(inst.p_node.size)]
        for c, p in enumerate(self.c_pair):
            self.pair_cands[p].append(c)
        self.c_demand = inst.c_demand.tolist()
        self.nodes = [_Node({}, {}, {}, {}) for _ in range(inst.n_nodes)]
        self.choice = [-1] * inst.n_demands
        self.value = [0.0] * inst.n_nodes
        self.cap_mem = inst.node_mem.tolist()
        self.lines = inst.cost_lines.tolist()
        self._z_memo: dict[float, float] = {}
        self._leave_memo: dict[int, tuple[int, float]] = {}  # d -> (node version, delta)
        self._tick = 0

    # -- node pricing -------------------------------------------------------------------
    def _z(self, e: int, mem: float) -> float:
        u = mem / self.cap_mem[e]
        z = self._z_memo.get(u)
        if z is None:  # few distinct utilisations occur: memoise the tangent maximum
            z = max(0.0, *(a + b * u for a, b in self.lines))
            self._z_memo[u] = z
        return z

    def _price(
        self, e: int, out: list[tuple[int, int]], inn: list[tuple[int, int]]
    ) -> tuple[float, dict[int, int]] | None:
        """Node value after removing ``out`` and adding ``inn`` (demand, candidate) routes;
        None if infeasible. Also returns the new instance counts of touched pairs."""
        node = self.nodes[e]
        dload: dict[int, float] = {}
        dcount: dict[int, int] = {}
        a_sum, lam = node.a_sum, node.lam
        rate, pair, c_a = self.d_rate, self.c_pair, self.c_a
        for d, c in out:
            p = pair[c]
            dload[p] = dload.get(p, 0.0) - rate[d]
            dcount[p] = dcount.get(p, 0) - 1
            a_sum -= c_a[c]
            lam -= rate[d]
        for d, c in inn:
            p = pair[c]
            dload[p] = dload.get(p, 0.0) + rate[d]
            dcount[p] = dcount.get(p, 0) + 1
            a_sum += c_a[c]
            lam += rate[d]
        s, mem, slots = node.s, node.mem, node.slots
        new_n: dict[int, int] = {}
        grows = False
        for p, dl in dload.items():
            cnt = node.count.get(p, 0) + dcount[p]
            k = (
                0
                if cnt <= 0
                else max(1, math.ceil((node.load.get(p, 0.0) + dl) / self.p_cap[p] - 1e-9))
            )
            dk = k - node.n.get(p, 0)
            new_n[p] = k
            if dk:
                grows |= dk > 0
                s += dk * self.p_al[p]
                mem += dk * self.p_mem[p]
                slots += dk
        if slots > self.inst.k_max or mem > self.cap_mem[e] * (1 + 1e-9):
            return None
        if inn or grows:
            slack = node.min_slack
            if any(self.c_slack[c] <= slack for _, c in out):
                removed = {d for d, _ in out}
                slack = min(
                    (self.c_slack[c] for d, c in node.demands.items() if d not in removed),
                    default=math.inf,
                )
            for _, c in inn:
                slack = min(slack, self.c_slack[c])
            if s > slack + 1e-9:
                return None
        z = node.z if mem == node.mem else self._z(e, mem)
        return self.w_lat * (a_sum + s * max(lam, 0.0)) + self.w_cost * z, new_n

    def _commit(self, e: int, out: list[tuple[int, int]], inn: list[tuple[int, int]],
                value: float, new_n: dict[int, int]) -> None:  # fmt: skip
        node = self.nodes[e]
        self._tick += 1  # globally unique, so a demand's memo never matches another node
        node.version = self._tick
        stale = False  # the least slack left with a removed demand: recompute it
        for d, c in out:
            p = self.c_pair[c]
            stale |= self.c_slack[c] <= node.min_slack
            del node.demands[d]
            node.count[p] -= 1
            node.load[p] -= self.d_rate[d]
            node.a_sum -= self.c_a[c]
            node.lam -= self.d_rate[d]
        for d, c in inn:
            p = self.c_pair[c]
            node.demands[d] = c
            node.count[p] = node.count.get(p, 0) + 1
            node.load[p] = node.load.get(p, 0.0) + self.d_rate[d]
            node.a_sum += self.c_a[c]
            node.lam += self.d_rate[d]
            if not stale:
                node.min_slack = min(node.min_slack, self.c_slack[c])
        for p, k in new_n.items():
            dk = k - node.n.get(p, 0)
            node.s += dk * self.p_al[p]
            node.mem += dk * self.p_mem[p]
            node.slots += dk
            if k:
                node.n[p] = k
            else:
                node.n.pop(p, None)
                node.count.pop(p, None)
                node.load.pop(p, None)
        if stale:
            node.min_slack = min((self.c_slack[c] for c in node.demands.values()), default=math.inf)
        node.z = self._z(e, node.mem)
        self.value[e] = value

    # -- single-demand moves (the hot path) ---------------------------------------------
    def leave_delta(self, d: int) -> float:
        """Objective change of taking demand ``d`` off its node (always feasible: removing
        load never adds an instance). 0 for an unrouted demand."""
        old = self.choice[d]
        if old < 0:
            return 0.0
        e, p, r = self.c_node[old], self.c_pair[old], self.d_rate[d]
        node = self.nodes[e]
        memo = self._leave_memo.get(d)
        if memo is not None and memo[0] == node.version:
            return memo[1]
        n_old = node.n[p]
        k = 0
        if node.count[p] > 1:
            k = max(1, math.ceil((node.load[p] - r) / self.p_cap[p] - 1e-9))
        s, mem = node.s + (k - n_old) * self.p_al[p], node.mem + (k - n_old) * self.p_mem[p]
        z = node.z if k == n_old else self._z(e, mem)
        value = self.w_lat * (node.a_sum - self.c_a[old] + s * max(node.lam - r, 0.0))
        delta = value + self.w_cost * z - self.value[e]
        self._leave_memo[d] = (node.version, delta)
        return delta

    def join_delta(self, d: int, c: int) -> float | None:
        """Objective change of adding demand ``d`` through candidate ``c`` to ``c``'s node,
        whose state must not contain ``d``; None if infeasible."""
        e, p, r = self.c_node[c], self.c_pair[c], self.d_rate[d]
        node = self.nodes[e]
        n_old = node.n.get(p, 0)
        k = max(1, math.ceil((node.load.get(p, 0.0) + r) / self.p_cap[p] - 1e-9))
        s, mem = node.s, node.mem
        if k != n_old:
            dk = k - n_old
            if node.slots + dk > self.inst.k_max:
                return None
            s += dk * self.p_al[p]
            mem += dk * self.p_mem[p]
            if mem > self.cap_mem[e] * (1 + 1e-9):
                return None
        if s > min(node.min_slack, self.c_slack[c]) + 1e-9:
            return None
        z = node.z if k == n_old else self._z(e, mem)
        value = self.w_lat * (node.a_sum + self.c_a[c] + s * (node.lam + r))
        return value + self.w_cost * z - self.value[e]

    def shift_delta(self, d: int, c: int, leave: float | None = None) -> float | None:
        """Objective change of re-routing ``d`` to ``c`` (None if infeasible). ``leave`` is
        :meth:`leave_delta` of ``d`` when the caller already has it."""
        old = self.choice[d]
        if old >= 0 and self.c_node[old] == self.c_node[c]:
            return self.move([(d, old)], [c], apply=False)
        self.evaluations += 1
        j = self.join_delta(d, c)
        if j is None:
            return None
        return j + (self.leave_delta(d) if leave is None else leave)

    # -- moves --------------------------------------------------------------------------
    def move(self, routes: list[tuple[int, int]], target: list[int], apply: bool) -> float | None:
        """Re-route demands ``routes[k] = (d, old candidate or -1)`` to ``target[k]`` (-1:
        unroute); returns the objective change (None if infeasible), applied if ``apply``."""
        self.evaluations += 1
        by_node: dict[int, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
        for (d, old), new in zip(routes, target, strict=True):
            if old >= 0:
                by_node.setdefault(self.c_node[old], ([], []))[0].append((d, old))
            if new >= 0:
                by_node.setdefault(self.c_node[new], ([], []))[1].append((d, new))
        delta = 0.0
        priced = []
        for e, (out, inn) in by_node.items():
            res = self._price(e, out, inn)
            if res is None:
                return None
            delta += res[0] - self.value[e]
            priced.append((e, out, inn, res))
        if apply:
            for e, out, inn, (value, new_n) in priced:
                self._commit(e, out, inn, value, new_n)
            for (d, _), new in zip(routes, target, strict=True):
                self.choice[d] = new
        return delta

    def shift(self, d: int, c: int, journal: list[tuple[int, int, int]]) -> float | None:
        """Move demand ``d`` to candidate ``c`` if feasible, recording it for undo."""
        old = self.choice[d]
        delta = self.move([(d, old)], [c], apply=True)
        if delta is not None:
            journal.append((d, old, c))
        return delta

    def undo(self, journal: list[tuple[int, int, int]]) -> None:
        for d, old, new in reversed(journal):
            self.move([(d, new)], [old], apply=True)
        journal.clear()

    def load(self, choice: np.ndarray) -> None:
        """Route every demand with ``choice[d] >= 0`` (from an empty state); the routes must
        be feasible together."""
        routes = [(d, -1) for d in range(self.inst.n_demands) if choice[d] >= 0]
        delta = self.move(routes, [int(choice[d]) for d, _ in routes], apply=True)
        if delta is None:
            raise ValueError("the routes to load are not feasible together")

    def objective(self) -> float:
        return float(sum(self.value))

    def assignment(self) -> Assignment:
        n = np.zeros(self.inst.p_node.size, dtype=np.int64)
        for node in self.nodes:
            for p, k in node.n.items():
                n[p] = k
        return Assignment(np.array(self.choice, dtype=np.int64), n)
