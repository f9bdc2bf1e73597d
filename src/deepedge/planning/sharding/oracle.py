"""The exact oracle for small clusters: every worker subset, every feasible batch size.

For ``N <= 6`` workers it solves, by Total_cost (Deep-Edge Section III-A)::

    min_{S, b, d}  max_{i in S} Initialize_i + d_i transfer_i + numEpoch d_i t_total_i(b_S)
    s.t.  b_i in F_i = { b_min_i <= b <= min(b_max_i, GetMaxBatchSize_i, |M|) :
                         pressure_i^a(b) (1 + margin) <= delta_a for all a in backApp_i }
          sum_{i in S} d_i = |M|,  d_i integer,  d_i >= b_i   (a batch never above its shard)

Every batch of ``F_i`` is checked against every deadline (no monotonicity is assumed
there), and for each ``(S, b)`` the shards are the exact integer optimum of
:mod:`split`. The search over ``b`` is a branch and bound: workers of ``S`` are
fixed one at a time, largest batch first, and a node is pruned when its bound is no better
than the best plan found. The bound sets every unfixed worker to its largest batch (the
least per-sample times) and to its smallest shard floor. It is valid, so the oracle is
exact, when a larger batch never slows any worker: ``EstComputeTime`` is non-increasing in
``b_i`` and ``EstUpdateTime`` in every ``b_j``. Both hold for the device catalog
(``forward + backward / b``; contention ``1 + kappa (n - 1) mean_j(b_ref / b_j)``) and for
any ``NoisyModel`` over it (its factors do not depend on the batch). Subsets are explored
in the order of their bound, so most are pruned at the root.

Given the ground truth it is the limit that measures a policy's gap; given the same
estimates as a policy it measures that policy's search alone.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.assemble import Exclusion, assemble_plan
from deepedge.planning.sharding.config import ConfigCost, batch_ceiling
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.plan import ExclusionReason, Policy, ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.planning.sharding.split import FloatArray

MAX_ORACLE_WORKERS = 6
MAX_ORACLE_BATCHES = 10_000  # batch sizes checked per worker
SEED_STEPS = 6
SEEDED_SUBSETS = 8  # subsets of least bound seeded before the search
TIE_TOLERANCE = 1e-9  # a node is pruned unless its bound is below the best by this share


def feasible_batches(cache: EstimateCache, i: int, margin: float) -> list[int] | Exclusion:
    """``F_i`` in decreasing order, or why it is empty."""
    w = cache.cluster.workers[i]
    top = batch_ceiling(cache, i)
    if top == 0:
        return Exclusion(ExclusionReason.MEMORY)
    if top < w.min_batch:
        return Exclusion(ExclusionReason.BATCH_ABOVE_DATA)
    if top - w.min_batch + 1 > MAX_ORACLE_BATCHES:
        raise InvalidInputError(
            f"the exact oracle checks at most {MAX_ORACLE_BATCHES} batch sizes per worker; "
            f"{w.id} has {top - w.min_batch + 1} (lower max_batch)",
            field="max_batch",
        )
    batches = [
        b for b in range(top, w.min_batch - 1, -1) if cache.cautious_blocker(i, b, margin) is None
    ]
    if batches:
        return batches
    return Exclusion(
        ExclusionReason.DEADLINE, cache.cautious_blocker(i, w.min_batch, margin), margin
    )


class _Options:
    """``F_j`` of one worker and what the tight bound needs of it, for shards up to b*_j."""

    def __init__(self, costs: ConfigCost, i: int, batches: list[int]) -> None:
        self.batches = batches  # decreasing
        feasible = np.array(batches[::-1], dtype=np.int64)
        self.top, self.low = int(feasible[-1]), int(feasible[0])
        self.shards = np.arange(self.low, self.top + 1, dtype=np.float64)
        # phi(d): the largest feasible batch <= d, the batch of a shard d in an optimum
        phi = feasible[np.searchsorted(feasible, self.shards, side="right") - 1]
        self.phi = phi.astype(np.float64)
        compute = {b: costs.cache.compute_s(i, b) for b in batches}
        self.compute_at_phi = np.array([compute[int(b)] for b in phi])
        self.fixed_s = float(costs.fixed_s[i])
        self.transfer_s = float(costs.transfer_s[i])
        # the most a shard may hold at batch b in an undominated plan: phi(d) = b
        self.ceiling = {b: nxt - 1 for nxt, b in itertools.pairwise(batches)}
        self.ceiling[self.top] = costs.dataset_size


class _Search:
    """Branch and bound over the batch vectors of one subset.

    A node fixes the batches of the first workers of ``S``. Its bound gives every other
    worker its largest batch in the update-time term (the least contention) and its
    least shard floor. When the resulting linear split leaves a free worker ``j`` with a
    shard below ``b*_j``, the bound is tightened: that worker's batch can be at most
    ``phi_j(d)``, so its cost is at least
    ``g_j(d) = c_j + d transfer_j + E (d t_compute_j(phi_j(d)) + t_update_j d / phi_j(d))``,
    and the split is redone on the non-decreasing lower envelope of ``g_j``.
    """

    def __init__(self, costs: ConfigCost, options: dict[int, _Options]) -> None:
        self.costs = costs
        self.options = options
        self.best_cost = math.inf
        self.best: tuple[tuple[int, ...], list[int], list[int]] | None = None

    def prunes(self, bound: float) -> bool:
        return bound >= self.best_cost * (1.0 - TIE_TOLERANCE)

    def bound(self, subset: tuple[int, ...], fixed: list[int]) -> float:
        k, costs = len(fixed), self.costs
        free = [self.options[i] for i in subset[k:]]
        batches = fixed + [o.top for o in free]
        compute, update = costs.times_s(subset, batches)
        t_total = compute + update / np.asarray(batches, dtype=np.float64)
        rates = costs.transfer_s[list(subset)] + costs.num_epochs * t_total
        ceilings = [self.options[i].ceiling[b] for i, b in zip(subset, fixed, strict=False)]
        ceilings += [costs.dataset_size] * len(free)
        split = costs.split_at(subset, rates, fixed + [o.low for o in free], ceilings)
        if split is None:
            return math.inf
        if self.prunes(split.cost_s) or all(
            split.shards[k + m] >= o.top for m, o in enumerate(free)
        ):
            return split.cost_s
        return max(split.cost_s, self._tight(subset, fixed, rates, update))

    def _tight(
        self, subset: tuple[int, ...], fixed: list[int], rates: FloatArray, update: FloatArray
    ) -> float:
        """The least level ``T`` at which every worker's shard range covers |M|."""
        k, epochs, size = len(fixed), self.costs.num_epochs, self.costs.dataset_size
        lines = [(float(self.costs.fixed_s[i]), float(rates[m])) for m, i in enumerate(subset)]
        envelopes = []
        for m, i in enumerate(subset[k:], start=k):
            o = self.options[i]
            g = o.fixed_s + o.shards * (
                o.transfer_s + epochs * (o.compute_at_phi + update[m] / o.phi)
            )
            envelopes.append(np.minimum.accumulate(g[::-1])[::-1])
        floors = [c + a * b for (c, a), b in zip(lines[:k], fixed, strict=True)]
        level = max(floors + [float(e[0]) for e in envelopes])

        def capacity(t: float) -> int:
            total = 0
            for m, (c, a) in enumerate(lines):
                if m < k:
                    total += min(self.options[subset[m]].ceiling[fixed[m]], math.floor((t - c) / a))
                elif t >= c + a * self.options[subset[m]].top:
                    total += math.floor((t - c) / a)
                else:
                    o = self.options[subset[m]]
                    total += o.low - 1 + int(np.searchsorted(envelopes[m - k], t, side="right"))
            return total

        if capacity(level) >= size:
            return level
        high = max(c + a * size for c, a in lines)
        while high - level > TIE_TOLERANCE * 0.1 * high:
            mid = 0.5 * (level + high)
            if capacity(mid) >= size:
                high = mid
            else:
                level = mid
        return level

    def leaf(self, subset: tuple[int, ...], batches: list[int]) -> None:
        split = self.costs.split(subset, batches)
        if split is not None and split.cost_s < self.best_cost:
            self.best_cost = split.cost_s
            self.best = (subset, list(batches), split.shards.tolist())

    def seed(self, subset: tuple[int, ...]) -> None:
        """A first plan to prune against: iterate ``b_i = phi_i(d_i(b))`` from the tops.

        It only speeds the search up; the optimum does not depend on it.
        """
        options = [self.options[i] for i in subset]
        batches = [o.top for o in options]
        for _ in range(SEED_STEPS):
            rates = self.costs.rates_s(subset, batches)
            wanted = self.costs.split_at(subset, rates, [o.low for o in options])
            if wanted is None:
                return
            shards = wanted.shards.tolist()
            nxt = [int(o.phi[min(d, o.top) - o.low]) for o, d in zip(options, shards, strict=True)]
            self.leaf(subset, nxt)
            if nxt == batches:
                return
            batches = nxt

    def explore(self, subset: tuple[int, ...], fixed: list[int]) -> None:
        if len(fixed) == len(subset):
            self.leaf(subset, fixed)
            return
        for b in self.options[subset[len(fixed)]].batches:
            child = [*fixed, b]
            if not self.prunes(self.bound(subset, child)):
                self.explore(subset, child)


