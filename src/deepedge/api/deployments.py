"""``/v1/deployments``: the control plane's deployments, their versions, windows and events.

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

from deepedge.api.dependencies import TenantDep, deployment_store, json_response, service_state
from deepedge.api.deployment_schemas import (
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
from deepedge.controlplane import rollout_actions
from deepedge.controlplane.artifacts import artifact_path
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore
from deepedge.controlplane.records import DeploymentRecord
from deepedge.core.errors import InvalidInputError
from deepedge.service.workload_check import sandboxed_checker

router = APIRouter(prefix="/v1", tags=["deployments"])
Limit = Annotated[int, Query(ge=1, le=5000)]
VIEW_TAIL = 50


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
    """A user's workload is checked deeply first (its model built, its data read) in the
    tenant's sandbox, so its code never runs in the API: 422 naming ``workload.<field>``."""
    if spec.user_workload is not None:
        check = sandboxed_checker(service_state(request).runner, tenant)
        try:
            check(spec.user_workload)
        except InvalidInputError as exc:
            field = "workload" if exc.field in {None, "workload"} else f"workload.{exc.field}"
            raise InvalidInputError(f"workload: {exc.message}", field=field) from exc
    registry = deployment_store(request)
    record, created = registry.create(tenant.id, spec)
    service_state(request).manager.wake()
    return json_response(_view(registry, record), 201 if created else 200)


@router.get("/deployments", response_model=DeploymentList)
def list_deployments(request: Request, tenant: TenantDep) -> Response:
    records = deployment_store(request).of_tenant(tenant.id)
    return json_response(DeploymentList(deployments=[DeploymentSummary.of(r) for r in records]))


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
    """Register a model trained elsewhere; the control loop gates, canaries and serves it."""
    registry = deployment_store(request)
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
        expected = np.load(artifact_path(service_state(request).settings.data_dir, record, serving),
                           mmap_mode="r").shape[0]  # fmt: skip
        if weights.shape[0] != expected:
            raise InvalidInputError(
                f"{weights.shape[0]} weights; the deployment's model has {expected}",
                field="weights_b64",
            )
    updated, number = rollout_actions.register_upload(
        registry, service_state(request).settings.data_dir, tenant.id, name, weights, upload.note,
        upload.skip_gate, upload.skip_canary,
    )  # fmt: skip
    service_state(request).manager.wake()
    return json_response(ModelVersionView.of(name, registry.version(updated.id, number)), 201)


@router.post("/deployments/{name}/rollback", status_code=202, response_model=DeploymentSummary)
def rollback(
    request: Request, tenant: TenantDep, name: str, body: RollbackRequest | None = None
) -> Response:
    body = body or RollbackRequest.model_validate({})
    record = rollout_actions.roll_back(
        deployment_store(request), tenant.id, name, body.to_version, body.reason
    )
    return json_response(DeploymentSummary.of(record), 202)


@router.post("/deployments/{name}/update", status_code=202, response_model=DeploymentSummary)
def request_update(request: Request, tenant: TenantDep, name: str) -> Response:
    record = rollout_actions.request_update(deployment_store(request), tenant.id, name)
    return json_response(DeploymentSummary.of(record), 202)


@router.delete("/deployments/{name}", response_model=DeploymentSummary)
def stop_deployment(request: Request, tenant: TenantDep, name: str) -> Response:
    return json_response(
        DeploymentSummary.of(rollout_actions.stop(deployment_store(request), tenant.id, name))
    )
