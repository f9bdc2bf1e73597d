"""``/v1/jobs``: submit, list, watch and control jobs.

Every job lookup is scoped to the caller's tenant, so another tenant's job answers 404
exactly like a missing one. A job is named by its id or any prefix of it unique among the
tenant's jobs (:func:`resolve_job_id`; an ambiguous one is a 422 naming two matches).
A submission is answered only after its row is committed: concurrent submissions share one
transaction (:mod:`deepedge.service.group_commit`), and each waits for that commit. Which
action is allowed in which status is :func:`deepedge.service.status.check_action`.
``GET /v1/jobs/{id}/result`` returns the decision or report a finished job of a deepedge
kind wrote (``results/result.json``): allocations of an Ekya window, a placement, an update.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import ValidationError

from deepedge.api.dependencies import TenantDep, json_response, service_state
from deepedge.api.schemas import Accepted, JobList, JobMetrics, JobSummary, JobView
from deepedge.cluster.live_nodes import fresh_snapshot, read_snapshot
from deepedge.controlplane.deployment_spec import UpdateResources
from deepedge.controlplane.update_resources import learner_request
from deepedge.core.errors import InvalidInputError, NotFoundError
from deepedge.service.config import ServiceSettings
from deepedge.service.learner import (
    ModelUpdateSpec,
    deep_check,
    kind_unavailable_reason,
    validate_document,
)
from deepedge.service.manifest import DocumentSpec, JobKind, JobManifest
from deepedge.service.records import JobRecord, Tenant
from deepedge.service.status import TERMINAL, Action, JobStatus, check_action
from deepedge.service.store import Submission
from deepedge.service.workload_check import WorkloadChecker, sandboxed_checker
from deepedge.service.workspace import JobDir, open_inside

FOLLOW_POLL_S = 0.2
MAX_LOG_CHUNK_B = 1 << 20
MAX_RESULT_B = 64 << 20
RESULT_FILE = "results/result.json"
METRICS_FILE = "results/metrics.jsonl"

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
JobIdPath = Annotated[str, "job id, or any unique prefix of it"]


FULL_ID_LEN = 32  # a job id: uuid4 hex


def resolve_job_id(request: Request, tenant: Tenant, reference: str) -> str:
    """The tenant's job id that ``reference`` names: the id itself, or any prefix of it that
    no other of the tenant's jobs shares (what a table shows, 8 characters, will do)."""
    reference = reference.strip().lower()
    if len(reference) >= FULL_ID_LEN:
        return reference
    matches = service_state(request).store.job_ids_with_prefix(tenant.id, reference, limit=3)
    if not matches:
        raise NotFoundError(f"job {reference} not found")
    if len(matches) > 1:
        shown = ", ".join(m[: len(reference) + 4] + "..." for m in matches[:2])
        more = " and more" if len(matches) > 2 else ""
        raise InvalidInputError(
            f"job id prefix {reference!r} is ambiguous ({shown}{more}): give more characters",
            field="job_id",
        )
    return matches[0]


def _job(request: Request, tenant: Tenant, job_id: str) -> JobRecord:
    full = resolve_job_id(request, tenant, job_id)
    return service_state(request).store.get(full, tenant_id=tenant.id)


