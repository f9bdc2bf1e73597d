"""Large-neighbourhood search for MVSP: destroy a few nodes, repair them exactly.

The objective is a sum of node terms (``solution``), so the demands routed to a
set of nodes ``N`` can be re-optimised without touching anything else:

* **destroy**: take a node set ``N`` (one node, or two or three nodes that share demands)
  and free every demand routed there (and any demand still unrouted that has a route into
  ``N``);
* **repair**: solve the sub-problem exactly: the MILP of ``milp`` restricted to
  the freed demands and their candidates on ``N`` (``sub_instance``), warm-started from the
  present routes. It chooses variants, instance counts, co-location and routes on ``N``
  together, which the single and group moves of the local search cannot (for example, two
  demands that must swap nodes while both nodes change variant);
* **accept** the repair when it lowers the objective (or routes a demand the greedy left
  unrouted).

Neighbourhoods are bounded (``max_free`` demands, ``max_nodes`` nodes, ``max_columns``
candidate routes), so a sub-MILP stays small however large the instance is; effort is
bounded by ``max_subproblems`` and an injected ``stop`` predicate. The sub-MILP is solved to
optimality with HiGHS's fixed seed, so the search is deterministic as
long as no sub-MILP reaches its (generous) time limit.

Feasibility repair: a demand the greedy could not place is given neighbourhoods grown from
the nodes of its own candidates (nearest first, then two or three of them together with the
demands already there); the first sub-MILP that routes it is kept.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from deepedge.core.errors import DependencyUnavailableError
from deepedge.planning.placement import milp
from deepedge.planning.placement.instance import IntArray, PlacementInstance
from deepedge.planning.placement.model import SolveStatus
from deepedge.planning.placement.solution import Assignment, evaluate, minimal_instances

log = logging.getLogger(__name__)

IMPROVE_REL = 1e-7  # a repair is accepted when it gains more than this share of the objective


@dataclass(frozen=True)
class LnsResult:
    choice: IntArray  # candidate per demand, -1 where still unrouted
    subproblems: int  # sub-MILPs solved
    improved: int  # repairs accepted


def sub_instance(
    inst: PlacementInstance, demands: IntArray, nodes: IntArray
) -> tuple[PlacementInstance, IntArray]:
    """The instance restricted to ``demands`` (sorted) and their candidates on ``nodes``.

    Returns it with the indices (in ``inst``) of the candidates kept. Totals that weigh the
    objective (``R``, ``N_E``) are those of the whole instance, so the sub-instance's
    objective is exactly the share of the whole objective that the nodes in ``nodes`` carry
    (an empty node costs nothing: ``z(0) = 0``).
    """
    cands = np.concatenate([inst.candidates_of(int(d)) for d in demands])
    keep = cands[np.isin(inst.c_node[cands], nodes)]
    remap = np.full(inst.n_demands, -1, dtype=np.int64)
    remap[demands] = np.arange(demands.size)
    pairs, c_pair = np.unique(inst.c_pair[keep], return_inverse=True)
    sub = replace(
        inst,
        d_source=inst.d_source[demands],
        d_model=inst.d_model[demands],
        d_rate=inst.d_rate[demands],
        d_lmax=inst.d_lmax[demands],
        c_demand=remap[inst.c_demand[keep]],
        c_pair=c_pair.astype(np.int64).reshape(-1),
        c_node=inst.c_node[keep],
        c_variant=inst.c_variant[keep],
        c_base=inst.c_base[keep],
        c_slack=inst.c_slack[keep],
        p_variant=inst.p_variant[pairs],
        p_node=inst.p_node[pairs],
    )
    return sub, keep


class _Lns:
    def __init__(self, inst: PlacementInstance, choice: IntArray, max_free: int,
                 max_columns: int, time_limit_s: float) -> None:  # fmt: skip
        self.inst = inst
        self.choice = choice.copy()
        self.max_free = max_free
        self.max_columns = max_columns
        self.time_limit_s = time_limit_s
        self.subproblems = 0
        self.improved = 0
        # node sets whose routes a repair left as they were: not solved again unchanged
        self.settled: set[tuple[tuple[int, ...], bytes]] = set()
        # nodes each demand could use, and how strongly two nodes share demands
        n_e = inst.n_nodes
        self.d_nodes = [
            np.unique(inst.c_node[inst.candidates_of(d)]) for d in range(inst.n_demands)
        ]
        share = np.zeros((n_e, n_e))
        for nodes in self.d_nodes:
            share[np.ix_(nodes, nodes)] += 1.0
        np.fill_diagonal(share, 0.0)
        self.share = share

    def routed_to(self, nodes: IntArray) -> IntArray:
        routed = self.choice >= 0
        on = np.zeros(self.inst.n_demands, dtype=bool)
        on[routed] = np.isin(self.inst.c_node[self.choice[routed]], nodes)
        return np.flatnonzero(on)

    def repair(self, nodes: IntArray, extra: IntArray, must_gain: bool) -> bool:
        """Re-optimise the demands on ``nodes`` (plus ``extra``, unrouted) exactly."""
        inst = self.inst
        demands = np.union1d(self.routed_to(nodes), extra).astype(np.int64)
        if demands.size == 0 or demands.size > self.max_free:
            return False
        key = (tuple(int(e) for e in nodes), self.choice[demands].tobytes() + extra.tobytes())
        if key in self.settled:
            return False
        sub, keep = sub_instance(inst, demands, nodes)
        if keep.size > self.max_columns:
            return False
        if np.bincount(sub.c_demand, minlength=demands.size).min() == 0:
            return False  # an extra demand has no route into these nodes
        warm = None
        current = np.inf
        if extra.size == 0:
            pos = np.searchsorted(keep, self.choice[demands])
            warm = Assignment(pos, minimal_instances(sub, pos))
            current = evaluate(sub, warm).objective
        self.subproblems += 1
        res = milp.solve(sub, time_limit_s=self.time_limit_s, mip_rel_gap=1e-6,
                                   warm_start=warm)  # fmt: skip
        if res.assignment is None or res.status == SolveStatus.INFEASIBLE:
            self.settled.add(key)
            return False
        new = evaluate(sub, res.assignment).objective
        if must_gain and not new < current - IMPROVE_REL * max(abs(current), 1e-12):
            self.settled.add(key)
            return False
        self.choice[demands] = keep[res.assignment.choice]
        self.improved += 1
        return True

    def neighbourhoods(self, max_nodes: int) -> list[IntArray]:
        """Node sets to destroy: every node, then each node with its strongest partners."""
        n_e = self.inst.n_nodes
        sets: list[IntArray] = [np.array([e]) for e in range(n_e)]
        for size in range(2, min(max_nodes, n_e) + 1):
            seen: set[tuple[int, ...]] = set()
            for e in range(n_e):
                ranked = np.argsort(-self.share[e], kind="stable")
                partners = [int(p) for p in ranked if p != e and self.share[e, p] > 0]
                for combo in itertools.combinations(partners[: size + 1], size - 1):
                    key = tuple(sorted((e, *combo)))
                    if key not in seen:
                        seen.add(key)
                        sets.append(np.array(key))
        return sets

    def route_unrouted(self, max_nodes: int, stop: Callable[[], bool]) -> None:
        inst = self.inst
        for d in np.flatnonzero(self.choice < 0):
            if stop():
                return
            cands = inst.candidates_of(int(d))
            order = np.argsort(inst.c_base[cands], kind="stable")
            nodes = list(dict.fromkeys(int(e) for e in inst.c_node[cands][order]))
            tried = False
            for size in range(1, max_nodes + 1):
                for combo in itertools.combinations(nodes[: size + 2], size):
                    if self.repair(np.array(sorted(combo)), np.array([d]), must_gain=False):
                        tried = True
                        break
                if tried or stop():
                    break


def improve(
    inst: PlacementInstance,
    choice: IntArray,
    *,
    max_nodes: int = 3,
    max_free: int = 16,
    max_columns: int = 3000,
    max_subproblems: int = 400,
    time_limit_s: float = 10.0,
    stop: Callable[[], bool] | None = None,
) -> LnsResult:
    """Route what is unrouted, then destroy and repair node sets until a full pass over the
    neighbourhoods gains nothing or ``max_subproblems`` sub-MILPs have been solved.

    ``choice``: a candidate per demand, -1 for a demand not yet routed; the routed part must
    be feasible. Every accepted repair keeps the routed part feasible, so the result is
    feasible wherever it is routed. Without HiGHS the input comes back unchanged.
    """
    stop = stop or (lambda: False)
    lns = _Lns(inst, choice, max_free, max_columns, time_limit_s)
    try:
        lns.route_unrouted(max_nodes, stop)
        if (lns.choice >= 0).all():
            sets = lns.neighbourhoods(max_nodes)
            gained = True
            while gained and lns.subproblems < max_subproblems and not stop():
                gained = False
                for nodes in sets:
                    if lns.subproblems >= max_subproblems or stop():
                        break
                    gained |= lns.repair(nodes, np.zeros(0, dtype=np.int64), must_gain=True)
    except DependencyUnavailableError:
        log.warning("placement LNS skipped: HiGHS is not available")
    return LnsResult(lns.choice, lns.subproblems, lns.improved)
