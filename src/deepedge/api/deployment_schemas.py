"""Response and request documents of the deployment and model-registry endpoints.

The dashboard reads these shapes; they are published in the project notes and must only
grow (new fields), never change.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepedge.controlplane.records import (
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
    TriggerKind,
    WindowPoint,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus

MAX_WEIGHTS_B64 = 8 << 20


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class DeploymentSummary(_Out):
    id: str
    name: str
    status: DeploymentStatus
    workload: str
    update_policy: str
    nodes: list[str]
    serving_version: int | None
    canary_version: int | None
    window: int
    last_accuracy: float | None
    current_job_id: str | None
    created_at: float
    updated_at: float
    accuracy_threshold: float | None = None  # the trigger's: below it an update is due
    # the newest window with labelled samples (last_accuracy is None after one without)
    last_scored_window: int | None = None
    last_scored_accuracy: float | None = None
    last_scored_at: float | None = None

    @classmethod
    def of(cls, record: DeploymentRecord, scored: WindowPoint | None = None) -> DeploymentSummary:
        return cls(
            id=record.id,
            name=record.name,
            status=record.status,
            workload=record.spec.workload_name,
            update_policy=record.spec.update.policy.value,
            nodes=list(record.spec.target.nodes),
            serving_version=record.serving_version,
            canary_version=record.canary_version,
            window=record.window,
            last_accuracy=record.last_accuracy,
            current_job_id=record.current_job_id,
            created_at=record.created_at,
            updated_at=record.updated_at,
            accuracy_threshold=record.spec.trigger.accuracy_threshold,
            last_scored_window=None if scored is None else scored.window,
            last_scored_accuracy=None if scored is None else scored.accuracy,
            last_scored_at=None if scored is None else scored.at,
        )


class DeletedDeployment(DeploymentSummary):
    """A deleted deployment as it was last stored, and what went with it."""

    deleted_samples: int  # its samples removed from the site's sample store
    deleted_keys: int  # its inference keys, revoked ones too


class ModelVersionView(_Out):
    deployment: str
    version: int
    parent_version: int | None
    replaced_version: int | None
    status: VersionStatus
    job_id: str | None
    data_windows: list[int]
    metrics: dict[str, float]
    windows_served: int
    note: str
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, deployment: str, version: ModelVersion) -> ModelVersionView:
        return cls(
            deployment=deployment,
            version=version.number,
            parent_version=version.parent,
            replaced_version=version.replaced,
            status=version.status,
            job_id=version.job_id,
            data_windows=list(version.data_windows),
            metrics=version.metrics,
            windows_served=version.windows_served,
            note=version.note,
            created_at=version.created_at,
            updated_at=version.updated_at,
        )


class WindowView(_Out):
    window: int
    at: float
    due_at: float
    served_version: int | None
    accuracy: float | None
    canary_version: int | None
    canary_accuracy: float | None
    previous_version: int | None
    previous_accuracy: float | None
    samples: int
    trigger: TriggerKind
    severity: float

    @classmethod
    def of(cls, point: WindowPoint) -> WindowView:
        return cls(**point.__dict__)


class EventView(_Out):
    seq: int
    at: float
    window: int | None
    kind: EventKind
    version: int | None
    job_id: str | None
    message: str
    detail: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> EventView:
        return cls(
            seq=event.seq,
            at=event.at,
            window=event.window,
            kind=event.kind,
            version=event.version,
            job_id=event.job_id,
            message=event.message,
            detail=event.detail,
        )


class DeploymentView(DeploymentSummary):
    spec: dict[str, Any]
    versions: list[ModelVersionView]
    windows: list[WindowView]
    events: list[EventView]


class DeploymentList(_Out):
    deployments: list[DeploymentSummary]


class WindowList(_Out):
    deployment: str
    windows: list[WindowView]


class EventList(_Out):
    deployment: str
    events: list[EventView]


class VersionList(_Out):
    deployment: str | None = None
    versions: list[ModelVersionView]


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    to_version: int | None = Field(None, ge=1, description="default: the version replaced")
    reason: str | None = Field(None, max_length=500)


class VersionUpload(BaseModel):
    """A model trained elsewhere, base64-encoded: ``model_b64``, a model file (a
    ``torch.save`` of its ``state_dict`` with its buffers, or a TorchScript archive), or
    ``weights_b64``, its parameters as flat float32 little-endian (buffers: the serving
    version's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_b64: str | None = Field(None, min_length=4, max_length=MAX_WEIGHTS_B64)
    weights_b64: str | None = Field(None, min_length=4, max_length=MAX_WEIGHTS_B64)
    note: str = Field("registered by the operator", max_length=500)
    skip_gate: bool = False
    skip_canary: bool = False

    @model_validator(mode="after")
    def _one_model(self) -> VersionUpload:
        if (self.model_b64 is None) == (self.weights_b64 is None):
            raise ValueError("give exactly one of model_b64 and weights_b64")
        return self


class NodeAllocation(_Out):
    """A deployment's newest update allocation on a node: a Deep-Edge worker's shard and
    batch (``model-update``), or the edge server's GPU shares of one Ekya window
    (``ekya-window``: Thief's inference and retraining configurations and shares)."""

    deployment: str
    version: int | None
    window: int | None
    batch: int | None
    shard: int | None
    selected: bool
    policy: str = "model-update"
    inference_config: str | None = None
    inference_gpus: float | None = None
    retraining_config: str | None = None
    retraining_gpus: float | None = None
    gpus: float | None = None  # the edge server's


class WorkKind(enum.StrEnum):
    """What of the tenant's runs on a node, as the service knows it
    (:mod:`deepedge.api.node_work`)."""

    REPLICAS = "replicas"  # a deployment's serving replicas (where the data plane pins them)
    UPDATE_WORKER = "update-worker"  # a Deep-Edge worker of a running model-update job
    PARAMETER_SERVER = "parameter-server"  # the parameter server of a running model-update job
    WINDOW = "window"  # a running Ekya window's actors on its edge server
    LEARNER = "learner"  # a running job's learner, a Ray task pinned to the node


class NodeWork(_Out):
    """One thing of the tenant's on a node: ``deployment`` and ``job`` where it has them,
    ``version`` the version that replicas serve."""

    kind: WorkKind
    deployment: str | None = None
    job: str | None = None
    version: int | None = None


class NodeView(_Out):
    """A node of the site: emulated (the testbed's fixed scenario) or live (an agent of
    the service's Ray cluster, as its last report and Ray's node table say)."""

    name: str
    device: str
    role: str
    state: str  # "up"; a live node's registry status otherwise (lost, left, ...)
    emulated_utilisation: dict[str, float]
    deployments: list[str]
    canary: list[str]
    jobs: list[str]
    allocations: list[NodeAllocation]
    source: str = "emulated"  # or "live"
    utilisation: dict[str, float | None] | None = None  # live: measured (P95 of the period)
    age_s: float | None = None  # live: seconds since its last report
    apps: list[dict[str, Any]] = Field(default_factory=list)  # live: latency-critical apps
    labels: dict[str, str] = Field(default_factory=dict)  # live: its Ray node's labels
    ray_node_id: str | None = None
    resources: dict[str, float] | None = None  # live: Ray's totals (cpus, gpus, MiB)
    hostname: str | None = None  # live: the host its agent reports from
    address: str | None = None  # live: its Ray node's IP address
    lost_at: float | None = None  # live, lost: when the registry counted it lost (wall clock)
    work: list[NodeWork] = Field(default_factory=list)  # what runs on it (live nodes)


class NodeList(_Out):
    nodes: list[NodeView]
    cluster: str | None = None  # the Ray cluster's address (live nodes), else None
    taken_at: float | None = None  # when the live view was taken (wall clock)
    stale: bool = False  # the service's node watcher has not reached the cluster lately
