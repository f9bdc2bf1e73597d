"""The exact oracle for small clusters: exhaustive search over subsets and a batch grid.

For ``N <= 8`` workers it enumerates every non-empty subset ``S`` of the workers that fit
in memory and, for each worker of ``S``, every batch size of a grid ``G_i`` (``grid_points``
values spread geometrically over ``[b_min, GetMaxBatchSize_i]``, both ends included). With
proportional shards, which equalise the workers' finishing times, the epoch time of a
choice is ``|M| / sum_{i in S} 1 / t_total_i(b_S)``; the oracle returns the feasible choice
that minimises it::

    min_{S, b in prod_{i in S} G_i}  |M| / sum_{i in S} 1 / t_total_i
    s.t.  pressure_i^a(b_i) * (1 + margin) <= delta_a   for all a in backApp_i, i in S

Its cost is ``(1 + |G|)^N`` update-time evaluations, hence the size cap. Given the ground
truth it is the limit that measures the heuristic's gap; given the same estimates as the
heuristic it measures the search alone.
"""

from __future__ import annotations

import itertools
import math

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.shard_assemble import Exclusion, assemble_plan
from deepedge.planning.shard_estimates import EstimateCache
from deepedge.planning.shard_plan import ExclusionReason, Policy, ShardPlan
from deepedge.planning.shard_spec import ClusterSpec

MAX_ORACLE_WORKERS = 8


def batch_grid(min_batch: int, max_batch: int, points: int) -> list[int]:
    """``points`` integers spread geometrically over [min_batch, max_batch], ends included."""
    if max_batch <= min_batch or points <= 1:
        return [max_batch]
    ratio = max_batch / min_batch
    raw = {round(min_batch * ratio ** (k / (points - 1))) for k in range(points)}
    return sorted(min(max(b, min_batch), max_batch) for b in raw | {min_batch, max_batch})


def plan_oracle(
    cluster: ClusterSpec,
    model: PerformanceModel,
    grid_points: int = 4,
    margin: float | None = None,
) -> ShardPlan:
    """Best subset and batches on the grid; ``margin`` defaults to the document's."""
    n = len(cluster.workers)
    if n > MAX_ORACLE_WORKERS:
        raise InvalidInputError(
            f"the exact oracle handles at most {MAX_ORACLE_WORKERS} workers, got {n}",
            field="workers",
        )
    margin = cluster.deadline_margin if margin is None else margin
    cache = EstimateCache(cluster, model)
    exclusions: dict[int, Exclusion] = {}
    options: dict[int, list[int]] = {}
    for i, w in enumerate(cluster.workers):
        top = cache.max_batch(i)
        if top == 0:
            exclusions[i] = Exclusion(ExclusionReason.MEMORY)
            continue
        grid = batch_grid(w.min_batch, top, grid_points)
        feasible = [b for b in grid if cache.blocker(i, b, margin) is None]
        if feasible:
            options[i] = feasible
        else:
            blocker = cache.blocker(i, grid[0], margin)
            exclusions[i] = Exclusion(ExclusionReason.DEADLINE, blocker, margin)
    candidates = sorted(options)
    best_epoch = math.inf
    best: tuple[tuple[int, ...], tuple[int, ...], list[float]] | None = None
    for size in range(1, len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            for batches in itertools.product(*(options[i] for i in subset)):
                updates = cache.update_s(subset, batches)
                t_total = [
                    cache.compute_s(i, b) + u / b
                    for i, b, u in zip(subset, batches, updates, strict=True)
                ]
                epoch = cluster.dataset_size / sum(1.0 / t for t in t_total)
                if epoch < best_epoch:
                    best_epoch, best = epoch, (subset, batches, t_total)
    if best is None:
        return assemble_plan(cache, Policy.ORACLE, {}, {}, exclusions)
    subset, batches, t_total = best
    norm = sum(1.0 / t for t in t_total)
    return assemble_plan(
        cache,
        Policy.ORACLE,
        {i: cluster.dataset_size / (t * norm) for i, t in zip(subset, t_total, strict=True)},
        dict(zip(subset, batches, strict=True)),
        exclusions,
    )
