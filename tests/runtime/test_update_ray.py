"""Async PS on Ray: convex convergence, the plan's shards and batches, failures and strikes."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest
from torch import nn

from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.stream import load_digits_images
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.datastore import DataStore
from deepedge.runtime.training.monitor import (
    PARAMETER_SERVER_ID,
    FailureKind,
    StrikeBook,
    UpdateStatus,
)
from deepedge.runtime.training.parameter_server import ParameterServer
from deepedge.runtime.training.testbed import fair_planner, paper_testbed
from deepedge.runtime.training.update import (
    FaultInjection,
    PushTransport,
    UpdateConfig,
    UpdateResult,
    run_model_update,
)
from deepedge.runtime.training.worker import LossKind, TrainingWorker

pytestmark = pytest.mark.ray

tiny_factory = functools.partial(make_edge_model, 10, 8, 2, 0)


def _testbed_plan(selected: dict[str, tuple[int, int]]) -> ShardPlan:
    """A plan over the paper testbed's 120 samples: ``{worker: (shard, batch)}`` selected."""
    return ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=120,
        workers=[
            WorkerAssignment(id=w, selected=True, shard=selected[w][0], batch_size=selected[w][1])
            if w in selected
            else WorkerAssignment(id=w, selected=False, shard=0, batch_size=0)
            for w in ("tx2-1", "nano-1", "nano-2", "nano-3")
        ],
    )


@pytest.fixture(scope="module")
def tiny_digits() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits_images(8)
    return digits.images[:120], digits.labels[:120]


