"""The threads executor: the same update as on Ray, without Ray (plan, resume, failures).

These tests start no Ray (the last one excepted, marked: it runs both executors side by
side): the parameter server, the data store and the workers are objects of this process,
the workers' epochs threads of it (:mod:`deepedge.runtime.training.thread_launch`).
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import numpy as np
import pytest

from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.stream import load_digits_images
from deepedge.planning.sharding import Planner
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.training.emulation import emulated_devices
from deepedge.runtime.training.monitor import (
    PARAMETER_SERVER_ID,
    FailureKind,
    StatusLog,
    StrikeBook,
    UpdateStatus,
)
from deepedge.runtime.training.ps_link import LinkClosed
from deepedge.runtime.training.testbed import fair_planner, paper_testbed
from deepedge.runtime.training.thread_launch import ThreadLaunch
from deepedge.runtime.training.update import (
    FaultInjection,
    UpdateConfig,
    UpdateExecutor,
    UpdateResult,
    run_model_update,
)
from deepedge.runtime.training.update_epochs import EpochRun, FailureBook, WorkerFailure, _run_epoch
from deepedge.runtime.training.update_launch import FaultBudget, UpdateInputs
from deepedge.runtime.training.worker import WorkerEpochStats

tiny_factory = functools.partial(make_edge_model, 10, 8, 2, 0)
THREADS = UpdateExecutor.THREADS


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


def _update(
    data: tuple[np.ndarray, np.ndarray],
    folder: Path,
    epochs: int,
    *,
    plan: ShardPlan | None = None,
    planner: Planner | None = None,
    cluster: ClusterSpec | None = None,
    strikes: StrikeBook | None = None,
    faults: tuple[FaultInjection, ...] = (),
    resume: bool = True,
) -> UpdateResult:
    return run_model_update(
        cluster or paper_testbed(120),
        data,
        data,
        tiny_factory,
        get_flat_weights(tiny_factory()),
        folder,
        plan=plan,
        planner=planner,
        strikes=strikes,
        resume=resume,
        config=UpdateConfig(
            time_scale=0.0,
            stopping=StoppingRule(min_epochs=min(epochs, 3), max_epochs=epochs),
            executor=THREADS,
            faults=faults,
        ),
    )


def test_threads_train_the_plans_shards_and_batches_and_resume_continues(
    tiny_digits: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    plan = _testbed_plan({"tx2-1": (70, 16), "nano-1": (20, 4), "nano-2": (30, 7)})
    first = _update(tiny_digits, tmp_path, 2, plan=plan, resume=False)
    used = {s.worker_id: (s.samples, s.batch_size, s.steps) for s in first.epochs[0].workers}
    assert used == {
        "tx2-1": (70, 16, math.ceil(70 / 16)),
        "nano-1": (20, 4, 5),
        "nano-2": (30, 7, math.ceil(30 / 7)),
    }
    assert first.executor is THREADS
    assert first.ps_version == 2 * (5 + 5 + 5)  # one push per batch
    assert first.placements == ({"tx2-1": None, "nano-1": None, "nano-2": None,
                                 PARAMETER_SERVER_ID: None},)  # fmt: skip
    assert first.phases.train_s > 0 and first.phases.plan_s >= 0
    running = [e for e in first.events if e.status is UpdateStatus.RUNNING]
    assert running and running[0].data["executor"] == "threads"
    assert (tmp_path / "ps-checkpoint.npz").exists()
    resumed = _update(tiny_digits, tmp_path, 3, plan=plan, resume=True)
    assert len(resumed.accuracies) == 3
    assert resumed.accuracies[:2] == first.accuracies
    assert resumed.ps_version == first.ps_version + (5 + 5 + 5)


@pytest.mark.parametrize(
    ("prior", "restarts", "failures", "plans", "excluded"),
    [
        # nano-1 was interrupted twice in earlier updates: this crash is its third strike
        ({"nano-1": 2}, 1, [("nano-1", 3, True)], [["tx2-1", "nano-1"], ["tx2-1"]], ("nano-1",)),
        # a first strike: nano-1 stays in the re-plan
        ({}, 1, [("nano-1", 1, False)], [["tx2-1", "nano-1"]] * 2, ()),
    ],
)
def test_a_crashed_worker_thread_gets_a_strike_and_the_third_excludes_it(
    tiny_digits: tuple[np.ndarray, np.ndarray],
    tmp_path: Path,
    prior: dict[str, int],
    restarts: int,
    failures: list[tuple[str, int, bool]],
    plans: list[list[str]],
    excluded: tuple[str, ...],
) -> None:
    full = paper_testbed(120)
    strikes = StrikeBook(prior)
    result = _update(
        tiny_digits,
        tmp_path,
        2,
        cluster=full.model_copy(update={"workers": full.workers[:2]}),  # tx2-1, nano-1
        planner=fair_planner(0.0),
        strikes=strikes,
        faults=(FaultInjection("nano-1", after_steps=1, times=1),),
    )
    assert result.restarts == restarts
    assert [(f.worker_id, f.strikes, f.excluded) for f in result.failures] == failures
    assert all(f.kind is FailureKind.PROCESS_DIED for f in result.failures)
    assert "thread crashed" in result.failures[0].detail
    assert result.strikes == strikes.as_dict() == {"nano-1": failures[0][1]}
    assert result.excluded == excluded
    assert [p.selected_ids for p in result.plans] == plans
    assert [e.status for e in result.events][-1] is UpdateStatus.COMPLETED
    assert len(result.accuracies) == 2


def test_a_crashed_parameter_server_restarts_the_update_without_a_strike(
    tiny_digits: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    plan = _testbed_plan({"tx2-1": (60, 12), "nano-1": (60, 12)})
    result = _update(
        tiny_digits,
        tmp_path,
        3,
        plan=plan,  # no planner: the restart keeps the plan, since no worker failed
        resume=False,
        faults=(FaultInjection(PARAMETER_SERVER_ID, after_steps=15),),  # mid epoch 2
    )
    assert result.restarts == 1
    assert [(f.worker_id, f.kind, f.strikes) for f in result.failures] == [
        (PARAMETER_SERVER_ID, FailureKind.PS_DIED, 0)
    ]
    assert result.strikes == {} and result.excluded == ()
    assert [p.selected_ids for p in result.plans] == [["tx2-1", "nano-1"]] * 2
    assert len(result.accuracies) == 3  # epoch 1 from the checkpoint, then 2 and 3 again
    assert [e.status for e in result.events][-1] is UpdateStatus.COMPLETED


def test_a_worker_thread_that_misses_its_heartbeat_gets_a_strike_and_is_stopped(
    tiny_digits: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    plan = _testbed_plan({"tx2-1": (60, 12), "nano-1": (60, 12)})
    config = UpdateConfig(time_scale=0.0, executor=THREADS)
    model = tiny_factory()
    weights = get_flat_weights(model)
    inputs = UpdateInputs(tiny_digits, tiny_digits, tiny_factory, weights,
                          np.ones(weights.size, bool), tmp_path, config)  # fmt: skip
    devices = emulated_devices(paper_testbed(120), plan, 0.0)
    launch = ThreadLaunch()
    launch.start(inputs, plan, devices, FaultBudget(), 1)
    stuck = launch.workers["tx2-1"]  # the first worker: blamed whatever the other does
    train_epoch = stuck.train_epoch
    seen: list[Exception] = []

    def slow_epoch(link: object, epoch: int) -> WorkerEpochStats:
        time.sleep(1.0)  # a host too slow for the heartbeat; then its next step
        try:
            return train_epoch(link, epoch)  # type: ignore[arg-type]
        except LinkClosed as exc:
            seen.append(exc)
            raise

    stuck.train_epoch = slow_epoch  # type: ignore[method-assign]
    book = FailureBook(StrikeBook(), StatusLog())
    run = EpochRun(launch, model, tiny_digits, config, timeout_s=0.3, launch_no=1)
    try:
        with pytest.raises(WorkerFailure) as failure:
            _run_epoch(run, 1, book)
    finally:
        launch.kill()  # waits for the stuck thread to reach its next call of the PS
    assert (failure.value.event.worker_id, failure.value.event.kind) == (
        "tx2-1",
        FailureKind.MISSED_HEARTBEAT,
    )
    assert book.strikes.as_dict() == {"tx2-1": 1}
    assert [str(e) for e in seen] == ["the launch was stopped"]
    assert launch.ps is not None and launch.ps.checkpoint_dir is None  # retired: writes nothing


@pytest.mark.slow
@pytest.mark.ray
def test_threads_converge_like_ray_on_the_same_plan(ray_cluster: None, tmp_path: Path) -> None:
    """The same plan, data, seed and stop rule on both executors: both learn the digits, to
    accuracies within a few points of each other (asynchrony orders pushes differently)."""
    digits = load_digits_images(8)
    train = digits.images[:600], digits.labels[:600]
    validation = digits.images[600:1000], digits.labels[600:1000]
    plan = ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=600,
        workers=[WorkerAssignment(id=w, selected=True, shard=150, batch_size=16)
                 for w in ("tx2-1", "nano-1", "nano-2", "nano-3")],
    )  # fmt: skip
    factory = functools.partial(make_edge_model, 10, 8, seed=0)
    results = {
        kind: run_model_update(
            paper_testbed(600),
            train,
            validation,
            factory,
            get_flat_weights(factory()),
            tmp_path / kind.value,
            plan=plan,
            config=UpdateConfig(
                time_scale=0.0, executor=kind, stopping=StoppingRule(min_epochs=12, max_epochs=12)
            ),
        )
        for kind in UpdateExecutor
    }
    ray_acc = results[UpdateExecutor.RAY].final_accuracy
    threads_acc = results[THREADS].final_accuracy
    assert ray_acc > 0.8 and threads_acc > 0.8
    assert abs(ray_acc - threads_acc) < 0.06
    assert results[THREADS].ps_version == results[UpdateExecutor.RAY].ps_version == 12 * 4 * 10