@router.post(
    "",
    status_code=201,
    response_model=JobSummary,
    responses={200: {"model": JobSummary, "description": "idempotent replay"}},
)
async def submit(
    request: Request,
    manifest: JobManifest,
    tenant: TenantDep,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> Response:
    reason = kind_unavailable_reason(manifest.kind)
    if reason is not None:
        raise InvalidInputError(reason, field="kind")
    state = service_state(request)
    if isinstance(manifest.spec, DocumentSpec):
        # The engine's model may import its package the first time, and a workload is
        # checked in the tenant's sandbox (a child process): not on the loop.
        check = sandboxed_checker(state.runner, tenant)
        sandboxed = state.settings.confinement().sandboxed
        await anyio.to_thread.run_sync(
            _check_document, manifest.kind, manifest.spec.document, check, sandboxed
        )
        _check_live_memory(manifest, state.settings)
    # Answered only after the group commit that holds this row has returned.
    job, created = await state.committer.submit(Submission(tenant, manifest, idempotency_key))
    if not created and job.manifest_json != manifest.model_dump_json(by_alias=True):
        # a client reusing a key by mistake must not get another job back as its own
        raise InvalidInputError(
            f"Idempotency-Key {idempotency_key!r} was used for job {job.id} with another "
            "manifest; send that manifest again, or use a new key",
            field="Idempotency-Key",
        )
    if created:
        state.manager.submitted(tenant.id)  # admission at once unless at quota
    return json_response(JobSummary.of(job), 201 if created else 200)


# The hot reads run on the event loop: an indexed read of the embedded store (WAL:
# readers never wait for the writer) costs less than the hop to a worker thread.
@router.get("", response_model=JobList)
async def list_jobs(
    request: Request,
    tenant: TenantDep,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[float | None, Query(ge=0, le=1e12)] = None,
    before_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    jobs = service_state(request).store.list_jobs(tenant.id, status, limit, before, before_id)
    last = jobs[-1] if len(jobs) == limit else None
    return json_response(
        JobList(
            jobs=[JobSummary.of(j) for j in jobs],
            next_before=last.created_at if last else None,
            next_before_id=last.id if last else None,
        )
    )


@router.get("/{job_id}", response_model=JobView)
async def status(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Response:
    full = resolve_job_id(request, tenant, job_id)
    return json_response(JobView.full(*service_state(request).store.view(full, tenant.id)))


@router.get("/{job_id}/metrics")
def job_metrics(
    request: Request,
    tenant: TenantDep,
    job_id: JobIdPath,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobMetrics:
    job = _job(request, tenant, job_id)
    state = service_state(request)
    job_dir = state.manager.job_dir(job)
    return JobMetrics(
        job_id=job.id,
        status=job.status,
        restarts=job.restarts,
        checkpoints=len(state.store.checkpoints(job.id)),
        samples=_tail_json_lines(job_dir, METRICS_FILE, limit),
    )


@router.get("/{job_id}/logs", response_class=PlainTextResponse)
def logs(
    request: Request,
    tenant: TenantDep,
    job_id: JobIdPath,
    rank: Annotated[int, Query(ge=0, le=63)] = 0,
    offset: Annotated[int, Query(ge=0, le=1 << 50)] = 0,
    follow: bool = False,
    max_wait_s: Annotated[float, Query(ge=0, le=86_400)] = 3600.0,
) -> Response:
    job = _job(request, tenant, job_id)
    state = service_state(request)
    path = state.manager.job_dir(job).log_file(rank)
    if not follow:
        chunk = _read_from(path, offset)
        return PlainTextResponse(
            chunk.decode("utf-8", "replace"),
            headers={"X-Next-Offset": str(offset + len(chunk))},
        )

    async def stream() -> AsyncIterator[bytes]:
        position = offset
        deadline = time.monotonic() + max_wait_s
        while True:
            chunk = _read_from(path, position)
            position += len(chunk)
            if chunk:
                yield chunk
                continue
            current = await anyio.to_thread.run_sync(state.store.get, job.id)
            if current.status in TERMINAL | {JobStatus.HALTED}:
                tail = _read_from(path, position)
                if tail:
                    yield tail
                return
            if await request.is_disconnected() or time.monotonic() > deadline:
                return
            await asyncio.sleep(FOLLOW_POLL_S)

    return StreamingResponse(stream(), media_type="text/plain; charset=utf-8")


@router.get("/{job_id}/result")
def result(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Response:
    state = service_state(request)
    job = _job(request, tenant, job_id)
    try:
        # Written atomically by the learner (temp file + rename): never half a document.
        # The folder is the tenant's: a link there is refused, never followed.
        raw = state.manager.job_dir(job).read_tenant_file(RESULT_FILE, MAX_RESULT_B + 1)
    except OSError:
        raise NotFoundError(f"job {job.id} has no result (yet)") from None
    if len(raw) > MAX_RESULT_B:
        raise NotFoundError(f"job {job.id}'s result is over {MAX_RESULT_B} bytes") from None
    return Response(raw, media_type="application/json")


def _request(request: Request, tenant: Tenant, job_id: str, action: Action) -> Accepted:
    """Store ``action`` on the job's row for the manager, and wake it."""
    job = _job(request, tenant, job_id)
    check_action(job.id, job.status, action)
    state = service_state(request)
    state.store.request_action(job.id, action.value)
    state.manager.wake()
    return Accepted(job_id=job.id, status=job.status, message=f"{action.value} requested")


@router.post("/{job_id}/checkpoint", status_code=202)
def checkpoint(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Accepted:
    return _request(request, tenant, job_id, Action.CHECKPOINT)


@router.post("/{job_id}/halt", status_code=202)
def halt(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Accepted:
    return _request(request, tenant, job_id, Action.HALT)


@router.post("/{job_id}/resume")
def resume(request: Request, tenant: TenantDep, job_id: JobIdPath) -> JobSummary:
    job = _job(request, tenant, job_id)
    check_action(job.id, job.status, Action.RESUME)
    state = service_state(request)
    resumed = state.store.transition(
        job.id,
        JobStatus.QUEUED,
        "resumed by the user; continues from its newest checkpoint",
        expected=JobStatus.HALTED,
        deploy_attempts=0,
        next_attempt_at=0.0,
        requested_action=None,
    )
    state.manager.wake()
    return JobSummary.of(resumed)


@router.delete("/{job_id}", status_code=204)
def delete(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Response:
    job = _job(request, tenant, job_id)
    check_action(job.id, job.status, Action.DELETE)
    state = service_state(request)
    state.store.delete(job.id)
    state.manager.job_dir(job).remove()
    return Response(status_code=204)


def _check_live_memory(manifest: JobManifest, settings: ServiceSettings) -> None:
    """A ``live_cluster`` update's learner maps its node's object store into its address
    space: ``resources.mem_mb`` under the cluster's largest store (plus the learner's own)
    is a 422 naming both figures, and, with learners on Ray, a request no alive node can
    take (:mod:`deepedge.controlplane.update_resources`; 503 without a view of the
    cluster)."""
    document = manifest.spec.document if isinstance(manifest.spec, DocumentSpec) else {}
    live = manifest.kind is JobKind.MODEL_UPDATE and bool(document.get("live_cluster"))
    if not live or settings.ray_address is None or settings.confinement().sandboxed:
        return
    snapshot = fresh_snapshot(read_snapshot(settings.data_dir), time.time(), settings.ray_address)
    r = manifest.resources
    stated = UpdateResources.model_construct(cpus=r.cpus, gpus=r.gpus, mem_mb=r.mem_mb)
    learner_request(stated, 0.0, snapshot, on_ray=settings.learners_on_ray,
                    field="resources.mem_mb")  # fmt: skip


def _check_document(
    kind: JobKind, document: dict[str, Any], check: WorkloadChecker, sandboxed: bool
) -> None:
    """A kind's document must pass its engine's own model and deep checks (a workload's
    model and data, in the tenant's sandbox); the error names its field."""
    try:
        validated = validate_document(kind, document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("spec", "document", *first.get("loc", ())))
        raise InvalidInputError(f"{where}: {first.get('msg', 'invalid')}", field=where) from exc
    if sandboxed and isinstance(validated, ModelUpdateSpec) and validated.live_cluster:
        raise InvalidInputError(
            "spec.document.live_cluster: a sandboxed learner cannot reach the service's Ray "
            "cluster (no network); the operator runs trusted tenants with --trusted-tenants",
            field="spec.document.live_cluster",
        )
    try:
        deep_check(kind, validated, check)
    except InvalidInputError as exc:
        where = f"spec.document.{exc.field}"
        raise InvalidInputError(f"spec.document.{exc.message}", field=where) from exc


def _read_from(path: Path, offset: int) -> bytes:
    """A chunk of a learner's log (written by its collector, in the service's own folder;
    still opened without following a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            handle.seek(offset)
            return handle.read(MAX_LOG_CHUNK_B)
    except OSError:
        return b""


def _tail_json_lines(job_dir: JobDir, relative: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` JSON objects of a file in the tenant's folders (no link
    followed: tenant code writes it)."""
    try:
        with open_inside(job_dir.root, relative) as handle:
            handle.seek(0, 2)
            handle.seek(max(handle.tell() - 256 * limit, 0))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    samples: list[dict[str, Any]] = []
    for line in lines[-limit:]:
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                samples.append(value)
    return samples
