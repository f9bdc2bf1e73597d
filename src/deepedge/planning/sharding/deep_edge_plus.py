"""Deep-Edge+: Algorithm 1's goal, ranked by Total_cost and searched further.

Algorithm 1 (``deep_edge.py``, the paper's policy) checks deadlines only at
GetMaxBatchSize, ranks plans by epoch time (transfer and initialisation ignored) and raises
a batch to ``b_min`` above a worker's own shard. Deep-Edge+ keeps its model and inputs and
changes the decision rule:

1. **Batches.** Each worker trains at its largest batch ``b*_i`` that fits memory, fits in
   ``|M|`` and meets every background deadline (``config.largest_feasible_batch``);
   a worker with no such batch is excluded with the reason. Since ``b*_i`` sits on the
   deadline's boundary, the deadline margin covers the estimated memory change as well
   as the pressure (``EstimateCache.cautious_blocker``).
2. **Cost.** A configuration ``(S, b)`` is scored by Total_cost with its exact integer
   shard split, and every shard holds at least one batch, ``d_i >= b_i`` (``split``).
3. **Batch capping.** When the worker that sets the cost is held at ``d_i = b_i`` (small
   ``|M|``), its batch is lowered towards the share it would take freely, while that
   lowers Total_cost; when the batches of ``S`` exceed ``|M|`` they start from the
   workers' proportional shares instead.
4. **Subsets.** Up to ``EXACT_SUBSETS`` usable workers every subset is scored (63 at 6
   workers). Above it, the workers are ordered by per-sample cost, every prefix of that
   order is scored, and a local search (drop one, add one, swap one pair among the
   ``MOVE_WIDTH`` best candidates of each kind) runs from the best prefix until no move
   lowers Total_cost.

Pure: no I/O, no clock, inputs are not mutated. Same signature as every sharding policy:
``plan_deep_edge_plus(cluster, model) -> ShardPlan``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.assemble import Exclusion, assemble_plan
from deepedge.planning.sharding.config import Candidate, ConfigCost, candidates
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.plan import ExclusionReason, Policy, ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec

EXACT_SUBSETS = 8  # usable workers up to which every subset is scored
MOVE_WIDTH = 3  # candidates of each kind the local search tries per move
MAX_CAPPING_STEPS = 6
MAX_MOVES = 60
PREFIX_GRID = 16  # prefix sizes scored before the ternary refinement


@dataclass(frozen=True, slots=True)
class Scored:
    cost_s: float
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    shards: tuple[int, ...]


class _Scorer:
    """Best batches and exact cost of one subset (steps 1-3), memoised by subset."""

    def __init__(self, costs: ConfigCost, usable: list[Candidate]) -> None:
        self.costs = costs
        self.top = {c.index: c.top_batch for c in usable}
        self.low = {c.index: c.min_batch for c in usable}
        self.memo: dict[tuple[int, ...], Scored | None] = {}

    def score(self, subset: tuple[int, ...]) -> Scored | None:
        if subset not in self.memo:
            self.memo[subset] = self._score(subset)
        return self.memo[subset]

    def _score(self, subset: tuple[int, ...]) -> Scored | None:
        """Iterate ``b_i = min(b*_i, d_i(b))`` (step 3); keep the cheapest exact split seen.

        ``d(b)`` is the split at the rates of ``b`` with the shard floors relaxed to
        ``b_min``: the share each worker would take, which its batch may not exceed.
        """
        costs = self.costs
        low = [self.low[i] for i in subset]
        batches = tuple(self.top[i] for i in subset)
        best: Scored | None = None
        for _ in range(MAX_CAPPING_STEPS):
            rates = costs.rates_s(subset, batches)
            wanted = costs.split_at(subset, rates, low)
            if wanted is None:  # even b_min on every worker exceeds |M|
                return None
            capped = tuple(
                min(b, int(d)) for b, d in zip(batches, wanted.shards.tolist(), strict=True)
            )
            if capped != batches:
                rates = costs.rates_s(subset, capped)
            split = costs.split_at(subset, rates, capped)
            if split is not None and (best is None or split.cost_s < best.cost_s):
                best = Scored(split.cost_s, subset, capped, tuple(split.shards.tolist()))
            raised = tuple(
                min(self.top[i], d) for i, d in zip(subset, wanted.shards.tolist(), strict=True)
            )
            if raised == batches:
                break
            batches = raised
        return best


def _best_prefix(scorer: _Scorer, order: list[int]) -> Scored | None:
    """The cheapest prefix of ``order``: a grid of ``PREFIX_GRID`` sizes, then a ternary
    search between the best grid point's neighbours (the cost of a prefix first falls
    with more workers, then rises as contention grows)."""
    n = len(order)

    def at(k: int) -> Scored | None:
        return scorer.score(tuple(sorted(order[:k])))

    def cost(k: int) -> float:
        scored = at(k)
        return math.inf if scored is None else scored.cost_s

    grid = sorted({max(1, round(n * j / PREFIX_GRID)) for j in range(PREFIX_GRID + 1)})
    k = min(grid, key=cost)
    pos = grid.index(k)
    lo, hi = grid[max(0, pos - 1)], grid[min(len(grid) - 1, pos + 1)]
    while hi - lo > 2:
        m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if cost(m1) <= cost(m2):
            hi = m2
        else:
            lo = m1
    return at(min(range(lo, hi + 1), key=cost))


def _local_search(scorer: _Scorer, order: list[int]) -> Scored | None:
    """Step 4 above ``EXACT_SUBSETS``: best prefix of ``order``, then drop/add/swap moves,
    taking the first move that lowers Total_cost."""
    best = _best_prefix(scorer, order)
    if best is None:
        return None
    rank = {i: r for r, i in enumerate(order)}
    for _ in range(MAX_MOVES):
        chosen = sorted(best.workers, key=rank.__getitem__)
        taken = set(chosen)
        others = [i for i in order if i not in taken][:MOVE_WIDTH]
        worst = chosen[::-1][:MOVE_WIDTH]
        moves = [tuple(j for j in chosen if j != i) for i in worst if len(chosen) > 1]
        moves += [(*chosen, i) for i in others]
        moves += [(*(j for j in chosen if j != i), f) for i in worst for f in others]
        for move in moves:
            scored = scorer.score(tuple(sorted(move)))
            if scored is not None and scored.cost_s < best.cost_s:
                best = scored
                break
        else:
            break
    return best


def plan_deep_edge_plus(cluster: ClusterSpec, model: PerformanceModel) -> ShardPlan:
    """Workers, batches and shards of least Total_cost found (see the module docstring)."""
    cache = EstimateCache(cluster, model)
    usable, exclusions = candidates(cache, cluster.deadline_margin)
    costs = ConfigCost(cache)
    scorer = _Scorer(costs, usable)
    indices = [c.index for c in usable]
    best: Scored | None = None
    if len(indices) <= EXACT_SUBSETS:
        for size in range(1, len(indices) + 1):
            for subset in itertools.combinations(indices, size):
                scored = scorer.score(subset)
                if scored is not None and (best is None or scored.cost_s < best.cost_s):
                    best = scored
    elif indices:
        tops = [c.top_batch for c in usable]
        rates = costs.rates_s(indices, tops)
        typical = costs.fixed_s[indices] + rates * (cluster.dataset_size / len(indices))
        order = [indices[k] for k in np.argsort(typical, kind="stable")]
        best = _local_search(scorer, order)
    reasons: dict[int, Exclusion] = dict(exclusions)
    if best is None:  # no usable worker: a single one always fits (b*_i <= |M|)
        return assemble_plan(cache, Policy.DEEP_EDGE_PLUS, {}, {}, reasons, costs.evaluations)
    for i in indices:
        if i not in best.workers:
            reasons[i] = Exclusion(ExclusionReason.NOT_SELECTED)
    return assemble_plan(
        cache,
        Policy.DEEP_EDGE_PLUS,
        {i: float(d) for i, d in zip(best.workers, best.shards, strict=True)},
        dict(zip(best.workers, best.batches, strict=True)),
        reasons,
        costs.evaluations,
    )
