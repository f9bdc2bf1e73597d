"""Algorithm 1 on hand-built clusters whose answer is known."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from _shard_cases import cluster, sift, worker

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InfeasibleError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.noisy import NoisyModel
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding.deep_edge import plan_shards
from deepedge.planning.sharding.plan import ExclusionReason, Policy
from deepedge.planning.sharding.spec import ClusterSpec

TRUTH = DeviceCatalog()
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.json"


@pytest.mark.parametrize("dataset_size", [2, 999, 1000, 3855])
def test_two_identical_workers_split_evenly(dataset_size: int) -> None:
    c = cluster([worker("a"), worker("b")], dataset_size)
    result = plan_shards(c, TRUTH)
    a, b = result.shards["a"], result.shards["b"]
    assert a + b == dataset_size
    assert abs(a - b) <= 1
    assert result.policy is Policy.DEEP_EDGE and result.feasible


def test_faster_worker_gets_the_larger_shard_in_proportion() -> None:
    c = cluster([worker("tx2", "jetson-tx2"), worker("nano", "jetson-nano")], 3855)
    result = plan_shards(c, TRUTH)
    rows = {w.id: w for w in result.workers}
    assert result.shards["tx2"] > result.shards["nano"]
    # proportional split: both finish within one sample's time of each other
    t_tx2, t_nano = rows["tx2"].t_total_s_per_sample, rows["nano"].t_total_s_per_sample
    assert t_tx2 is not None and t_nano is not None
    gap = abs(result.shards["tx2"] * t_tx2 - result.shards["nano"] * t_nano)
    assert gap <= max(t_tx2, t_nano) + 1e-9


def test_worker_whose_app_would_miss_its_deadline_is_excluded_with_the_app_named() -> None:
    c = cluster(
        [
            worker("ok", apps=[sift("sift-ok")]),
            worker("busy", "jetson-nano", cpu=0.75, gpu=0.1, apps=[sift("sift-busy")]),
        ],
        1000,
    )
    result = plan_shards(c, TRUTH)
    busy = next(w for w in result.workers if w.id == "busy")
    assert not busy.selected and busy.shard == 0 and busy.batch_size == 0
    assert busy.exclusion is ExclusionReason.DEADLINE
    assert busy.blocker is not None and busy.blocker.app == "sift-busy"
    assert busy.blocker.pressure_s > busy.blocker.deadline_s
    assert result.shards["ok"] == 1000


def test_deadline_margin_excludes_a_worker_close_to_its_deadline() -> None:
    near = worker("near", "jetson-nano", cpu=0.55, gpu=0.1, apps=[sift("s")])
    relaxed = plan_shards(cluster([worker("a"), near], 1000), TRUTH)
    strict = plan_shards(cluster([worker("a"), near], 1000, deadline_margin=0.2), TRUTH)
    assert relaxed.shards["near"] > 0
    assert strict.shards["near"] == 0


def test_worker_without_memory_for_the_minimum_batch_is_excluded() -> None:
    c = cluster([worker("a"), worker("full", "jetson-nano", mem=0.8)], 500)
    result = plan_shards(c, TRUTH)
    full = next(w for w in result.workers if w.id == "full")
    assert full.exclusion is ExclusionReason.MEMORY
    assert result.shards == {"a": 500, "full": 0}


def test_slowest_worker_is_dropped_when_that_makes_the_epoch_faster() -> None:
    """A Pi 4 at batch 1 floods the parameter server with updates and adds little compute."""
    slow = worker("slow", "raspberry-pi-4", cpu=0.6, min_batch=1, max_batch=1)
    result = plan_shards(cluster([worker("a"), worker("b"), slow], 5000), TRUTH)
    dropped = next(w for w in result.workers if w.id == "slow")
    assert dropped.exclusion is ExclusionReason.SLOWER_WITH_IT
    assert result.shards == {"a": 2500, "b": 2500, "slow": 0}


def test_slow_but_useful_worker_is_kept() -> None:
    slow = worker("slow", "raspberry-pi-4", cpu=0.6, min_batch=4, max_batch=4)
    result = plan_shards(cluster([worker("a"), worker("b"), slow], 5000), TRUTH)
    assert 0 < result.shards["slow"] < result.shards["a"]


def test_batch_is_the_max_batch_that_fits_memory() -> None:
    c = cluster([worker("a", "jetson-nano", mem=0.5)], 2000)
    expected = TRUTH.max_batch_size("jetson-nano", c.workers[0].state.to_node_state(), 3600, 4, 64)
    assert plan_shards(c, TRUTH).batch_sizes["a"] == expected


def test_infeasible_cluster_is_a_result_naming_every_blocker() -> None:
    c = cluster(
        [
            worker("n1", "jetson-nano", cpu=0.75, gpu=0.1, apps=[sift("cam-1")]),
            worker("n2", "jetson-nano", cpu=0.8, gpu=0.1, apps=[sift("cam-2")]),
        ],
        100,
    )
    result = plan_shards(c, TRUTH)
    assert not result.feasible
    assert result.epoch_time_s is None and all(w.shard == 0 for w in result.workers)
    summary = result.infeasibility_summary()
    assert "n1: cam-1" in summary and "n2: cam-2" in summary


def test_planner_does_not_mutate_its_input() -> None:
    c = cluster([worker("a"), worker("b", "jetson-nano", cpu=0.8, apps=[sift()])], 777)
    before = c.model_dump()
    plan_shards(c, TRUTH)
    assert c.model_dump() == before


def test_iteration_cap_tau_is_respected_and_result_still_sums() -> None:
    c = cluster([worker("a"), worker("b", "jetson-nano")], 3855, max_iterations=1, epsilon=1e-9)
    result = plan_shards(c, TRUTH)
    assert sum(result.shards.values()) == 3855
    # one inner iteration per outer iteration: the full set, then the set without the slowest
    assert result.iterations == 2


def test_predicted_epoch_time_is_max_of_worker_epoch_times_and_total_cost_adds_overheads() -> None:
    c = cluster(
        [worker("a", transfer_s_per_sample=0.01, init_s=5.0), worker("b", "jetson-nano")],
        1000,
        num_epochs=3,
    )
    result = plan_shards(c, TRUTH)
    epochs = [w.epoch_time_s for w in result.workers if w.epoch_time_s is not None]
    assert result.epoch_time_s == pytest.approx(max(epochs))
    a = next(w for w in result.workers if w.id == "a")
    assert a.epoch_time_s is not None and result.total_cost_s is not None
    assert result.total_cost_s >= a.shard * 0.01 + 5.0 + 3 * a.epoch_time_s - 1e-9


def test_planner_works_from_noisy_estimates_and_still_sums() -> None:
    c = ClusterSpec.model_validate_json(EXAMPLE.read_text())
    for seed in range(5):
        result = plan_shards(c, NoisyModel(TRUTH, 0.1, seed=seed))
        assert sum(result.shards.values()) == c.dataset_size


def test_batch_is_capped_by_a_small_shard() -> None:
    """Line 6: b_i = min(GetMaxBatchSize, d_i); with |M| = 20 over two TX2s, b = d = 10."""
    result = plan_shards(cluster([worker("a"), worker("b")], 20), TRUTH)
    assert result.shards == {"a": 10, "b": 10}
    assert result.batch_sizes == {"a": 10, "b": 10}


class ScalarOnly:
    """A model with only the five Protocol methods (no vectorised update time)."""

    def __init__(self, inner: DeviceCatalog) -> None:
        self.inner = inner

    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float:
        return self.inner.est_compute_time_s(device, state, batch_size)

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float:
        return self.inner.est_update_time_s(device, state, batch_sizes, ps_state, n_workers)

    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState:
        return self.inner.est_state(device, initial, batch_size)

    def est_exec_time_s(self, device: str, app: str, state: NodeState) -> float:
        return self.inner.est_exec_time_s(device, app, state)

    def max_batch_size(
        self, device: str, initial: NodeState, mem_capacity_mb: float, lo: int, hi: int
    ) -> int:
        return self.inner.max_batch_size(device, initial, mem_capacity_mb, lo, hi)


def test_any_protocol_model_works_without_the_vectorised_extension() -> None:
    c = ClusterSpec.model_validate_json(EXAMPLE.read_text())
    scalar = ScalarOnly(TRUTH)
    assert isinstance(scalar, PerformanceModel)
    assert not hasattr(scalar, "est_update_times_s")
    assert plan_shards(c, scalar) == plan_shards(c, TRUTH)


def test_require_feasible_raises_infeasible_error_with_reasons() -> None:
    ok = plan_shards(cluster([worker("a")], 10), TRUTH)
    assert ok.require_feasible() is ok
    blocked = plan_shards(
        cluster([worker("n", "jetson-nano", cpu=0.8, gpu=0.1, apps=[sift("cam")])], 10), TRUTH
    )
    with pytest.raises(InfeasibleError) as exc:
        blocked.require_feasible()
    assert exc.value.reasons and exc.value.reasons[0].startswith("n: cam")
