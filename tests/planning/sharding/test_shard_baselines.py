"""The fair baseline and the exact oracle."""

from __future__ import annotations

import pytest
from _shard_cases import cluster, sift, worker

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding.cost_model import evaluate_plan
from deepedge.planning.sharding.deep_edge import plan_shards
from deepedge.planning.sharding.fair import plan_fair
from deepedge.planning.sharding.oracle import MAX_ORACLE_WORKERS, plan_oracle
from deepedge.planning.sharding.plan import ExclusionReason, Policy

TRUTH = DeviceCatalog()


@pytest.mark.parametrize("dataset_size", [3, 1000, 3855])
def test_fair_gives_equal_shards_at_max_batch_to_every_worker(dataset_size: int) -> None:
    c = cluster(
        [
            worker("a"),
            worker("b", "jetson-nano", mem=0.5),
            worker("c", "jetson-nano", cpu=0.8, apps=[sift()]),
        ],
        dataset_size,
    )
    result = plan_fair(c, TRUTH)
    shards = list(result.shards.values())
    assert sum(shards) == dataset_size and max(shards) - min(shards) <= 1
    assert result.policy is Policy.FAIR
    for w, spec in zip(result.workers, c.workers, strict=True):
        expected = TRUTH.max_batch_size(
            spec.device.value, spec.state.to_node_state(), spec.mem_capacity_mb, 4, 64
        )
        assert w.batch_size == expected


def test_fair_is_blind_to_deadlines_and_deep_edge_is_not() -> None:
    c = cluster([worker("a"), worker("c", "jetson-nano", cpu=0.8, apps=[sift()])], 1000)
    fair = evaluate_plan(c, plan_fair(c, TRUTH), TRUTH)
    deep_edge = evaluate_plan(c, plan_shards(c, TRUTH), TRUTH)
    assert fair.violations == 1
    assert deep_edge.violations == 0


def test_fair_still_skips_a_worker_that_cannot_fit_a_batch() -> None:
    c = cluster([worker("a"), worker("full", "jetson-nano", mem=0.8)], 10)
    result = plan_fair(c, TRUTH)
    assert result.shards == {"a": 10, "full": 0}


def test_oracle_matches_or_beats_deep_edge_on_the_example() -> None:
    c = cluster(
        [
            worker("tx2"),
            worker("n1", "jetson-nano", cpu=0.3),
            worker("n2", "jetson-nano", gpu=0.9, mem=0.55),
            worker("n3", "jetson-nano", cpu=0.75, apps=[sift()]),
        ],
        3855,
    )
    oracle = plan_oracle(c, TRUTH)
    deep_edge = plan_shards(c, TRUTH)
    assert oracle.policy is Policy.ORACLE
    assert oracle.total_cost_s is not None and deep_edge.total_cost_s is not None
    assert oracle.total_cost_s <= deep_edge.total_cost_s + 1e-9
    n3 = next(w for w in oracle.workers if w.id == "n3")
    assert n3.exclusion is ExclusionReason.DEADLINE


def test_oracle_prefers_dropping_a_harmful_worker() -> None:
    slow = worker("slow", "raspberry-pi-4", cpu=0.6, min_batch=1, max_batch=1)
    result = plan_oracle(cluster([worker("a"), worker("b"), slow], 5000), TRUTH)
    slow_row = next(w for w in result.workers if w.id == "slow")
    assert slow_row.exclusion is ExclusionReason.NOT_IN_OPTIMUM


def test_oracle_refuses_large_clusters() -> None:
    c = cluster([worker(f"w{i}") for i in range(MAX_ORACLE_WORKERS + 1)], 1000)
    with pytest.raises(InvalidInputError, match="at most"):
        plan_oracle(c, TRUTH)
