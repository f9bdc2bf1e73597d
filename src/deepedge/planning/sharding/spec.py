"""The input document of the Deep-Edge sharding planner (Sections III and IV-C2).

A :class:`ClusterSpec` holds the candidate workers ``W`` (device type, current state
``X_i``, memory capacity, batch bounds ``[b_min, b_max]``, per-sample transfer cost,
initialisation cost, latency-critical background apps with their deadlines ``delta_a``), the
parameter server's state ``X_ps``, the data set size ``|M|``, ``numEpoch`` and the stopping
rule of Algorithm 1 (``epsilon``, ``tau``). Validation rejects every malformed document with
the offending field named; the JSON Schema is exported to ``docs/schemas/``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.state import NodeState

WorkerId = Annotated[str, StringConstraints(min_length=1, max_length=128, strip_whitespace=True)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


MAX_DATASET_SIZE = 10**12
"""Largest |M|: the planners' float shares stay exact to well under one sample."""

MAX_COST_S = 1e9
"""Largest transfer cost per sample and initialisation time (about 32 years): with
|M| <= 10^12 and numEpoch <= MAX_EPOCHS every Total_cost stays a finite float."""

MAX_EPOCHS = 10**6


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class StateSpec(_Document):
    """Node state ``X = (cpu, gpu, mem)`` as utilisation fractions; gpu null without a GPU."""

    cpu_util: Fraction
    mem_util: Fraction
    gpu_util: Fraction | None = None

    def to_node_state(self) -> NodeState:
        return NodeState(cpu_util=self.cpu_util, mem_util=self.mem_util, gpu_util=self.gpu_util)


class BackgroundApp(_Document):
    """A latency-critical application ``a`` on a worker, with its deadline ``delta_a``."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    kind: AppKind
    deadline_s: float = Field(gt=0.0, description="delta_a: the most execution time allowed")


class WorkerSpec(_Document):
    """A candidate worker ``w_i``."""

    id: WorkerId
    device: DeviceType
    state: StateSpec
    mem_capacity_mb: float = Field(
        gt=0.0, description="most memory the node may have in use while it trains"
    )
    min_batch: int = Field(
        default=1, ge=1, le=MAX_DATASET_SIZE, description="b_min; at most the largest |M|"
    )
    max_batch: int = Field(
        default=64, ge=1, description="b_max; any size (GetMaxBatchSize bounds it too)"
    )
    transfer_s_per_sample: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_COST_S,
        description="transfer_i^ds: seconds to ship one sample here",
    )
    init_s: float = Field(default=0.0, ge=0.0, le=MAX_COST_S, description="Initialize_i, seconds")
    background_apps: list[BackgroundApp] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> WorkerSpec:
        if self.max_batch < self.min_batch:
            raise ValueError(f"max_batch {self.max_batch} < min_batch {self.min_batch}")
        if self.device.has_gpu and self.state.gpu_util is None:
            raise ValueError(f"{self.device.value} has a GPU: state.gpu_util is required")
        if not self.device.has_gpu and self.state.gpu_util is not None:
            raise ValueError(f"{self.device.value} has no GPU: state.gpu_util must be null")
        names = [a.name for a in self.background_apps]
        if len(set(names)) != len(names):
            raise ValueError("background app names must be unique on a worker")
        return self


class ParameterServerSpec(_Document):
    device: DeviceType = DeviceType.RASPBERRY_PI_4
    state: StateSpec
    node: WorkerId | None = Field(
        default=None,
        description="the deepedge node that hosts the PS on a live cluster (null: any node)",
    )


class ClusterSpec(_Document):
    """Everything Algorithm 1 needs: ``W``, ``X``, ``X_ps``, ``|M|``, numEpoch, eps, tau."""

    workers: list[WorkerSpec] = Field(min_length=1)
    parameter_server: ParameterServerSpec
    dataset_size: int = Field(
        ge=1, le=MAX_DATASET_SIZE, description="|M|: number of training samples"
    )
    num_epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS, description="numEpoch")
    epsilon: float = Field(default=1.0, gt=0.0, description="stop when ||D_new - D||_2 <= eps")
    max_iterations: int = Field(default=50, ge=1, description="tau: inner iteration cap")
    deadline_margin: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description=(
            "safety margin on estimated pressure: a worker stays only if "
            "pressure * (1 + margin) <= delta_a; 0 is the published rule. Deep-Edge+ and "
            "the oracle also require it at the state whose estimated memory change is "
            "(1 + margin) times larger"
        ),
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> ClusterSpec:
        ids = [w.id for w in self.workers]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"worker ids must be unique, repeated: {', '.join(dup)}")
        return self


def cluster_schema() -> dict[str, Any]:
    """JSON Schema of :class:`ClusterSpec` (committed as docs/schemas/shard-input)."""
    return ClusterSpec.model_json_schema()
