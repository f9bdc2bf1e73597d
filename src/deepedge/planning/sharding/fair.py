"""The fair baseline: equal shards over all workers, each at its maximum batch.

This is what the fairness schedulers of Hadoop, YARN and Mesos would do (Section V-C): it
is blind to heterogeneity and to interference, so it neither weighs speed nor checks any
background app's deadline. The only worker it leaves out is one whose minimum batch does
not fit in memory (it could not start at all)::

    W' = {i : GetMaxBatchSize(X_i^mem) > 0},   d_i = |M| / |W'|,   b_i = GetMaxBatchSize_i
"""

from __future__ import annotations

from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.assemble import Exclusion, assemble_plan
from deepedge.planning.sharding.estimates import EstimateCache
from deepedge.planning.sharding.plan import ExclusionReason, Policy, ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec


def plan_fair(cluster: ClusterSpec, model: PerformanceModel) -> ShardPlan:
    """Equal shards, max batches, no interference check."""
    cache = EstimateCache(cluster, model)
    batches = {i: cache.max_batch(i) for i in range(len(cluster.workers))}
    exclusions = {i: Exclusion(ExclusionReason.MEMORY) for i, b in batches.items() if b == 0}
    chosen = [i for i, b in batches.items() if b > 0]
    share = cluster.dataset_size / len(chosen) if chosen else 0.0
    return assemble_plan(
        cache,
        Policy.FAIR,
        {i: share for i in chosen},
        {i: batches[i] for i in chosen},
        exclusions,
    )
