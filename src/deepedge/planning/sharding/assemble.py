"""Turn a policy's decision (real shards, batches, exclusion reasons) into a ShardPlan.

Shared by every sharding policy so that all of them round, predict and report the same way:
shards are rounded with :func:`~deepedge.planning.sharding.cost_model.integer_shards` (sum exactly
``|M|``), a worker whose share rounds to 0 is excluded with ``ROUNDED_TO_ZERO``, and the
predicted epoch time and total cost come from the cost model under the policy's estimates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deepedge.planning.sharding.cost_model import evaluate_assignment, integer_shards
from deepedge.planning.sharding.estimates import AppPressure, EstimateCache
from deepedge.planning.sharding.plan import (
    Blocker,
    ExclusionReason,
    Policy,
    ShardPlan,
    WorkerAssignment,
)


@dataclass(frozen=True, slots=True)
class Exclusion:
    reason: ExclusionReason
    blocker: AppPressure | None = None
    margin: float = 0.0  # the deadline margin the blocker was judged with


def assemble_plan(
    cache: EstimateCache,
    policy: Policy,
    real_shards: Mapping[int, float],
    batches: Mapping[int, int],
    exclusions: Mapping[int, Exclusion],
    iterations: int = 0,
) -> ShardPlan:
    """Build the plan; ``real_shards``/``batches`` cover the selected workers only."""
    cluster = cache.cluster
    n = len(cluster.workers)
    selected = sorted(real_shards)
    rounded = integer_shards([real_shards[i] for i in selected], cluster.dataset_size)
    shards = [0] * n
    batch_of = [0] * n
    excluded = dict(exclusions)
    for i, d in zip(selected, rounded, strict=True):
        if d > 0:
            shards[i] = d
            batch_of[i] = batches[i]
        else:
            excluded[i] = Exclusion(ExclusionReason.ROUNDED_TO_ZERO)
    evaluation = evaluate_assignment(cache, shards, batch_of)
    by_id = {w.id: w for w in evaluation.workers}
    assignments = []
    for i, w in enumerate(cluster.workers):
        row = by_id.get(w.id)
        if row is not None:
            assignments.append(
                WorkerAssignment(
                    id=w.id,
                    selected=True,
                    shard=row.shard,
                    batch_size=row.batch,
                    t_total_s_per_sample=row.t_compute_s + row.t_update_s / row.batch,
                    epoch_time_s=row.epoch_time_s,
                )
            )
            continue
        why = excluded.get(i, Exclusion(ExclusionReason.NOT_IN_OPTIMUM))
        blocker = None
        if why.blocker is not None:
            blocker = Blocker(
                app=why.blocker.app,
                pressure_s=why.blocker.pressure_s,
                deadline_s=why.blocker.deadline_s,
                margin=why.margin,
            )
        assignments.append(
            WorkerAssignment(
                id=w.id,
                selected=False,
                shard=0,
                batch_size=0,
                exclusion=why.reason,
                blocker=blocker,
            )
        )
    feasible = bool(evaluation.workers)
    return ShardPlan(
        policy=policy,
        feasible=feasible,
        workers=assignments,
        dataset_size=cluster.dataset_size,
        epoch_time_s=evaluation.epoch_time_s if feasible else None,
        total_cost_s=evaluation.total_cost_s if feasible else None,
        iterations=iterations,
    )
