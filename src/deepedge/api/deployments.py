"""REST endpoints of the control plane: deployments, model versions, nodes.

Tenant-scoped like the job endpoints (another tenant's deployment answers 404); a
deployment is addressed by its name, unique per tenant. The JSON shapes are
:mod:`deepedge.api.deployment_schemas`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request, Response

from deepedge.api.app import TenantDep, _json, _state
from deepedge.api.deployment_schemas import (
    DeploymentList,
    DeploymentSummary,
    DeploymentView,
    EventList,
    EventView,
    ModelVersionView,
    NodeAllocation,
    NodeList,
    NodeView,
    RollbackRequest,
    VersionList,
    VersionUpload,
    WindowList,
    WindowView,
)
from deepedge.core.errors import InvalidInputError
from deepedge.service import rollout_actions
from deepedge.service.artifacts import artifact_path
from deepedge.service.deployment_records import DeploymentRecord, EventKind
from deepedge.service.deployment_spec import SITE_NODES, DeploymentSpec
from deepedge.service.deployments import DeploymentStore
from deepedge.service.rollout_status import DeploymentStatus
from deepedge.service.status import ACTIVE, JobStatus

router = APIRouter(prefix="/v1", tags=["deployments"])
Limit = Annotated[int, Query(ge=1, le=5000)]
VIEW_TAIL = 50


def _registry(request: Request) -> DeploymentStore:
    return DeploymentStore(_state(request).store)


def _view(registry: DeploymentStore, record: DeploymentRecord) -> DeploymentView:
    summary = DeploymentSummary.of(record)
    return DeploymentView(
        **summary.__dict__,
        spec=record.spec.model_dump(mode="json"),
        versions=[ModelVersionView.of(record.name, v) for v in registry.versions(record.id)],
        windows=[WindowView.of(w) for w in registry.windows(record.id, VIEW_TAIL)],
        events=[EventView.of(e) for e in registry.events(record.id, VIEW_TAIL)],
    )


@router.post("/deployments", status_code=201, response_model=DeploymentView)
def create_deployment(request: Request, spec: DeploymentSpec, tenant: TenantDep) -> Response:
    registry = _registry(request)
    record, created = registry.create(tenant.id, spec)
    _state(request).manager.wake()
    return _json(_view(registry, record), 201 if created else 200)


@router.get("/deployments", response_model=DeploymentList)
def list_deployments(request: Request, tenant: TenantDep) -> Response:
    records = _registry(request).of_tenant(tenant.id)
    return _json(DeploymentList(deployments=[DeploymentSummary.of(r) for r in records]))


@router.get("/deployments/{name}", response_model=DeploymentView)
def show_deployment(request: Request, tenant: TenantDep, name: str) -> Response:
    registry = _registry(request)
    return _json(_view(registry, registry.get(tenant.id, name)))


@router.get("/deployments/{name}/windows", response_model=WindowList)
def deployment_windows(
    request: Request, tenant: TenantDep, name: str, limit: Limit = 200
) -> Response:
    registry = _registry(request)
    record = registry.get(tenant.id, name)
    points = [WindowView.of(w) for w in registry.windows(record.id, limit)]
    return _json(WindowList(deployment=name, windows=points))


@router.get("/deployments/{name}/events", response_model=EventList)
def deployment_events(
    request: Request, tenant: TenantDep, name: str, limit: Limit = 200
) -> Response:
    registry = _registry(request)
    record = registry.get(tenant.id, name)
    events = [EventView.of(e) for e in registry.events(record.id, limit)]
    return _json(EventList(deployment=name, events=events))


@router.get("/deployments/{name}/versions", response_model=VersionList)
def deployment_versions(request: Request, tenant: TenantDep, name: str) -> Response:
    registry = _registry(request)
    record = registry.get(tenant.id, name)
    versions = [ModelVersionView.of(name, v) for v in registry.versions(record.id)]
    return _json(VersionList(deployment=name, versions=versions))


@router.post("/deployments/{name}/versions", status_code=201, response_model=ModelVersionView)
def upload_version(
    request: Request, tenant: TenantDep, name: str, upload: VersionUpload
) -> Response:
    """Register a model trained elsewhere; the control loop gates, canaries and serves it."""
    registry = _registry(request)
    record = registry.get(tenant.id, name)
    try:
        raw = base64.b64decode(upload.weights_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInputError("weights_b64 is not base64", field="weights_b64") from exc
    if len(raw) % 4:
        raise InvalidInputError("weights must be float32 values", field="weights_b64")
    weights = np.frombuffer(raw, dtype="<f4")
    serving = record.serving_version
    if serving is not None:
        expected = np.load(artifact_path(_state(request).settings.data_dir, record, serving),
                           mmap_mode="r").shape[0]  # fmt: skip
        if weights.shape[0] != expected:
            raise InvalidInputError(
                f"{weights.shape[0]} weights; the deployment's model has {expected}",
                field="weights_b64",
            )
    updated, number = rollout_actions.register_upload(
        registry, _state(request).settings.data_dir, tenant.id, name, weights, upload.note,
        upload.skip_gate, upload.skip_canary,
    )  # fmt: skip
    _state(request).manager.wake()
    return _json(ModelVersionView.of(name, registry.version(updated.id, number)), 201)


@router.post("/deployments/{name}/rollback", status_code=202, response_model=DeploymentSummary)
def rollback(
    request: Request, tenant: TenantDep, name: str, body: RollbackRequest | None = None
) -> Response:
    body = body or RollbackRequest.model_validate({})
    record = rollout_actions.roll_back(
        _registry(request), tenant.id, name, body.to_version, body.reason
    )
    return _json(DeploymentSummary.of(record), 202)


@router.post("/deployments/{name}/update", status_code=202, response_model=DeploymentSummary)
def request_update(request: Request, tenant: TenantDep, name: str) -> Response:
    record = rollout_actions.request_update(_registry(request), tenant.id, name)
    return _json(DeploymentSummary.of(record), 202)


@router.delete("/deployments/{name}", response_model=DeploymentSummary)
def stop_deployment(request: Request, tenant: TenantDep, name: str) -> Response:
    return _json(DeploymentSummary.of(rollout_actions.stop(_registry(request), tenant.id, name)))


@router.get("/models/versions", response_model=VersionList, tags=["models"])
def model_versions(request: Request, tenant: TenantDep, deployment: str | None = None) -> Response:
    registry = _registry(request)
    if deployment is not None:
        record = registry.get(tenant.id, deployment)
        views = [ModelVersionView.of(deployment, v) for v in registry.versions(record.id)]
        return _json(VersionList(deployment=deployment, versions=views))
    names = {r.id: r.name for r in registry.of_tenant(tenant.id)}
    views = [ModelVersionView.of(names.get(v.deployment_id, "?"), v)
             for v in registry.tenant_versions(tenant.id)]  # fmt: skip
    return _json(VersionList(versions=views))


@router.get("/nodes", response_model=NodeList, tags=["nodes"])
def nodes(request: Request, tenant: TenantDep) -> Response:
    """The site's emulated nodes, with the tenant's deployments, canaries, running update
    jobs and the newest allocation of each deployment's updates on them."""
    state = _state(request)
    registry = _registry(request)
    live = [r for r in registry.of_tenant(tenant.id) if r.status is not DeploymentStatus.STOPPED]
    running: dict[str, str] = {}
    allocations: dict[str, list[NodeAllocation]] = {}
    for record in live:
        if record.current_job_id is not None:
            job = state.store.get(record.current_job_id)
            if job.status in ACTIVE | {JobStatus.QUEUED, JobStatus.PENDING}:
                running[record.name] = job.id
        event = registry.last_event(record.id, EventKind.ALLOCATION)
        for worker in event.detail.get("workers", []) if event else []:
            allocations.setdefault(str(worker.get("node")), []).append(
                NodeAllocation(
                    deployment=record.name, version=event.version if event else None,
                    window=event.window if event else None, batch=worker.get("batch"),
                    shard=worker.get("shard"), selected=bool(worker.get("selected")),
                )
            )  # fmt: skip
    views = []
    for node in SITE_NODES:
        serving = [r for r in live if node.name in r.spec.target.nodes or node.role != "worker"]
        views.append(
            NodeView(
                name=node.name, device=node.device, role=node.role, state="up",
                emulated_utilisation={"cpu": node.cpu_util, "gpu": node.gpu_util,
                                      "mem": node.mem_util},
                deployments=[r.name for r in serving],
                canary=[r.name for r in serving
                        if r.canary_version is not None and node.name in r.spec.canary_nodes()],
                jobs=sorted(running[r.name] for r in serving if r.name in running),
                allocations=allocations.get(node.name, []),
            )
        )  # fmt: skip
    return _json(NodeList(nodes=views))
