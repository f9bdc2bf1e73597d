"""Greedy placement and routing with local search, for instances the MILP cannot finish.

1. Greedy: demands in order of fewest candidates, then largest rate; each takes the
   feasible candidate of least objective increase: joining an instance, adding a replica
   when the load overflows, or opening a new variant or node. A demand that finds no room
   is repaired by a swap that makes room for it (below).
2. Local search, repeated until a pass improves nothing or ``max_passes``:
   * shift: move one demand to its best candidate (variant upgrade for one demand, a move
     to another node, a new replica);
   * group move: move every demand of an instance pair to another variant on the same node
     (variant upgrading/downgrading) or to another node (moving the instances);
   * exchange: two pairs on different nodes trade places, each with its demands (only
     while few pairs are open);
   * swap: on one node close an instance pair (its demands go to their best alternatives)
     and open another pair, attracting every demand that gains from it. Only the
     ``swap_candidates`` most promising new pairs per node are tried (estimated gain:
     latency saved by the demands that could use it).

Every accepted move is priced exactly and keeps every constraint satisfied, so the result is
feasible by construction (and is re-checked independently by the callers). Deterministic,
no clock: effort is bounded by ``max_passes``, ``swap_candidates`` and ``max_evaluations``
(and by a ``stop`` predicate the caller may inject, for example a deadline).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from deepedge.planning.placement import lns
from deepedge.planning.placement.instance import PlacementInstance
from deepedge.planning.placement.search import EPS, PlacementSearch
from deepedge.planning.placement.solution import Assignment


@dataclass(frozen=True)
class HeuristicResult:
    assignment: Assignment | None  # None when some demand could not be routed
    unrouted: list[int]
    passes: int
    stopped: bool = False  # the injected stop predicate ended the local search


EXCHANGE_PAIRS = 60  # most open pairs for which pairwise instance exchanges are tried


class _LocalSearch:
    def __init__(self, inst: PlacementInstance, swap_candidates: int, nearest: int,
                 stop: Callable[[], bool]) -> None:  # fmt: skip
        self.stop = stop
        self.st = PlacementSearch(inst)
        self.inst = inst
        self.swap_candidates = swap_candidates
        self.near = [c[:nearest] for c in self.st.cands]
        self.c_a = np.asarray(self.st.c_a)
        by_node = np.argsort(inst.c_node, kind="stable")
        bounds = np.searchsorted(inst.c_node[by_node], np.arange(inst.n_nodes + 1))
        # candidates on each node and their pairs (for ranking pairs to open)
        self.node_cands = [
            (by_node[lo:hi], inst.c_pair[by_node[lo:hi]]) for lo, hi in itertools.pairwise(bounds)
        ]

    def best_shift(self, d: int, improve_only: bool, exclude_pair: int = -1,
                   journal: list[tuple[int, int, int]] | None = None,
                   every: bool = False, keep_free: int = -1) -> float | None:  # fmt: skip
        """Best move of ``d``; ``keep_free``: a node on which ``d`` may only join pairs
        already open (the slot being freed there stays free)."""
        st = self.st
        free_open = st.nodes[keep_free].n if keep_free >= 0 else {}
        old = st.choice[d]
        best, best_c = (-EPS if improve_only else float("inf")), -1
        leave = st.leave_delta(d)
        w_lat, c_a = st.w_lat, st.c_a
        for c in st.cands[d] if every else self.near[d]:
            if c == old or st.c_pair[c] == exclude_pair:
                continue
            if st.c_node[c] == keep_free and st.c_pair[c] not in free_open:
                continue
            if leave + w_lat * c_a[c] >= best:
                # candidates are sorted by c_a and joining costs at least w_lat c_a: no
                # later candidate can do better
                break
            delta = st.shift_delta(d, c, leave)
            if delta is not None and delta < best:
                best, best_c = delta, c
        if best_c < 0:
            return None
        return st.shift(d, best_c, journal if journal is not None else [])

    def members(self, p: int) -> list[int]:
        st = self.st
        e = int(self.inst.p_node[p])
        return [d for d, c in st.nodes[e].demands.items() if st.c_pair[c] == p]

    def swap(self, q: int | None, p_new: int, must: int | None = None) -> bool:
        """Close pair ``q`` (None: close nothing), open ``p_new``; keep if it pays off
        (or, when ``must`` is given, if ``must`` gets routed at all)."""
        st = self.st
        journal: list[tuple[int, int, int]] = []
        total = 0.0
        if q is not None:
            # on a node at its K limit, q's demands leave without taking the slot that
            # p_new is to fill
            e_q = int(self.inst.p_node[q])
            if sum(st.nodes[e_q].n.values()) < self.inst.k_max:
                e_q = -1
            for d in self.members(q):
                delta = self.best_shift(d, False, exclude_pair=q, journal=journal,
                                        keep_free=e_q)  # fmt: skip
                if delta is None:
                    delta = self.best_shift(d, False, exclude_pair=q, journal=journal, every=True,
                                            keep_free=e_q)  # fmt: skip
                if delta is None:
                    st.undo(journal)
                    return False
                total += delta
        if must is not None:
            c = next((c for c in st.cands[must] if st.c_pair[c] == p_new), -1)
            delta = st.shift(must, c, journal) if c >= 0 else None
            if delta is None:
                st.undo(journal)
                return False
            total += delta
        e = int(self.inst.p_node[p_new])
        order = []
        for c in st.pair_cands[p_new]:
            d = st.c_demand[c]
            if st.choice[d] in (c, -1) or d == must:
                continue
            delta = st.shift_delta(d, c)
            if delta is not None:
                order.append((delta, c))
        for _, c in sorted(order):
            d = st.c_demand[c]
            opened = p_new in st.nodes[e].n
            delta = st.shift_delta(d, c)
            if delta is not None and (delta < -EPS or not opened):
                st.shift(d, c, journal)
                total += delta
        if must is None and total >= -EPS:
            st.undo(journal)
            return False
        return True

    def greedy(self) -> list[int]:
        st = self.st
        order = sorted(range(self.inst.n_demands), key=lambda d: (len(st.cands[d]), -st.d_rate[d]))
        failed = []
        for d in order:
            if self.best_shift(d, improve_only=False) is not None:
                continue
            if self.best_shift(d, improve_only=False, every=True) is None and not self.repair(d):
                failed.append(d)
        return failed

    def repair(self, d: int) -> bool:
        st = self.st
        for c in sorted(st.cands[d], key=lambda c: st.c_a[c]):
            e = st.c_node[c]
            for q in [None, *st.nodes[e].n]:
                if q != st.c_pair[c] and self.swap(q, st.c_pair[c], must=d):
                    return True
        return False

    def group_moves(self) -> bool:
        st = self.st
        improved = False
        for e in range(self.inst.n_nodes):
            if self.stop():
                break
            for p in list(st.nodes[e].n):
                members = [(d, st.choice[d]) for d in self.members(p)]
                if not members:
                    continue
                options: dict[int, list[int]] | None = None
                for d, _ in members:
                    here = {st.c_pair[c]: c for c in st.cands[d]}
                    if options is None:
                        options = {q: [c] for q, c in here.items() if q != p}
                    else:
                        options = {q: [*cs, here[q]] for q, cs in options.items() if q in here}
                best, best_t = -EPS, None
                for targets in (options or {}).values():
                    delta = st.move(members, targets, apply=False)
                    if delta is not None and delta < best:
                        best, best_t = delta, targets
                if best_t is not None:
                    st.move(members, best_t, apply=True)
                    improved = True
        return improved

    def exchanges(self) -> bool:
        """Swap the instances of two pairs on different nodes (each pair's demands follow
        it): a move that ``group_moves`` cannot make when both nodes are full (K, memory).
        Tried only while at most ``EXCHANGE_PAIRS`` pairs are open (quadratic in them)."""
        st = self.st
        open_pairs = [p for node in st.nodes for p in node.n]
        if len(open_pairs) > EXCHANGE_PAIRS:
            return False
        improved = False
        for p1, p2 in itertools.combinations(open_pairs, 2):
            if self.stop():
                break
            e1, e2 = int(self.inst.p_node[p1]), int(self.inst.p_node[p2])
            if e1 == e2 or p1 not in st.nodes[e1].n or p2 not in st.nodes[e2].n:
                continue
            routes, targets = [], []
            for p, e in ((p1, e2), (p2, e1)):
                g = int(self.inst.p_variant[p])
                for d in self.members(p):
                    c = next((c for c in st.cands[d] if st.c_node[c] == e
                              and int(self.inst.c_variant[c]) == g), -1)  # fmt: skip
                    if c < 0:
                        break
                    routes.append((d, st.choice[d]))
                    targets.append(c)
                else:
                    continue
                break
            else:
                delta = st.move(routes, targets, apply=False)
                if delta is not None and delta < -EPS:
                    st.move(routes, targets, apply=True)
                    improved = True
        return improved

    def promising(self, e: int) -> list[int]:
        """Closed pairs on ``e`` ranked by the latency their candidates would save."""
        st, inst = self.st, self.inst
        node = st.nodes[e]
        cands, pairs = self.node_cands[e]
        choice = np.asarray(st.choice, dtype=np.int64)
        node_s = np.array([n.s for n in st.nodes])
        # each demand's present r (CL + IL): what a new pair may save it
        now = self.c_a[choice] + inst.d_rate * node_s[inst.c_node[choice]]
        d = inst.c_demand[cands]
        gain = np.maximum(0.0, now[d] - self.c_a[cands] - inst.d_rate[d] * node.s)
        total = np.bincount(pairs, weights=gain, minlength=inst.p_node.size)
        uniq = np.unique(pairs)
        uniq = uniq[(total[uniq] > 0) & ~np.isin(uniq, list(node.n))]
        order = np.lexsort((uniq, -total[uniq]))[: self.swap_candidates]
        return [int(p) for p in uniq[order]]

    def swaps(self) -> bool:
        improved = False
        for e in range(self.inst.n_nodes):
            if self.stop():
                break
            for p_new in self.promising(e):
                node = self.st.nodes[e]
                for q in [None, *sorted(node.n, key=lambda p: node.load.get(p, 0.0))]:
                    if p_new not in node.n and self.swap(q, p_new):
                        improved = True
                        break
        return improved

    def run(self, max_passes: int, max_evaluations: int) -> int:
        for k in range(max_passes):
            improved = False
            for d in range(self.inst.n_demands):
                improved |= self.best_shift(d, improve_only=True) is not None
            if self.st.evaluations < max_evaluations and not self.stop():
                improved |= self.group_moves()
            if self.st.evaluations < max_evaluations and not self.stop():
                improved |= self.swaps()
            if self.st.evaluations < max_evaluations and not self.stop():
                improved |= self.exchanges()
            if not improved or self.st.evaluations >= max_evaluations or self.stop():
                return k + 1
        return max_passes


def solve_heuristic(
    inst: PlacementInstance,
    max_passes: int = 8,
    swap_candidates: int = 6,
    nearest: int = 24,
    max_evaluations: int = 600_000,
    stop: Callable[[], bool] | None = None,
    lns_subproblems: int = 400,
) -> HeuristicResult:
    """Greedy + local search + large-neighbourhood search; a routed result satisfies every
    constraint.

    ``nearest``: shifts look at a demand's cheapest candidates only (all of them when
    evacuating or when none of those fits); ``max_evaluations`` bounds the priced moves
    after which no new pass starts (a deterministic effort limit). ``lns_subproblems``:
    the most exact sub-MILPs of the large-neighbourhood search (``lns``; 0: none),
    which first routes what the greedy left unrouted, then re-optimises small node sets
    exactly; the local search runs again after it. ``stop``: an injected predicate (for
    example a wall-clock deadline kept by the caller) polled between nodes and phases of
    the local search and between sub-MILPs; once it is true the search ends with the
    current solution, which is feasible after every completed move. The greedy always
    completes.
    """
    stop = stop or (lambda: False)
    ls = _LocalSearch(inst, swap_candidates, nearest, stop)
    failed = ls.greedy()
    passes = 0
    if not failed:
        passes = ls.run(max_passes, max_evaluations)
    if lns_subproblems > 0 and not stop():
        before = np.asarray(ls.st.choice, dtype=np.int64)
        res = lns.improve(inst, before, max_subproblems=lns_subproblems, stop=stop)
        if res.improved:
            ls = _LocalSearch(inst, swap_candidates, nearest, stop)
            ls.st.load(res.choice)
            if (res.choice >= 0).all() and not stop():
                passes += ls.run(max_passes, max_evaluations)
    unrouted = [d for d, c in enumerate(ls.st.choice) if c < 0]
    if unrouted:
        return HeuristicResult(None, sorted(unrouted), passes)
    return HeuristicResult(ls.st.assignment(), [], passes, stopped=stop())
