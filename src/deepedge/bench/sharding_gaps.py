"""Part B of the sharding benchmark: each policy's gap to the exact oracle, by Total_cost.

Random small clusters (``sharding_scenarios.random_oracle_cluster``: 1-6 workers of any
device class, small and large ``|M|``, memory-bound workers, uneven initialisation and
transfer costs, several epochs) that the testbed experiments never use. Per cluster:

* **exact information**: every policy and the oracle plan on the ground truth with no
  deadline margin. The gap ``Total_cost(policy) / Total_cost(oracle) - 1`` then measures
  the policy's decision rule and search alone;
* **estimates**: every policy and the oracle plan on the same noisy estimates with the
  benchmark's deadline margin; plans are scored on the ground truth, and deadline
  violations are counted there.

A policy that finds no plan where the oracle has one is counted apart (its gap would be
infinite). A plan whose batch exceeds its shard is counted too: the cost model's
``B_i = d_i / b_i`` then prices less than one step, so such a plan can even cost less than
the oracle's, which keeps every batch within its shard.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from deepedge.bench.sharding_scenarios import random_oracle_cluster
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import EstimatorNoise, NoisyModel
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding import shard_policy
from deepedge.planning.sharding.cost_model import evaluate_plan
from deepedge.planning.sharding.plan import Policy
from deepedge.planning.sharding.spec import ClusterSpec

COMPARED = (Policy.DEEP_EDGE, Policy.DEEP_EDGE_PLUS)


@dataclass
class GapStats:
    """Gaps of one policy in one setting, over the clusters the oracle could plan."""

    gaps: list[float] = field(default_factory=list)
    no_plan: int = 0  # clusters where the oracle had a plan and the policy none
    violations: int = 0  # clusters with at least one missed deadline (ground truth)
    batch_above_shard: int = 0  # plans with a batch larger than its worker's shard

    @property
    def mean(self) -> float:
        return statistics.fmean(self.gaps) if self.gaps else math.nan

    @property
    def worst(self) -> float:
        return max(self.gaps) if self.gaps else math.nan

    def share_above(self, threshold: float) -> float:
        return sum(1 for g in self.gaps if g > threshold) / len(self.gaps) if self.gaps else 0.0


@dataclass
class GapResult:
    clusters: int
    infeasible: int  # clusters where not even the oracle has a plan
    exact: dict[Policy, GapStats]
    estimated: dict[Policy, GapStats]
    workers_mean: float
    small_data: int  # clusters with |M| <= 200


def _score(
    cluster: ClusterSpec,
    model: PerformanceModel,
    truth: DeviceCatalog,
    stats: dict[Policy, GapStats],
) -> bool:
    """Plan with every compared policy and the oracle on ``model``; False if no oracle plan."""
    oracle = shard_policy(Policy.ORACLE)(cluster, model)
    if not oracle.feasible:
        return False
    best = evaluate_plan(cluster, oracle, truth).total_cost_s
    for policy in COMPARED:
        plan = shard_policy(policy)(cluster, model)
        if not plan.feasible:
            stats[policy].no_plan += 1
            continue
        scored = evaluate_plan(cluster, plan, truth)
        stats[policy].batch_above_shard += int(
            any(w.batch_size > w.shard for w in plan.workers if w.selected)
        )
        stats[policy].gaps.append(scored.total_cost_s / best - 1.0)
        stats[policy].violations += int(scored.violations > 0)
    return True


def run_gaps(n_clusters: int, noise: EstimatorNoise, margin: float, seed: int) -> GapResult:
    """Both settings on ``n_clusters`` random clusters drawn from ``seed``."""
    truth = DeviceCatalog()
    rng = np.random.default_rng(seed)
    exact = {p: GapStats() for p in COMPARED}
    estimated = {p: GapStats() for p in COMPARED}
    infeasible = small = workers = 0
    for k in range(n_clusters):
        cluster = random_oracle_cluster(rng, truth=truth)
        workers += len(cluster.workers)
        small += int(cluster.dataset_size <= 200)
        if not _score(cluster.model_copy(update={"deadline_margin": 0.0}), truth, truth, exact):
            infeasible += 1
            continue
        noisy = NoisyModel(truth, noise, seed=seed + k)
        _score(cluster.model_copy(update={"deadline_margin": margin}), noisy, truth, estimated)
    return GapResult(n_clusters, infeasible, exact, estimated, workers / n_clusters, small)
