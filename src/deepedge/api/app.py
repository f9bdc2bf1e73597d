"""The job service's REST API (OpenAPI at ``/openapi.json``).

Every ``/v1`` route needs ``Authorization: Bearer <token>``; every job lookup is scoped to
the caller's tenant, so another tenant's job answers 404 exactly like a missing one.
A submission is answered only after its row is committed: concurrent submissions share
one transaction (:mod:`deepedge.service.group_commit`), and each waits for that commit.
The lifecycle manager runs in this process (tests, ``--no-supervise``) or, under the
supervisor, in a process of its own that this one wakes through a pipe
(:mod:`deepedge.service.wakeup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

import anyio
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from deepedge.api.body_limit import BodyLimitMiddleware
from deepedge.api.dashboard import install_dashboard
from deepedge.api.errors import install_error_handlers
from deepedge.api.metrics import LatencyMiddleware, ServiceCollector, new_registry
from deepedge.api.schemas import Accepted, JobList, JobMetrics, JobSummary, JobView
from deepedge.core.errors import ConflictError, InvalidInputError, UnauthorizedError
from deepedge.service.config import ServiceSettings
from deepedge.service.group_commit import SubmissionCommitter
from deepedge.service.learner import deep_check, kind_unavailable_reason, validate_document
from deepedge.service.manager import Action, Manager
from deepedge.service.manifest import DocumentSpec, JobKind, JobManifest
from deepedge.service.records import JobRecord, Tenant
from deepedge.service.status import DELETABLE, TERMINAL, JobStatus
from deepedge.service.store import JobStore, Submission
from deepedge.service.tenants import hash_token
from deepedge.service.wakeup import RemoteManager
from deepedge.service.workspace import JobDir

TOKEN_CACHE_S = 10.0
FOLLOW_POLL_S = 0.2
MAX_LOG_CHUNK_B = 1 << 20
bearer = HTTPBearer(auto_error=False, description="a tenant token (`deepedge tenants create`)")


class ManagerLink(Protocol):
    """What the API needs of the lifecycle manager, wherever it runs."""

    def wake(self) -> None: ...

    def submitted(self, tenant_id: str) -> None: ...

    def job_dir(self, job: JobRecord) -> JobDir: ...

    def recovery_events(self) -> dict[str, int]: ...


@dataclass
class ServiceState:
    store: JobStore
    manager: ManagerLink
    settings: ServiceSettings
    tokens: dict[str, tuple[Tenant, float]]
    committer: SubmissionCommitter


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def current_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Tenant:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing bearer token (Authorization: Bearer <token>)")
    state = _state(request)
    digest = hash_token(credentials.credentials)
    cached = state.tokens.get(digest)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    tenant = state.store.tenant_by_token(credentials.credentials)
    if tenant is None:
        raise UnauthorizedError("unknown token")
    state.tokens[digest] = (tenant, time.monotonic() + TOKEN_CACHE_S)
    return tenant


TenantDep = Annotated[Tenant, Depends(current_tenant)]
JobIdPath = Annotated[str, "job id"]


def _job(request: Request, tenant: Tenant, job_id: str) -> JobRecord:
    return _state(request).store.get(job_id, tenant_id=tenant.id)


def create_app(
    settings: ServiceSettings, run_manager: bool = True, wake_fd: int | None = None
) -> FastAPI:
    """Build the app; the store is migrated at startup.

    ``wake_fd`` (the write end of a :class:`~deepedge.service.wakeup.WakePipe`): the manager
    runs in another process; otherwise it runs here, started when ``run_manager``.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = JobStore(settings.url)
        store.migrate()
        local: Manager | None = None
        manager: ManagerLink
        if wake_fd is not None:
            manager = RemoteManager(settings.data_dir, wake_fd)
        else:
            manager = local = Manager(store, settings)
        committer = SubmissionCommitter(store)
        app.state.service = ServiceState(store, manager, settings, {}, committer)
        registry.register(ServiceCollector(store.counts_by_status, manager.recovery_events))
        if local is not None and run_manager:
            local.start()
        try:
            yield
        finally:
            if local is not None:
                local.stop()
            committer.stop()
            store.dispose()

    registry, latency = new_registry()
    app = FastAPI(
        title="deepedge job service",
        version="1",
        description="Submit, watch and control deepedge jobs (model updates, Ekya windows, "
        "placements, and any command as a learner).",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(LatencyMiddleware, latency=latency)
    install_error_handlers(app)

    @app.get("/healthz", tags=["service"])
    def healthz(request: Request) -> dict[str, str]:
        _state(request).store.ping()
        return {"status": "ok"}

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/jobs",
        status_code=201,
        tags=["jobs"],
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
        if isinstance(manifest.spec, DocumentSpec):
            # The engine's model may import its package the first time: not on the loop.
            await anyio.to_thread.run_sync(_check_document, manifest.kind, manifest.spec.document)
        state = _state(request)
        # Answered only after the group commit that holds this row has returned.
        job, created = await state.committer.submit(Submission(tenant, manifest, idempotency_key))
        if created:
            state.manager.submitted(tenant.id)  # admission at once unless at quota
        return _json(JobSummary.of(job), 201 if created else 200)

    # The hot reads run on the event loop: an indexed read of the embedded store (WAL:
    # readers never wait for the writer) costs less than the hop to a worker thread.
    @app.get("/v1/jobs", tags=["jobs"], response_model=JobList)
    async def list_jobs(
        request: Request,
        tenant: TenantDep,
        status: JobStatus | None = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[float | None, Query(ge=0, le=1e12)] = None,
        before_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    ) -> Response:
        jobs = _state(request).store.list_jobs(tenant.id, status, limit, before, before_id)
        last = jobs[-1] if len(jobs) == limit else None
        return _json(
            JobList(
                jobs=[JobSummary.of(j) for j in jobs],
                next_before=last.created_at if last else None,
                next_before_id=last.id if last else None,
            )
        )

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], response_model=JobView)
    async def status(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Response:
        return _json(JobView.full(*_state(request).store.view(job_id, tenant.id)))

    @app.get("/v1/jobs/{job_id}/metrics", tags=["jobs"])
    def job_metrics(
        request: Request,
        tenant: TenantDep,
        job_id: JobIdPath,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> JobMetrics:
        job = _job(request, tenant, job_id)
        state = _state(request)
        path = state.manager.job_dir(job).metrics_file
        return JobMetrics(
            job_id=job.id,
            status=job.status,
            restarts=job.restarts,
            checkpoints=len(state.store.checkpoints(job.id)),
            samples=_tail_json_lines(path, limit),
        )

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=PlainTextResponse)
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
        state = _state(request)
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

    def _act(request: Request, tenant: Tenant, job_id: str, action: Action) -> Accepted:
        job = _job(request, tenant, job_id)
        if job.status in TERMINAL:
            raise ConflictError(f"job {job.id} is {job.status}; nothing to {action.value.lower()}")
        if action is Action.CHECKPOINT and job.status not in {
            JobStatus.PROCESSING,
            JobStatus.RESTARTED,
        }:
            raise ConflictError(f"job {job.id} is {job.status}; only running jobs checkpoint")
        if action is Action.HALT and job.status is JobStatus.HALTED:
            raise ConflictError(f"job {job.id} is already HALTED")
        _state(request).store.request_action(job.id, action.value)
        _state(request).manager.wake()
        return Accepted(job_id=job.id, status=job.status, message=f"{action.value} requested")

    @app.post("/v1/jobs/{job_id}/checkpoint", status_code=202, tags=["jobs"])
    def checkpoint(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Accepted:
        return _act(request, tenant, job_id, Action.CHECKPOINT)

    @app.post("/v1/jobs/{job_id}/halt", status_code=202, tags=["jobs"])
    def halt(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Accepted:
        return _act(request, tenant, job_id, Action.HALT)

    @app.post("/v1/jobs/{job_id}/resume", tags=["jobs"])
    def resume(request: Request, tenant: TenantDep, job_id: JobIdPath) -> JobSummary:
        job = _job(request, tenant, job_id)
        if job.status is not JobStatus.HALTED:
            raise ConflictError(f"job {job.id} is {job.status}; only HALTED jobs resume")
        resumed = _state(request).store.transition(
            job.id,
            JobStatus.QUEUED,
            "resumed by the user; continues from its newest checkpoint",
            expected=JobStatus.HALTED,
            deploy_attempts=0,
            next_attempt_at=0.0,
            requested_action=None,
        )
        _state(request).manager.wake()
        return JobSummary.of(resumed)

    @app.delete("/v1/jobs/{job_id}", status_code=204, tags=["jobs"])
    def delete(request: Request, tenant: TenantDep, job_id: JobIdPath) -> Response:
        job = _job(request, tenant, job_id)
        if job.status not in DELETABLE:
            raise ConflictError(f"job {job.id} is {job.status}; halt it before deleting it")
        state = _state(request)
        state.store.delete(job.id)
        state.manager.job_dir(job).remove()
        return Response(status_code=204)

    from deepedge.api.deployments import router as deployments_router

    app.include_router(deployments_router)
    install_dashboard(app, current_tenant)
    return app


def _json(document: BaseModel, status_code: int = 200) -> Response:
    """Serialise once (the hot paths skip FastAPI's second validation of the response)."""
    return Response(document.model_dump_json(), status_code, media_type="application/json")


def _check_document(kind: JobKind, document: dict[str, Any]) -> None:
    """A kind's document must pass its engine's own model and deep checks (a workload's
    model and data, in a child process); the error names its field."""
    try:
        validated = validate_document(kind, document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("spec", "document", *first.get("loc", ())))
        raise InvalidInputError(f"{where}: {first.get('msg', 'invalid')}", field=where) from exc
    try:
        deep_check(kind, validated)
    except InvalidInputError as exc:
        where = f"spec.document.{exc.field}"
        raise InvalidInputError(f"spec.document.{exc.message}", field=where) from exc


def _read_from(path: Any, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(MAX_LOG_CHUNK_B)
    except OSError:
        return b""


def _tail_json_lines(path: Any, limit: int) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
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
