"""The cost model of Deep-Edge, Section III-A, and the evaluation of a plan under a model.

For worker ``w_i`` with shard ``d_i`` and batch ``b_i`` (all times in seconds)::

    Transfer_i   = d_i * transfer_i^ds
    t_compute_i  = forward_i + backward_i / b_i                    (per sample)
    t_update_i   = push_i + update^ps + pull_i                     (per batch)
    B_i          = d_i / b_i                                       (the paper's B_i ~ d_i/b_i)
    epochTime_i  = B_i * (b_i * t_compute_i + t_update_i) = d_i * t_total_i
    t_total_i    = t_compute_i + t_update_i / b_i                  (Algorithm 1, line 9)
    Total_cost   = max_i gamma_i * (Transfer_i + Initialize_i + epochTime_i * numEpoch)

with ``gamma_i = 1`` iff ``d_i > 0``. Proportional sharding (Algorithm 1, line 10) is
``d_i = |M| / (t_total_i * sum_j 1 / t_total_j)``; :func:`integer_shards` rounds it to
integers that sum to ``|M|`` exactly (largest remainder).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.estimates import AppPressure, EstimateCache
from deepedge.planning.sharding.plan import ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec


def transfer_cost_s(shard: int, transfer_s_per_sample: float) -> float:
    """Transfer_i^ds = d_i * transfer_i^ds."""
    return shard * transfer_s_per_sample


def per_sample_time_s(t_compute_s: float, t_update_s: float, batch: int) -> float:
    """t_total_i = t_compute_i + t_update_i / b_i."""
    return t_compute_s + t_update_s / batch


def epoch_time_s(shard: float, batch: int, t_compute_s: float, t_update_s: float) -> float:
    """epochTime_i = B_i (b_i t_compute_i + t_update_i) with B_i = d_i / b_i."""
    if shard <= 0:
        return 0.0
    return (shard / batch) * (batch * t_compute_s + t_update_s)


def total_cost_s(
    shards: Sequence[int],
    transfers_s: Sequence[float],
    inits_s: Sequence[float],
    epoch_times_s: Sequence[float],
    num_epochs: int,
) -> float:
    """Total_cost = max_i gamma_i (Transfer_i + Initialize_i + epochTime_i * numEpoch)."""
    costs = [
        t + init + e * num_epochs
        for d, t, init, e in zip(shards, transfers_s, inits_s, epoch_times_s, strict=True)
        if d > 0
    ]
    return max(costs, default=0.0)


def proportional_shards(t_total_s: Sequence[float], dataset_size: int) -> list[float]:
    """d_i = |M| / (t_total_i * sum_j 1 / t_total_j): every worker finishes together."""
    inverse = [1.0 / t for t in t_total_s]
    norm = sum(inverse)
    return [dataset_size * v / norm for v in inverse]


def integer_shards(real_shards: Sequence[float], dataset_size: int) -> list[int]:
    """Largest-remainder rounding: integers, each within 1 of its real share, summing to |M|.

    Ties go to the worker listed first, so the result is deterministic.
    """
    if dataset_size < 0:
        raise InvalidInputError(f"dataset_size must be >= 0, got {dataset_size}", "dataset_size")
    n = len(real_shards)
    floors = [max(0, math.floor(d)) for d in real_shards]
    if n == 0:
        return floors
    missing = dataset_size - sum(floors)
    # Largest remainder first. Float shares that do not sum exactly to |M| leave ``missing``
    # outside [0, n]; it is then spread evenly, or taken back smallest remainder first.
    order = sorted(range(n), key=lambda i: (floors[i] - real_shards[i], i))
    if missing >= 0:
        base, extra = divmod(missing, n)
        for rank, i in enumerate(order):
            floors[i] += base + (1 if rank < extra else 0)
    while missing < 0:
        for i in reversed(order):
            if missing < 0 and floors[i] > 0:
                floors[i] -= 1
                missing += 1
    return floors


@dataclass(frozen=True, slots=True)
class WorkerEvaluation:
    id: str
    shard: int
    batch: int
    t_compute_s: float
    t_update_s: float
    epoch_time_s: float
    pressures: tuple[AppPressure, ...]
    mem_fits: bool  # b_i <= GetMaxBatchSize under the evaluating model

    @property
    def violations(self) -> int:
        return sum(1 for p in self.pressures if p.violates())


@dataclass(frozen=True, slots=True)
class PlanEvaluation:
    """A plan's cost and deadline outcome under one model (ground truth when scoring)."""

    epoch_time_s: float
    total_cost_s: float
    workers: tuple[WorkerEvaluation, ...]

    @property
    def violations(self) -> int:
        """Background apps, over all selected workers, that miss their deadline."""
        return sum(w.violations for w in self.workers)


def evaluate_assignment(
    cache: EstimateCache, shards: Sequence[int], batches: Sequence[int]
) -> PlanEvaluation:
    """Evaluate shards/batches (indexed like ``cluster.workers``; 0 = excluded)."""
    cluster = cache.cluster
    active = [i for i, d in enumerate(shards) if d > 0]
    if not active:
        return PlanEvaluation(epoch_time_s=math.inf, total_cost_s=math.inf, workers=())
    active_batches = [batches[i] for i in active]
    updates = cache.update_s(active, active_batches)
    rows = []
    for i, b, t_update in zip(active, active_batches, updates, strict=True):
        t_compute = cache.compute_s(i, b)
        rows.append(
            WorkerEvaluation(
                id=cluster.workers[i].id,
                shard=shards[i],
                batch=b,
                t_compute_s=t_compute,
                t_update_s=t_update,
                epoch_time_s=epoch_time_s(shards[i], b, t_compute, t_update),
                pressures=cache.pressures(i, b),
                mem_fits=b <= cache.max_batch(i),
            )
        )
    total = total_cost_s(
        [r.shard for r in rows],
        [transfer_cost_s(shards[i], cluster.workers[i].transfer_s_per_sample) for i in active],
        [cluster.workers[i].init_s for i in active],
        [r.epoch_time_s for r in rows],
        cluster.num_epochs,
    )
    return PlanEvaluation(
        epoch_time_s=max(r.epoch_time_s for r in rows), total_cost_s=total, workers=tuple(rows)
    )


def evaluate_plan(cluster: ClusterSpec, plan: ShardPlan, model: PerformanceModel) -> PlanEvaluation:
    """Score ``plan`` under ``model``: pass the ground truth, never the planner's estimates."""
    by_id = {w.id: w for w in plan.workers}
    shards = [by_id[w.id].shard if w.id in by_id else 0 for w in cluster.workers]
    batches = [by_id[w.id].batch_size if w.id in by_id else 0 for w in cluster.workers]
    return evaluate_assignment(EstimateCache(cluster, model), shards, batches)
