"""The emulated paper testbed and the planners the runtime re-plans with.

:func:`paper_testbed` is Deep-Edge's Section V-A cluster as a :class:`ClusterSpec`: one
Jetson TX2 and three Jetson Nano workers, each running a SIFT-like latency-critical task
with a 200 ms deadline, and a Raspberry Pi 4 parameter server (a second Pi is the data
store). The states are one fixed, documented scenario: the TX2 and one Nano nearly idle,
the two other Nanos at the initial GPU utilisations of the paper's Figure 4 (66 % and
88 %), the last one also CPU-loaded. It is an emulation: timings come from the analytic
device catalog, not from real boards.

:func:`deep_edge_planner` and :func:`fair_planner` return a
:class:`~deepedge.planning.sharding.Planner`: the policy of that name from
:data:`~deepedge.planning.sharding.SHARD_POLICIES` deciding on *estimates*
(:class:`CatalogEstimates`: the catalog seen through seeded multiplicative noise), never on the
ground truth that paces the emulated devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.perfmodel.catalog import DeviceCatalog, ModelCost
from deepedge.perfmodel.noisy import NoisyModel
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding import Planner, shard_policy
from deepedge.planning.sharding.plan import Policy
from deepedge.planning.sharding.spec import (
    BackgroundApp,
    ClusterSpec,
    ParameterServerSpec,
    StateSpec,
    WorkerSpec,
)

# (id, device, cpu, gpu, mem, memory capacity MB): the scenario of the module docstring
_TESTBED = (
    ("tx2-1", "jetson-tx2", 0.20, 0.10, 0.30, 7200.0),
    ("nano-1", "jetson-nano", 0.20, 0.10, 0.35, 3600.0),
    ("nano-2", "jetson-nano", 0.30, 0.66, 0.40, 3600.0),
    ("nano-3", "jetson-nano", 0.60, 0.88, 0.45, 3600.0),
)


def paper_testbed(dataset_size: int, num_epochs: int = 10) -> ClusterSpec:
    """1 TX2 + 3 Nano workers with SIFT apps (deadline 0.2 s) and a Pi 4 PS."""
    workers = [
        WorkerSpec(
            id=wid,
            device=DeviceType(device),
            state=StateSpec(cpu_util=cpu, gpu_util=gpu, mem_util=mem),
            mem_capacity_mb=cap,
            min_batch=4,
            max_batch=64,
            background_apps=[BackgroundApp(name=f"sift-{wid}", kind=AppKind.SIFT, deadline_s=0.2)],
        )
        for wid, device, cpu, gpu, mem, cap in _TESTBED
    ]
    return ClusterSpec(
        workers=workers,
        parameter_server=ParameterServerSpec(
            device=DeviceType("raspberry-pi-4"), state=StateSpec(cpu_util=0.2, mem_util=0.3)
        ),
        dataset_size=dataset_size,
        num_epochs=num_epochs,
    )


@dataclass(frozen=True)
class CatalogEstimates:
    """The estimates a testbed planner decides from: the catalog for the cluster's parameter
    server (and ``model_cost``'s model; None: the catalog's reference workload) seen through
    ``estimate_noise`` relative error, seeded."""

    estimate_noise: float = 0.05
    seed: int = 0
    model_cost: ModelCost | None = None

    def __call__(self, cluster: ClusterSpec) -> PerformanceModel:
        catalog = DeviceCatalog(cluster.parameter_server.device, self.model_cost)
        return NoisyModel(catalog, self.estimate_noise, self.seed)


def deep_edge_planner(
    estimate_noise: float = 0.05, seed: int = 0, model_cost: ModelCost | None = None
) -> Planner:
    """Algorithm 1 on the catalog's estimates (:class:`CatalogEstimates`)."""
    return Planner(
        shard_policy(Policy.DEEP_EDGE), CatalogEstimates(estimate_noise, seed, model_cost)
    )


def fair_planner(
    estimate_noise: float = 0.05, seed: int = 0, model_cost: ModelCost | None = None
) -> Planner:
    """The fair baseline: equal shards over all workers, each at its max batch."""
    return Planner(shard_policy(Policy.FAIR), CatalogEstimates(estimate_noise, seed, model_cost))
