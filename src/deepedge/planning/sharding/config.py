"""Configurations ``(S, b)`` of a sharding plan, their feasible batches and their Total_cost.

Shared by the policies that rank plans by Total_cost (Deep-Edge+ and the exact oracle).
A worker ``i`` may train at batch ``b`` when

* ``b_min_i <= b <= min(b_max_i, GetMaxBatchSize_i, |M|)``: it fits memory, and no batch
  can exceed its shard, which is at most ``|M|``;
* every background app of ``i`` meets its deadline at ``b``:
  ``pressure_i^a(b) * (1 + margin) <= delta_a``, also at the state whose estimated memory
  change is ``1 + margin`` times larger (``EstimateCache.cautious_blocker``; the same rule
  at ``margin = 0``).

The cost of a configuration is the exact integer split of :mod:`split` under
``a_i = transfer_i + numEpoch * (t_compute_i(b_i) + t_update_i(b_S, |S|) / b_i)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepedge.planning.sharding.assemble import Exclusion
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.plan import ExclusionReason
from deepedge.planning.sharding.split import FloatArray, IntArray, Split, min_max_split


@dataclass(frozen=True, slots=True)
class Candidate:
    """A worker that can train: its batch range and its largest feasible batch."""

    index: int
    min_batch: int
    top_batch: int  # the largest batch that fits memory, |M| and every deadline


def batch_ceiling(cache: EstimateCache, i: int) -> int:
    """``min(b_max, GetMaxBatchSize, |M|)``; below ``b_min`` when no batch fits."""
    w = cache.cluster.workers[i]
    top = cache.max_batch(i)
    if top == 0:
        return 0
    return min(top, w.max_batch, cache.cluster.dataset_size)


def largest_feasible_batch(cache: EstimateCache, i: int, margin: float) -> int | Exclusion:
    """The largest batch of worker ``i`` meeting memory, |M| and every deadline.

    The deadline is checked at the ceiling first; if an app misses it there, a bisection
    looks for the boundary, which is exact when pressure does not fall as the batch grows
    (true of the catalog and of noisy views of it: only memory depends on the batch). For
    any model the batch returned meets every deadline.
    """
    w = cache.cluster.workers[i]
    top = batch_ceiling(cache, i)
    if top == 0:
        return Exclusion(ExclusionReason.MEMORY)
    if top < w.min_batch:
        return Exclusion(ExclusionReason.BATCH_ABOVE_DATA)
    if cache.cautious_blocker(i, top, margin) is None:
        return top
    blocker = cache.cautious_blocker(i, w.min_batch, margin)
    if blocker is not None:
        return Exclusion(ExclusionReason.DEADLINE, blocker, margin)
    lo, hi = w.min_batch, top  # lo meets every deadline, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cache.cautious_blocker(i, mid, margin) is None:
            lo = mid
        else:
            hi = mid
    return lo


def candidates(cache: EstimateCache, margin: float) -> tuple[list[Candidate], dict[int, Exclusion]]:
    """Every worker that can train, and why each of the others cannot."""
    usable: list[Candidate] = []
    excluded: dict[int, Exclusion] = {}
    for i, w in enumerate(cache.cluster.workers):
        top = largest_feasible_batch(cache, i, margin)
        if isinstance(top, Exclusion):
            excluded[i] = top
        else:
            usable.append(Candidate(i, w.min_batch, top))
    return usable, excluded


class ConfigCost:
    """Total_cost of configurations ``(S, b)`` of one cluster under one model."""

    def __init__(self, cache: EstimateCache) -> None:
        cluster = cache.cluster
        self.cache = cache
        self.dataset_size = cluster.dataset_size
        self.num_epochs = float(cluster.num_epochs)
        self.fixed_s = np.array([w.init_s for w in cluster.workers], dtype=np.float64)
        self.transfer_s = np.array(
            [w.transfer_s_per_sample for w in cluster.workers], dtype=np.float64
        )
        self.evaluations = 0

    def times_s(
        self, workers: Sequence[int], batches: Sequence[int]
    ) -> tuple[FloatArray, FloatArray]:
        """``t_compute_i(b_i)`` (per sample) and ``t_update_i(b_S, |S|)`` (per batch)."""
        self.evaluations += 1
        compute = np.array(
            [self.cache.compute_s(i, b) for i, b in zip(workers, batches, strict=True)]
        )
        return compute, np.asarray(self.cache.update_s(workers, batches), dtype=np.float64)

    def rates_s(self, workers: Sequence[int], batches: Sequence[int]) -> FloatArray:
        """``a_i`` of every worker of ``S`` at the batch vector ``b``."""
        compute, update = self.times_s(workers, batches)
        t_total = compute + update / np.asarray(batches, dtype=np.float64)
        idx = np.asarray(workers, dtype=np.int64)
        rates: FloatArray = self.transfer_s[idx] + self.num_epochs * t_total
        return rates

    def split(self, workers: Sequence[int], batches: Sequence[int]) -> Split | None:
        """The exact integer split of ``(S, b)``; None when the batches exceed |M|."""
        if sum(batches) > self.dataset_size:
            return None
        return self.split_at(workers, self.rates_s(workers, batches), batches)

    def split_at(
        self,
        workers: Sequence[int],
        rates_s: FloatArray,
        floors: Sequence[int],
        ceilings: Sequence[int] | None = None,
    ) -> Split | None:
        """The split of ``S`` at rates ``a`` with shard floors ``l`` (usually ``l = b``)
        and optional ceilings ``u``."""
        lower: IntArray = np.asarray(floors, dtype=np.int64)
        upper = None if ceilings is None else np.asarray(ceilings, dtype=np.int64)
        idx = np.asarray(workers, dtype=np.int64)
        return min_max_split(self.fixed_s[idx], rates_s, lower, self.dataset_size, upper)
