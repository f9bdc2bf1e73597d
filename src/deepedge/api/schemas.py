"""Response documents of the API (the request document is the job manifest itself)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from deepedge.service.records import CheckpointRecord, HistoryEntry, JobRecord
from deepedge.service.status import JobStatus


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class JobError(_Out):
    code: str
    message: str


class HistoryView(_Out):
    status: JobStatus
    at: float
    cause: str | None

    @classmethod
    def of(cls, entry: HistoryEntry) -> HistoryView:
        return cls(status=entry.status, at=entry.at, cause=entry.cause)


class CheckpointView(_Out):
    name: str
    size_bytes: int
    created_at: float

    @classmethod
    def of(cls, record: CheckpointRecord) -> CheckpointView:
        return cls(name=record.name, size_bytes=record.size_bytes, created_at=record.created_at)


class JobSummary(_Out):
    id: str
    name: str
    kind: str
    status: JobStatus
    created_at: float
    updated_at: float
    restarts: int
    error: JobError | None

    @classmethod
    def of(cls, job: JobRecord) -> JobSummary:
        # The record's fields are typed already (read back from the store): no re-validation.
        return cls.model_construct(**_summary_fields(job))


class JobView(JobSummary):
    manifest: dict[str, Any]
    history: list[HistoryView]
    checkpoints: list[CheckpointView]

    @classmethod
    def full(
        cls, job: JobRecord, history: list[HistoryEntry], checkpoints: list[CheckpointRecord]
    ) -> JobView:
        return cls(
            **_summary_fields(job),
            manifest=json.loads(job.manifest_json),
            history=[HistoryView.of(h) for h in history],
            checkpoints=[CheckpointView.of(c) for c in checkpoints],
        )


class JobList(_Out):
    """One page, newest first. The next page: ``?before=<next_before>&before_id=<next_before_id>``
    (keyset pagination on ``(created_at, id)``: jobs committed together share a timestamp)."""

    jobs: list[JobSummary]
    next_before: float | None
    next_before_id: str | None = None


class JobMetrics(_Out):
    job_id: str
    status: JobStatus
    restarts: int
    checkpoints: int
    samples: list[dict[str, Any]]


class Accepted(_Out):
    job_id: str
    status: JobStatus
    message: str


def _summary_fields(job: JobRecord) -> dict[str, Any]:
    error = (
        JobError.model_construct(code=job.error_code, message=job.error_message or "")
        if job.error_code is not None
        else None
    )
    return {
        "id": job.id,
        "name": job.name,
        "kind": job.kind,
        "status": job.status,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "restarts": job.restarts,
        "error": error,
    }
