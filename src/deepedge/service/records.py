"""Frozen records the store hands out (never ORM rows) and the typed ids they carry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NewType

from deepedge.service.disk_quota import DEFAULT_MAX_DISK_MB
from deepedge.service.status import JobStatus

JobId = NewType("JobId", str)
TenantId = NewType("TenantId", str)


@dataclass(frozen=True)
class Tenant:
    id: TenantId
    name: str
    max_active_jobs: int
    max_queued_jobs: int
    max_cores: float
    max_gpus: int
    uid: int = 0  # the unprivileged user its code runs as in the sandbox
    grants: tuple[str, ...] = ()  # host folders its sandboxes see, read-only
    max_disk_mb: int = DEFAULT_MAX_DISK_MB  # its folders of the data folder together

    @classmethod
    def from_row(cls, row: Any) -> Tenant:
        return cls(
            id=TenantId(row.id),
            name=row.name,
            max_active_jobs=row.max_active_jobs,
            max_queued_jobs=row.max_queued_jobs,
            max_cores=row.max_cores,
            max_gpus=row.max_gpus,
            uid=row.uid,
            grants=tuple(json.loads(row.grants_json or "[]")),
            max_disk_mb=row.max_disk_mb,
        )


@dataclass(frozen=True)
class JobRecord:
    id: JobId
    tenant_id: TenantId
    name: str
    kind: str
    manifest_json: str
    status: JobStatus
    version: int
    created_at: float
    updated_at: float
    error_code: str | None
    error_message: str | None
    requested_action: str | None
    restarts: int
    deploy_attempts: int
    next_attempt_at: float

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        return cls(
            id=JobId(row.id),
            tenant_id=TenantId(row.tenant_id),
            name=row.name,
            kind=row.kind,
            manifest_json=row.manifest_json,
            status=JobStatus(row.status),
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
            error_code=row.error_code,
            error_message=row.error_message,
            requested_action=row.requested_action,
            restarts=row.restarts,
            deploy_attempts=row.deploy_attempts,
            next_attempt_at=row.next_attempt_at,
        )


@dataclass(frozen=True)
class HistoryEntry:
    seq: int
    status: JobStatus
    cause: str | None
    at: float

    @classmethod
    def from_row(cls, row: Any) -> HistoryEntry:
        return cls(seq=row.seq, status=JobStatus(row.status), cause=row.cause, at=row.at)


@dataclass(frozen=True)
class LearnerRecord:
    job_id: JobId
    rank: int
    attempt: int
    pid: int
    pid_started_at: float
    started_at: float
    exit_code: int | None = None
    ended_at: float | None = None

    @classmethod
    def from_row(cls, row: Any) -> LearnerRecord:
        return cls(
            job_id=JobId(row.job_id),
            rank=row.rank,
            attempt=row.attempt,
            pid=row.pid,
            pid_started_at=row.pid_started_at,
            started_at=row.started_at,
            exit_code=row.exit_code,
            ended_at=row.ended_at,
        )


@dataclass(frozen=True)
class CheckpointRecord:
    name: str
    size_bytes: int
    created_at: float

    @classmethod
    def from_row(cls, row: Any) -> CheckpointRecord:
        return cls(name=row.name, size_bytes=row.size_bytes, created_at=row.created_at)
