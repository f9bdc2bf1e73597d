"""Model updates on the emulated paper testbed (1 TX2 + 3 Nano workers, a Pi 4 parameter
server: :func:`~deepedge.runtime.training.testbed.paper_testbed`), as the update and workload
benchmarks run them: one update with its checkpoints in a temporary folder, the Deep-Edge
plan's speedup over equal shards, and the plan that puts a whole dataset on one worker.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch import nn

from deepedge.learning.convergence import StoppingRule
from deepedge.perfmodel.catalog import DeviceCatalog, ModelCost
from deepedge.planning.sharding import Planner
from deepedge.planning.sharding.cost_model import evaluate_plan
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.testbed import deep_edge_planner, fair_planner, paper_testbed
from deepedge.runtime.training.update import UpdateConfig, UpdateResult, run_model_update

Data = tuple[np.ndarray, np.ndarray]
Factory = Callable[[], nn.Module]


def run_update(
    data: Data,
    val: Data,
    factory: Factory,
    weights: np.ndarray,
    config: UpdateConfig,
    *,
    planner: Planner | None = None,
    plan: ShardPlan | None = None,
    catalog: DeviceCatalog | None = None,
) -> UpdateResult:
    """One update on the emulated paper testbed, checkpoints in a temporary folder."""
    with tempfile.TemporaryDirectory() as ckpt:
        return run_model_update(
            paper_testbed(len(data[1])),
            data,
            val,
            factory,
            weights,
            Path(ckpt),
            plan=plan,
            planner=planner,
            config=config,
            resume=False,
            catalog=catalog,
        )


def one_worker_plan(samples: int, batch: int) -> ShardPlan:
    """Every sample on the TX2, at ``batch``; the Nanos idle (the parameter server's
    overhead measured on one worker)."""
    return ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=samples,
        workers=[WorkerAssignment(id="tx2-1", selected=True, shard=samples, batch_size=batch)]
        + [
            WorkerAssignment(id=w, selected=False, shard=0, batch_size=0)
            for w in ("nano-1", "nano-2", "nano-3")
        ],
    )


def measure_speedup(
    factory: Factory,
    data: Data,
    val: Data,
    weights: np.ndarray,
    time_scale: float,
    epochs: int,
    cost: ModelCost | None = None,
) -> dict[str, float]:
    """Measured epoch time of the Deep-Edge plan vs equal shards on the emulated testbed,
    both planned and paced with the catalog of the workload's ``cost`` (None: the
    catalog's reference model, the digits CNN).

    ``speedup`` = median epoch wall time of the fair plan / of the Deep-Edge plan;
    ``model_speedup`` the same ratio of the catalog's ground truth (``evaluate_plan``).
    """
    cluster = paper_testbed(len(data[1]))
    catalog = DeviceCatalog(cluster.parameter_server.device, cost)
    fixed = StoppingRule(min_epochs=2, max_epochs=epochs, min_gain=0.0)
    config = UpdateConfig(time_scale=time_scale, stopping=fixed)
    out: dict[str, float] = {}
    for name, planner in (
        ("deep-edge", deep_edge_planner(model_cost=cost)),
        ("fair", fair_planner(model_cost=cost)),
    ):
        result = run_update(data, val, factory, weights, config, planner=planner, catalog=catalog)
        truth = evaluate_plan(cluster, result.plan, catalog)
        out[f"{name}_epoch_s"] = statistics.median(e.wall_s for e in result.epochs)
        out[f"{name}_model_epoch_s"] = truth.epoch_time_s * time_scale
        out[f"{name}_violations"] = truth.violations
        out[f"{name}_overruns"] = sum(w.overruns for e in result.epochs for w in e.workers)
        out[f"{name}_steps"] = sum(w.steps for e in result.epochs for w in e.workers)
        out[f"{name}_workers"] = len(result.plan.selected_ids)
        out[f"{name}_peak_mem_mb"] = result.peak_rss_mb
    out["speedup"] = out["fair_epoch_s"] / out["deep-edge_epoch_s"]
    out["model_speedup"] = out["fair_model_epoch_s"] / out["deep-edge_model_epoch_s"]
    return out
