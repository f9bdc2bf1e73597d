"""Inserting submitted jobs: the one write path of every submission (alone or in a batch).

A batch is decided in order inside ONE transaction, each submission as if it came alone
after the earlier ones: an idempotency key already used (in the store or earlier in the
batch) returns the first job (the API refuses a key reused with another manifest, 422;
the control plane relies on getting its first job back); a job over the tenant's
cores/GPUs, or over its queue limit counting the batch so far, is refused in its own
slot; the rest are inserted with their first history entry. The caller commits (and only
then acknowledges).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select

from deepedge.core.errors import DeepEdgeError, QuotaExceededError
from deepedge.service.manifest import JobManifest
from deepedge.service.records import JobRecord, Tenant, TenantId
from deepedge.service.status import TERMINAL, JobStatus
from deepedge.service.tables import HistoryRow, JobRow

JOBS, _HISTORY = JobRow.__table__, HistoryRow.__table__
_UNFINISHED = [s.value for s in JobStatus if s not in TERMINAL | {JobStatus.HALTED}]

# Built once with bound parameters (cheaper than building a statement per request).
_JOB_BY_KEY = select(JOBS).where(
    JOBS.c.tenant_id == bindparam("tenant_id"), JOBS.c.idempotency_key == bindparam("key")
)
_COUNT_UNFINISHED = (
    select(func.count())
    .select_from(JOBS)
    .where(
        JOBS.c.tenant_id == bindparam("tenant_id"),
        JOBS.c.status.in_(bindparam("statuses", expanding=True)),
    )
)
_INSERT_JOB, _INSERT_HISTORY = insert(JobRow), insert(HistoryRow)


class RowValues(dict[str, Any]):
    """Column values with attribute access, as :meth:`JobRecord.from_row` reads them."""

    def __getattr__(self, name: str) -> Any:
        return self[name]


@dataclasses.dataclass(frozen=True)
class Submission:
    """One job to submit: who, what, and the client's idempotency key (if any)."""

    tenant: Tenant
    manifest: JobManifest
    idempotency_key: str | None = None


def _new_job_values(
    tenant_id: TenantId, manifest: JobManifest, key: str | None, now: float
) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "tenant_id": tenant_id,
        "name": manifest.name,
        "kind": manifest.kind.value,
        "manifest_json": manifest.model_dump_json(by_alias=True),
        "status": JobStatus.QUEUED.value,
        "version": 0,
        "created_at": now,
        "updated_at": now,
        "error_code": None,
        "error_message": None,
        "idempotency_key": key,
        "requested_action": None,
        "restarts": 0,
        "deploy_attempts": 0,
        "next_attempt_at": 0.0,
    }


def insert_submissions(
    conn: Connection, submissions: list[Submission]
) -> list[tuple[JobRecord, bool] | DeepEdgeError]:
    """Insert ``submissions`` on ``conn`` (inside the caller's write transaction)."""
    outcomes: list[tuple[JobRecord, bool] | DeepEdgeError] = []
    now = time.time()
    waiting: dict[TenantId, int] = {}
    fresh: dict[tuple[TenantId, str], JobRecord] = {}
    for item in submissions:
        tenant, manifest, key = item.tenant, item.manifest, item.idempotency_key
        if manifest.cores > tenant.max_cores or manifest.gpus > tenant.max_gpus:
            outcomes.append(QuotaExceededError(
                f"the job asks for {manifest.cores:g} cores and {manifest.gpus} GPUs; "
                f"tenant {tenant.name} may use at most {tenant.max_cores:g} cores and "
                f"{tenant.max_gpus} GPUs (lower resources or learners)",
                field="resources",
            ))  # fmt: skip
            continue
        if key is not None:
            if (tenant.id, key) in fresh:
                outcomes.append((fresh[(tenant.id, key)], False))
                continue
            existing = conn.execute(_JOB_BY_KEY, {"tenant_id": tenant.id, "key": key}).first()
            if existing is not None:
                outcomes.append((JobRecord.from_row(existing), False))
                continue
        if tenant.id not in waiting:
            waiting[tenant.id] = int(conn.execute(
                _COUNT_UNFINISHED, {"tenant_id": tenant.id, "statuses": _UNFINISHED}
            ).scalar() or 0)  # fmt: skip
        if waiting[tenant.id] >= tenant.max_queued_jobs:
            outcomes.append(QuotaExceededError(
                f"tenant {tenant.name} already has {waiting[tenant.id]} unfinished jobs "
                f"(limit {tenant.max_queued_jobs}); wait for some to finish or delete "
                "them"
            ))  # fmt: skip
            continue
        waiting[tenant.id] += 1
        values = _new_job_values(tenant.id, manifest, key, now)
        conn.execute(_INSERT_JOB, values)
        conn.execute(
            _INSERT_HISTORY,
            {"job_id": values["id"], "seq": 0, "status": values["status"],
             "cause": "submitted", "at": now},
        )  # fmt: skip
        job = JobRecord.from_row(RowValues(values))
        if key is not None:
            fresh[(tenant.id, key)] = job
        outcomes.append((job, True))
    return outcomes