@pytest.mark.parametrize(
    ("n_workers", "push_window", "channel"), [(1, 0, False), (1, 0, True), (3, 1, True)]
)
def test_async_ps_converges_to_the_least_squares_optimum(
    ray_cluster: None, n_workers: int, push_window: int, channel: bool
) -> None:
    """Pushes as Ray calls or over the gradient channel (the update's default)."""
    import ray

    rng = np.random.default_rng(0)
    w_star = np.array([1.5, -2.0, 0.5, 3.0], dtype=np.float32)
    x = rng.normal(size=(240, 4)).astype(np.float32)
    y = x @ w_star
    factory = functools.partial(nn.Linear, 4, 1, bias=False)
    ps = (
        ray.remote(ParameterServer)
        .options(num_cpus=0)
        .remote(np.zeros(4, np.float32), lr=0.1, momentum=0.0)
    )
    store = ray.remote(DataStore).options(num_cpus=0).remote(x, y, 0)
    shards = {f"w{i}": 240 // n_workers for i in range(n_workers)}
    ray.get(store.assign.remote(shards))
    workers = [
        ray.remote(TrainingWorker)
        .options(num_cpus=0)
        .remote(wid, factory, 24, None, LossKind.REGRESSION, i, push_window=push_window)
        for i, wid in enumerate(shards)
    ]
    ray.get(
        [
            w.load_shard.remote(store.shard.remote(wid))
            for w, wid in zip(workers, shards, strict=True)
        ]
    )
    # enough epochs that the error left by asynchronous staleness (which depends on how the
    # workers happen to interleave) is far under the tolerance on a loaded machine too
    epochs = 16
    address = ray.get(ps.open_channel.remote()) if channel else None
    for epoch in range(1, epochs + 1):
        ray.get([w.run_epoch.remote(ps, epoch, address) for w in workers])
    version, weights = ray.get(ps.pull.remote())
    assert version == epochs * n_workers * math.ceil(240 / n_workers / 24)  # one push per batch
    np.testing.assert_allclose(weights, w_star, atol=1e-2)
    for handle in [*workers, ps, store]:
        ray.kill(handle)


def test_the_plans_shards_and_batches_are_the_ones_used_and_resume_continues(
    ray_cluster: None, tiny_digits: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    x, y = tiny_digits
    plan = _testbed_plan({"tx2-1": (70, 16), "nano-1": (20, 4), "nano-2": (30, 7)})

    def update(max_epochs: int, resume: bool) -> UpdateResult:
        return run_model_update(
            paper_testbed(120),
            (x, y),
            (x, y),
            tiny_factory,
            get_flat_weights(tiny_factory()),
            tmp_path,
            plan=plan,
            resume=resume,
            config=UpdateConfig(
                time_scale=0.0, stopping=StoppingRule(min_epochs=2, max_epochs=max_epochs)
            ),
        )

    first = update(2, resume=False)
    used = {s.worker_id: (s.samples, s.batch_size, s.steps) for s in first.epochs[0].workers}
    assert used == {
        "tx2-1": (70, 16, math.ceil(70 / 16)),
        "nano-1": (20, 4, 5),
        "nano-2": (30, 7, math.ceil(30 / 7)),
    }
    assert len(first.accuracies) == 2
    assert first.ps_version == 2 * (5 + 5 + 5)  # one push per batch
    assert (tmp_path / "ps-checkpoint.npz").exists()
    # a later update with resume=True continues from the checkpoint: one more epoch
    resumed = update(3, resume=True)
    assert len(resumed.accuracies) == 3
    assert resumed.accuracies[:2] == first.accuracies
    assert resumed.ps_version == first.ps_version + (5 + 5 + 5)
    assert any("resuming" in e.message for e in resumed.events)


@pytest.mark.slow
def test_killed_worker_restarts_and_third_strike_excludes(
    ray_cluster: None, tiny_digits: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    x, y = tiny_digits
    full = paper_testbed(120)
    cluster = full.model_copy(update={"workers": full.workers[:2]})  # tx2-1, nano-1
    # nano-1 was interrupted twice in earlier updates (the caller keeps the strike book):
    # one more crash is its third strike. Two launches instead of four keep this cheap.
    strikes = StrikeBook({"nano-1": 2})
    result = run_model_update(
        cluster,
        (x, y),
        (x, y),
        tiny_factory,
        get_flat_weights(tiny_factory()),
        tmp_path,
        planner=fair_planner(0.0),
        strikes=strikes,
        config=UpdateConfig(
            time_scale=0.0,
            stopping=StoppingRule(min_epochs=2, max_epochs=2),
            faults=(FaultInjection("nano-1", after_steps=1, times=1),),
        ),
    )
    assert result.restarts == 1
    assert [(f.worker_id, f.strikes, f.excluded) for f in result.failures] == [("nano-1", 3, True)]
    assert all(f.kind is FailureKind.PROCESS_DIED for f in result.failures)
    assert result.strikes == {"nano-1": 3} == strikes.as_dict()
    assert result.excluded == ("nano-1",)
    assert [p.selected_ids for p in result.plans] == [["tx2-1", "nano-1"], ["tx2-1"]]
    statuses = [e.status for e in result.events]
    assert statuses.count(UpdateStatus.RESTARTING) == 1
    assert statuses[-1] is UpdateStatus.COMPLETED
    assert len(result.accuracies) == 2


@pytest.mark.parametrize("transport", [PushTransport.CHANNEL, PushTransport.RAY_CALL])
def test_a_dead_parameter_server_restarts_the_update_without_a_strike(
    ray_cluster: None,
    tiny_digits: tuple[np.ndarray, np.ndarray],
    tmp_path: Path,
    transport: PushTransport,
) -> None:
    x, y = tiny_digits
    plan = _testbed_plan({"tx2-1": (60, 12), "nano-1": (60, 12)})
    result = run_model_update(
        paper_testbed(120),
        (x, y),
        (x, y),
        tiny_factory,
        get_flat_weights(tiny_factory()),
        tmp_path,
        plan=plan,  # no planner: the restart keeps the plan, since no worker failed
        resume=False,
        config=UpdateConfig(
            time_scale=0.0,
            stopping=StoppingRule(min_epochs=3, max_epochs=3),
            transport=transport,
            faults=(FaultInjection(PARAMETER_SERVER_ID, after_steps=15),),  # mid epoch 2
        ),
    )
    assert result.restarts == 1
    assert [(f.worker_id, f.kind, f.strikes) for f in result.failures] == [
        (PARAMETER_SERVER_ID, FailureKind.PS_DIED, 0)
    ]
    assert result.strikes == {} and result.excluded == ()
    assert [p.selected_ids for p in result.plans] == [["tx2-1", "nano-1"]] * 2
    assert len(result.accuracies) == 3  # epoch 1 from the checkpoint, then 2 and 3 again
    assert [e.status for e in result.events][-1] is UpdateStatus.COMPLETED
