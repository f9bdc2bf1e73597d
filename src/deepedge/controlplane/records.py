"""Frozen records of deployments, model versions, windows and decisions (never ORM rows)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, NewType

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.learning.trigger import TriggerKind as TriggerKind
from deepedge.service.records import JobId, TenantId

DeploymentId = NewType("DeploymentId", str)


class EventKind(enum.StrEnum):
    """What the control plane decided; every decision is one event (a ``move`` is the data
    plane's, recorded by the control loop: :mod:`deepedge.controlplane.serving_moves`)."""

    CREATED = "created"
    TRIGGER = "trigger"
    JOB_SUBMITTED = "job-submitted"
    JOB_FAILED = "job-failed"
    VERSION_REGISTERED = "version-registered"
    GATE_PASSED = "gate-passed"
    GATE_FAILED = "gate-failed"
    CANARY_STARTED = "canary-started"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled-back"
    CANCELLED = "cancelled"  # a version on its way to a verdict that no longer gets one
    ROLLBACK_REQUESTED = "rollback-requested"
    UPDATE_REQUESTED = "update-requested"
    STOPPED = "stopped"
    ALLOCATION = "allocation"
    PLACEMENT = "placement"
    MOVE = "move"  # the data plane moved replicas off a node not placeable (its cause, from, to)
    ERROR = "error"  # a step of the loop failed (said once per distinct cause)
    UNDECIDED = "undecided"  # a window whose evidence decided nothing (said once a streak)
    SERVING = "serving"  # the data plane serves it, or it waits for capacity (and why)


@dataclass(frozen=True)
class DeploymentRecord:
    id: DeploymentId
    tenant_id: TenantId
    name: str
    spec: DeploymentSpec
    status: DeploymentStatus
    version: int
    created_at: float
    updated_at: float
    serving_version: int | None
    canary_version: int | None
    previous_version: int | None
    window: int
    next_window_at: float
    last_update_window: int | None
    samples_since_update: int
    canary_windows_done: int
    update_requested: bool
    current_job_id: JobId | None
    last_accuracy: float | None

    @classmethod
    def from_row(cls, row: Any) -> DeploymentRecord:
        return cls(
            id=DeploymentId(row.id),
            tenant_id=TenantId(row.tenant_id),
            name=row.name,
            spec=DeploymentSpec.model_validate_json(row.spec_json),
            status=DeploymentStatus(row.status),
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
            serving_version=row.serving_version,
            canary_version=row.canary_version,
            previous_version=row.previous_version,
            window=row.window,
            next_window_at=row.next_window_at,
            last_update_window=row.last_update_window,
            samples_since_update=row.samples_since_update,
            canary_windows_done=row.canary_windows_done,
            update_requested=bool(row.update_requested),
            current_job_id=JobId(row.current_job_id) if row.current_job_id else None,
            last_accuracy=row.last_accuracy,
        )


DATA_SEVERITY = "data_severity"  # a version's metric: the mean drift severity of its data
GATE_DIFF_LOW = "gate_diff_low"  # and: the lower end of its gate's interval against its rival
GATE_ACCURACY = "gate_accuracy"  # and: its accuracy on its gate's held-out samples
PARENT_GATE_ACCURACY = "parent_gate_accuracy"  # and: its rival's on the same samples
RECOVERY_UPDATE = "recovery_update"  # and: 1 for an update a drop or a follow-up started


@dataclass(frozen=True)
class ModelVersion:
    deployment_id: DeploymentId
    number: int
    parent: int | None
    replaced: int | None  # the version this one took over from when it started serving
    status: VersionStatus
    job_id: JobId | None
    data_windows: tuple[int, ...]
    metrics: dict[str, float]
    note: str
    windows_served: int
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: Any) -> ModelVersion:
        return cls(
            deployment_id=DeploymentId(row.deployment_id),
            number=row.number,
            parent=row.parent_number,
            replaced=row.replaced_number,
            status=VersionStatus(row.status),
            job_id=JobId(row.job_id) if row.job_id else None,
            data_windows=tuple(json.loads(row.data_windows_json)),
            metrics=dict(json.loads(row.metrics_json)),
            note=row.note,
            windows_served=row.windows_served,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


@dataclass(frozen=True)
class WindowPoint:
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
    def from_row(cls, row: Any) -> WindowPoint:
        return cls(
            window=row.window,
            at=row.at,
            due_at=row.due_at,
            served_version=row.served_version,
            accuracy=row.accuracy,
            canary_version=row.canary_version,
            canary_accuracy=row.canary_accuracy,
            previous_version=row.previous_version,
            previous_accuracy=row.previous_accuracy,
            samples=row.samples,
            trigger=TriggerKind(row.trigger),
            severity=row.severity,
        )


@dataclass(frozen=True)
class Event:
    kind: EventKind
    message: str
    window: int | None = None
    version: int | None = None
    job_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    seq: int = -1  # assigned by the store
    at: float = 0.0  # assigned by the store

    @classmethod
    def from_row(cls, row: Any) -> Event:
        return cls(
            kind=EventKind(row.kind),
            message=row.message,
            window=row.window,
            version=row.version,
            job_id=row.job_id,
            detail=dict(json.loads(row.detail_json)),
            seq=row.seq,
            at=row.at,
        )
