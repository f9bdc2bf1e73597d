"""``/v1/deployments``: the control plane's deployments, their versions, windows and events.

Tenant-scoped like the job endpoints (another tenant's deployment answers 404); a
deployment is addressed by its name, unique per tenant. The JSON shapes are
:mod:`deepedge.api.deployment_schemas`.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request, Response

from deepedge.api.dependencies import TenantDep, deployment_store, json_response, service_state
from deepedge.api.deployment_schemas import (
    DeletedDeployment,
    DeploymentList,
    DeploymentSummary,
    DeploymentView,
    EventList,
    EventView,
    ModelVersionView,
    RollbackRequest,
    VersionList,
    VersionUpload,
    WindowList,
    WindowView,
)
from deepedge.cluster.live_nodes import fresh_snapshot, read_snapshot
from deepedge.controlplane import rollout_actions
from deepedge.controlplane.artifacts import artifact_bytes, artifact_path
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore
from deepedge.controlplane.live_nodes import place_deployment
from deepedge.controlplane.records import DeploymentRecord
from deepedge.controlplane.tenant_workload import TenantWorkloads
from deepedge.core.errors import InvalidInputError, NotFoundError, QuotaExceededError
from deepedge.service.workload_check import sandboxed_checker

router = APIRouter(prefix="/v1", tags=["deployments"])
Limit = Annotated[int, Query(ge=1, le=5000)]
VIEW_TAIL = 50


def _summary(registry: DeploymentStore, record: DeploymentRecord) -> DeploymentSummary:
    return DeploymentSummary.of(record, registry.last_scored([record.id]).get(record.id))


def _view(registry: DeploymentStore, record: DeploymentRecord) -> DeploymentView:
    summary = _summary(registry, record)
    return DeploymentView(
        **summary.__dict__,
        spec=record.spec.model_dump(mode="json"),
        versions=[ModelVersionView.of(record.name, v) for v in registry.versions(record.id)],
        windows=[WindowView.of(w) for w in registry.windows(record.id, VIEW_TAIL)],
        events=[EventView.of(e) for e in registry.events(record.id, VIEW_TAIL)],
    )


@router.post("/deployments", status_code=201, response_model=DeploymentView)
def create_deployment(request: Request, spec: DeploymentSpec, tenant: TenantDep) -> Response:
    """A user's workload is checked deeply first (its model built, its data read) in the
    tenant's sandbox, so its code never runs in the API: 422 naming ``workload.<field>``.
    On a service with a Ray cluster a live target is resolved against the cluster's nodes
    (:func:`deepedge.controlplane.live_nodes.place_deployment`: 422 naming the unknown and
    the alive nodes, 503 while the service has no view of the cluster yet)."""
    settings = service_state(request).settings
    snapshot = None
    if settings.ray_address is not None and spec.target.live:
        snapshot = fresh_snapshot(read_snapshot(settings.data_dir), time.time(),
                                  settings.ray_address)  # fmt: skip
    spec = place_deployment(
        spec, snapshot, ray_address=settings.ray_address,
        sandboxed=settings.confinement().sandboxed, learners_on_ray=settings.learners_on_ray,
    )  # fmt: skip
    serving = spec.serving
    asks_cpus, asks_gpus = serving.replicas * serving.cpus, serving.replicas * serving.gpus
    if settings.serving and (asks_cpus > tenant.max_cores or asks_gpus > tenant.max_gpus):
        raise QuotaExceededError(  # it would never be served: refused (sharing it only waits)
            f"serving: {serving.replicas} replicas of {serving.cpus:g} CPUs and "
            f"{serving.gpus:g} GPUs exceed tenant {tenant.name}'s quota of "
            f"{tenant.max_cores:g} cores and {tenant.max_gpus} GPUs",
            field="serving",
        )
    warnings: list[str] = []
    if spec.user_workload is not None:
        check = sandboxed_checker(service_state(request).runner, tenant)
        try:
            summary = check(spec.user_workload)
        except InvalidInputError as exc:
            field = "workload" if exc.field in {None, "workload"} else f"workload.{exc.field}"
            raise InvalidInputError(f"workload: {exc.message}", field=field) from exc
        warnings = [str(w) for w in summary.get("warnings", [])]
    registry = deployment_store(request)
    record, created = registry.create(tenant.id, spec, warnings=warnings)
    service_state(request).manager.wake()
    return json_response(_view(registry, record), 201 if created else 200)


@router.get("/deployments", response_model=DeploymentList)
def list_deployments(request: Request, tenant: TenantDep) -> Response:
    registry = deployment_store(request)
    records = registry.of_tenant(tenant.id)
    scored = registry.last_scored([r.id for r in records])
    summaries = [DeploymentSummary.of(r, scored.get(r.id)) for r in records]
    return json_response(DeploymentList(deployments=summaries))


@router.get("/deployments/{name}", response_model=DeploymentView)
def show_deployment(request: Request, tenant: TenantDep, name: str) -> Response:
    registry = deployment_store(request)
    return json_response(_view(registry, registry.get(tenant.id, name)))


@router.get("/deployments/{name}/windows", response_model=WindowList)
def deployment_windows(
    request: Request, tenant: TenantDep, name: str, limit: Limit = 200
) -> Response:
    registry = deployment_store(request)
    record = registry.get(tenant.id, name)
    points = [WindowView.of(w) for w in registry.windows(record.id, limit)]
    return json_response(WindowList(deployment=name, windows=points))


@router.get("/deployments/{name}/events", response_model=EventList)
def deployment_events(
    request: Request, tenant: TenantDep, name: str, limit: Limit = 200
) -> Response:
    registry = deployment_store(request)
    record = registry.get(tenant.id, name)
    events = [EventView.of(e) for e in registry.events(record.id, limit)]
    return json_response(EventList(deployment=name, events=events))


@router.get("/deployments/{name}/versions", response_model=VersionList)
def deployment_versions(request: Request, tenant: TenantDep, name: str) -> Response:
    registry = deployment_store(request)
    record = registry.get(tenant.id, name)
    versions = [ModelVersionView.of(name, v) for v in registry.versions(record.id)]
    return json_response(VersionList(deployment=name, versions=versions))


@router.post("/deployments/{name}/versions", status_code=201, response_model=ModelVersionView)
def upload_version(
    request: Request, tenant: TenantDep, name: str, upload: VersionUpload
) -> Response:
    """Register a model trained elsewhere; the control loop loads it into the deployment's
    model (the workload's code never runs in the API), gates, canaries and serves it. Its
    tensors are checked against the serving version's first (names and shapes: 422)."""
    field = "model_b64" if upload.model_b64 is not None else "weights_b64"
    try:
        raw = base64.b64decode(upload.model_b64 or upload.weights_b64 or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInputError(f"{field} is not base64", field=field) from exc
    flat = upload.weights_b64 is not None
    if flat:
        if len(raw) % 4:
            raise InvalidInputError("weights must be float32 values", field=field)
        weights = np.frombuffer(raw, dtype="<f4")
        if not np.all(np.isfinite(weights)):
            raise InvalidInputError("weights must be finite numbers", field=field)
        buffer = io.BytesIO()
        np.save(buffer, weights)
        raw = buffer.getvalue()
    registry = deployment_store(request)
    state = service_state(request)
    code = TenantWorkloads(state.runner, state.store.tenant)  # TorchScript: read there
    updated, number = rollout_actions.register_upload(
        registry, state.settings.data_dir, tenant.id, name, raw, flat,
        upload.note, upload.skip_gate, upload.skip_canary, code.shapes,
    )  # fmt: skip
    service_state(request).manager.wake()
    return json_response(ModelVersionView.of(name, registry.version(updated.id, number)), 201)


@router.get("/deployments/{name}/versions/{number}/model")
def download_version(request: Request, tenant: TenantDep, name: str, number: int) -> Response:
    """A version's whole model, as stored: a ``torch.save`` of its ``state_dict`` (load it
    with ``torch.load(..., weights_only=True)`` into the workload's model) or, for a
    TorchScript workload, a TorchScript archive (``torch.jit.load``). The format is in the
    ``X-Model-Format`` header."""
    registry = deployment_store(request)
    record = registry.get(tenant.id, name)
    registry.version(record.id, number)  # 404 for a version that does not exist
    path = artifact_path(service_state(request).settings.data_dir, record, number)
    if not path.exists():
        raise NotFoundError(f"v{number} of {name} has no model yet")
    body, kind = artifact_bytes(path)
    return Response(
        body,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{name}-v{number}.pt"',
            "X-Model-Format": kind.value,
        },
    )


@router.post("/deployments/{name}/rollback", status_code=202, response_model=DeploymentSummary)
def rollback(
    request: Request, tenant: TenantDep, name: str, body: RollbackRequest | None = None
) -> Response:
    body = body or RollbackRequest.model_validate({})
    registry = deployment_store(request)
    record = rollout_actions.roll_back(registry, tenant.id, name, body.to_version, body.reason)
    return json_response(_summary(registry, record), 202)


@router.post("/deployments/{name}/update", status_code=202, response_model=DeploymentSummary)
def request_update(request: Request, tenant: TenantDep, name: str) -> Response:
    registry = deployment_store(request)
    record = rollout_actions.request_update(registry, tenant.id, name)
    return json_response(_summary(registry, record), 202)


@router.post("/deployments/{name}/stop", response_model=DeploymentSummary)
def stop_deployment(request: Request, tenant: TenantDep, name: str) -> Response:
    """Stop the deployment's loop; its versions and history are kept."""
    registry = deployment_store(request)
    return json_response(_summary(registry, rollout_actions.stop(registry, tenant.id, name)))


@router.delete("/deployments/{name}", response_model=DeletedDeployment)
def delete_deployment(
    request: Request, tenant: TenantDep, name: str, confirm: str | None = None
) -> Response:
    """Delete the deployment (stopped first if it runs) with its versions, windows, events,
    samples, inference keys and files; ``?confirm=NAME`` must repeat its name (else 422).
    The answer counts the samples and keys removed. The name can be deployed again at
    once."""
    data_dir = service_state(request).settings.data_dir
    gone = rollout_actions.delete(deployment_store(request), data_dir, tenant.id, name, confirm)
    service_state(request).manager.wake()
    summary = DeploymentSummary.of(gone.deployment).model_dump()
    return json_response(DeletedDeployment(**summary, deleted_samples=gone.samples,
                                           deleted_keys=gone.keys))  # fmt: skip
