"""The testbed's planners are the registry's policies deciding on the noisy catalog."""

from __future__ import annotations

import pytest

from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import NoisyModel
from deepedge.planning.sharding import SHARD_POLICIES
from deepedge.planning.sharding.plan import Policy
from deepedge.runtime.training.testbed import deep_edge_planner, fair_planner, paper_testbed


@pytest.mark.parametrize(
    ("make", "policy"), [(deep_edge_planner, Policy.DEEP_EDGE), (fair_planner, Policy.FAIR)]
)
@pytest.mark.parametrize("noise", [0.0, 0.2])
def test_a_testbed_planner_is_its_policy_on_the_noisy_catalog(make, policy, noise) -> None:
    cluster = paper_testbed(3855)
    plan = make(noise, seed=3)(cluster)
    catalog = DeviceCatalog(cluster.parameter_server.device)
    assert plan.policy is policy
    assert plan == SHARD_POLICIES[policy](cluster, NoisyModel(catalog, noise, 3))


def test_the_estimates_follow_the_surviving_workers() -> None:
    cluster = paper_testbed(3855)
    survivors = cluster.model_copy(update={"workers": cluster.workers[1:]})
    plan = deep_edge_planner(0.0)(survivors)
    assert {w.id for w in plan.workers} == {w.id for w in survivors.workers}
    assert sum(plan.shards.values()) == 3855
