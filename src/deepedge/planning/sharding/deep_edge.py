"""Algorithm 1 of Deep-Edge: interference-aware proportional sharding.

Input: a :class:`ClusterSpec` and a :class:`PerformanceModel` (estimates, never ground
truth). Output: a :class:`ShardPlan`. Pure: no I/O, no clock, inputs are not mutated.

Inner loop (lines 5-28), over the active workers ``W``, starting from ``d_i = inf``::

    b_i       = min(GetMaxBatchSize(X_i^mem), d_i)          clamped to [b_min, b_max]
    t_total_i = EstComputeTime(X_i, b_i) + EstUpdateTime(X_i, X_ps, B, |W|) / b_i
    d_i       = |M| / (t_total_i * sum_{j in W} 1 / t_total_j)
    drop w_i from W if some a in backApp_i has
              EstExecTime(EstState(X_i, b_i)) * (1 + margin) > delta_a
    stop when ||D_new - D||_2 <= epsilon or after tau iterations

Outer loop (lines 29-37): ``epochTime = max_{i in W} d_i t_total_i``; while it improves on
the best so far, remember the configuration and drop the slowest worker
(``argmax t_total_i``), then run the inner loop again on the smaller ``W``.

Three points the pseudo-code leaves open are settled here:

* ``Iter`` restarts at 0 for every outer iteration (otherwise ``Iter == tau`` could never
  hold again after the first inner loop ran to ``tau``).
* The inner loop never stops on an iteration that dropped a worker (the surviving shards
  would no longer sum to ``|M|``); since each such iteration drops one, this adds at most
  ``N`` iterations, and the configuration remembered is always a consistent split.
* ``margin`` (the document's ``deadline_margin``, default 0 = the published rule) lets a
  planner that works from noisy estimates keep clear of deadlines.

Workers whose minimum batch does not fit in memory (GetMaxBatchSize = 0) never enter ``W``.
Shards are rounded to integers summing exactly to ``|M|``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.assemble import Exclusion, assemble_plan
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.plan import ExclusionReason, Policy, ShardPlan
from deepedge.planning.sharding.spec import MAX_DATASET_SIZE, ClusterSpec

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class _Step:
    """One evaluation of lines 6-10 for the active set; memoises per-worker t_compute."""

    def __init__(self, cache: EstimateCache) -> None:
        self.cache = cache
        n = len(cache.cluster.workers)
        self.min_batch = np.array([w.min_batch for w in cache.cluster.workers], dtype=np.int64)
        # b_i = min(GetMaxBatchSize, d_i) with d_i <= |M| <= MAX_DATASET_SIZE: capping the
        # bound there changes no batch and keeps a b_max of 10^19 inside int64.
        self.max_batch = np.array(
            [min(cache.max_batch(i), MAX_DATASET_SIZE) for i in range(n)], dtype=np.int64
        )
        self.last_batch = np.zeros(n, dtype=np.int64)
        self.t_compute = np.zeros(n, dtype=np.float64)

    def batches(self, active: IntArray, shards: FloatArray) -> IntArray:
        """b_i = min(GetMaxBatchSize, d_i), kept within [b_min, b_max]."""
        capped = np.minimum(shards[active], float(MAX_DATASET_SIZE))
        b = np.minimum(self.max_batch[active], np.floor(capped).astype(np.int64))
        return np.maximum(b, self.min_batch[active])

    def t_total(self, active: IntArray, batches: IntArray) -> FloatArray:
        changed = np.nonzero(self.last_batch[active] != batches)[0]
        for k in changed:
            i, b = int(active[k]), int(batches[k])
            self.t_compute[i] = self.cache.compute_s(i, b)
            self.last_batch[i] = b
        updates = np.asarray(
            self.cache.update_s(active.tolist(), batches.tolist()), dtype=np.float64
        )
        result: FloatArray = self.t_compute[active] + updates / batches
        return result


def plan_shards(cluster: ClusterSpec, model: PerformanceModel) -> ShardPlan:
    """Run Algorithm 1 on ``cluster`` with the estimates of ``model``."""
    cache = EstimateCache(cluster, model)
    n = len(cluster.workers)
    size = float(cluster.dataset_size)
    margin = cluster.deadline_margin
    step = _Step(cache)
    exclusions: dict[int, Exclusion] = {}
    for i in range(n):
        if step.max_batch[i] == 0:
            exclusions[i] = Exclusion(ExclusionReason.MEMORY)
    active = np.array([i for i in range(n) if i not in exclusions], dtype=np.int64)
    shards = np.full(n, math.inf)

    cleared_batch = np.zeros(n, dtype=np.int64)  # batch at which a worker last passed

    def drop_blocked(batches: IntArray) -> IntArray:
        """Lines 11-22: remove workers with an app over its deadline; return the survivors.

        Pressure depends on (worker, batch) only, so a worker that passed at this very
        batch before is not asked again.
        """
        keep = np.ones(len(active), dtype=bool)
        for k in np.nonzero(cleared_batch[active] != batches)[0].tolist():
            i, b = int(active[k]), int(batches[k])
            blocker = cache.blocker(i, b, margin)
            if blocker is None:
                cleared_batch[i] = b
            else:
                exclusions[i] = Exclusion(ExclusionReason.DEADLINE, blocker, margin)
                keep[k] = False
        return keep

    best: tuple[float, IntArray, FloatArray, IntArray, dict[int, Exclusion]] | None = None
    iterations = 0
    while len(active):
        inner = 0
        while True:
            batches = step.batches(active, shards)
            t_total = step.t_total(active, batches)
            inverse = 1.0 / t_total
            new_shards = np.zeros(n)
            new_shards[active] = size * inverse / inverse.sum()
            keep = drop_blocked(batches)
            dropped = not keep.all()
            new_shards[active[~keep]] = 0.0
            active = active[keep]
            inner += 1
            distance = (
                math.inf if np.isinf(shards).any() else float(np.linalg.norm(new_shards - shards))
            )
            shards = new_shards
            if not len(active):
                break
            # A drop leaves shards that no longer sum to |M|: never stop on such a step.
            if not dropped and (distance <= cluster.epsilon or inner >= cluster.max_iterations):
                break
        iterations += inner
        if not len(active):
            break
        epoch = float(size / inverse.sum())  # line 29: max_i d_i t_total_i, all equal
        if best is not None and epoch >= best[0]:
            break
        best = (epoch, active.copy(), shards.copy(), batches.copy(), dict(exclusions))
        slowest = int(active[int(np.argmax(t_total))])
        exclusions[slowest] = Exclusion(ExclusionReason.SLOWER_WITH_IT)
        active = active[active != slowest]
        shards = shards.copy()
        shards[slowest] = 0.0

    if best is None:
        return assemble_plan(cache, Policy.DEEP_EDGE, {}, {}, exclusions, iterations)
    _, chosen, real, batches, reasons = best
    return assemble_plan(
        cache,
        Policy.DEEP_EDGE,
        {int(i): float(real[i]) for i in chosen},
        {int(i): int(b) for i, b in zip(chosen, batches, strict=True)},
        reasons,
        iterations,
    )