def plan_oracle(
    cluster: ClusterSpec, model: PerformanceModel, margin: float | None = None
) -> ShardPlan:
    """The plan of least Total_cost; ``margin`` defaults to the document's."""
    n = len(cluster.workers)
    if n > MAX_ORACLE_WORKERS:
        raise InvalidInputError(
            f"the exact oracle handles at most {MAX_ORACLE_WORKERS} workers, got {n}",
            field="workers",
        )
    margin = cluster.deadline_margin if margin is None else margin
    cache = EstimateCache(cluster, model)
    exclusions: dict[int, Exclusion] = {}
    costs = ConfigCost(cache)
    options: dict[int, _Options] = {}
    for i in range(n):
        batches = feasible_batches(cache, i, margin)
        if isinstance(batches, Exclusion):
            exclusions[i] = batches
        else:
            options[i] = _Options(costs, i, batches)
    search = _Search(costs, options)
    subsets = [
        s
        for size in range(1, len(options) + 1)
        for s in itertools.combinations(sorted(options), size)
    ]
    roots = sorted((search.bound(s, []), s) for s in subsets)
    for root, subset in roots[:SEEDED_SUBSETS]:
        if not search.prunes(root):
            search.seed(subset)
    for root, subset in roots:
        if not search.prunes(root):
            search.explore(subset, [])
    if search.best is None:
        return assemble_plan(cache, Policy.ORACLE, {}, {}, exclusions)
    subset, batches, shards = search.best
    return assemble_plan(
        cache,
        Policy.ORACLE,
        {i: float(d) for i, d in zip(subset, shards, strict=True)},
        dict(zip(subset, batches, strict=True)),
        exclusions,
    )
