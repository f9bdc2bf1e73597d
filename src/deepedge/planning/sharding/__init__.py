"""Deep-Edge sharding: which workers train, on what share of the data, at what batch size.

A sharding policy is a pure function ``(cluster, model) -> ShardPlan``
(:class:`ShardPolicy`): it decides from the estimates of ``model`` (never the ground truth)
and names why each left-out worker is out. Every caller (the CLI, the benchmarks, the job
service, the runtime's re-planning) picks its policy by name from :data:`SHARD_POLICIES`;
the runtime holds it as a :class:`Planner`, the policy bound to where its estimates come
from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from deepedge.core.registry import look_up
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.deep_edge import plan_shards
from deepedge.planning.sharding.deep_edge_plus import plan_deep_edge_plus
from deepedge.planning.sharding.fair import plan_fair
from deepedge.planning.sharding.oracle import plan_oracle
from deepedge.planning.sharding.plan import Policy, ShardPlan
from deepedge.planning.sharding.spec import ClusterSpec


class ShardPolicy(Protocol):
    def __call__(self, cluster: ClusterSpec, model: PerformanceModel) -> ShardPlan: ...


SHARD_POLICIES: Mapping[Policy, ShardPolicy] = {
    Policy.DEEP_EDGE: plan_shards,  # Algorithm 1, the paper's policy
    Policy.DEEP_EDGE_PLUS: plan_deep_edge_plus,  # deadline-aware batches, by Total_cost
    Policy.FAIR: plan_fair,  # equal shards at max batch: the paper's baseline
    Policy.ORACLE: plan_oracle,  # exact by Total_cost, N <= 6
}


def shard_policy(name: Policy | str) -> ShardPolicy:
    """The policy called ``name``; an unknown name is bad input."""
    return look_up(SHARD_POLICIES, Policy, name, "sharding policy", "policy")


@dataclass(frozen=True)
class Planner:
    """``cluster -> plan``: a sharding policy bound to its estimates, as the runtime re-plans.

    ``estimates(cluster)`` is the performance model the policy decides from for that cluster
    (the catalog for its parameter server's device seen through noise, or learned models);
    the cluster changes when workers fail or nodes are lost, so the model is asked each time.
    """

    policy: ShardPolicy
    estimates: Callable[[ClusterSpec], PerformanceModel]

    def __call__(self, cluster: ClusterSpec) -> ShardPlan:
        return self.policy(cluster, self.estimates(cluster))
