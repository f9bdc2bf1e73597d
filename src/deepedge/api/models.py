"""``GET /v1/models/versions``: the model registry's versions, of one deployment or of all
the caller's deployments."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from deepedge.api.dependencies import TenantDep, deployment_store, json_response
from deepedge.api.deployment_schemas import ModelVersionView, VersionList

router = APIRouter(prefix="/v1", tags=["deployments", "models"])


@router.get("/models/versions", response_model=VersionList)
def model_versions(request: Request, tenant: TenantDep, deployment: str | None = None) -> Response:
    registry = deployment_store(request)
    if deployment is not None:
        record = registry.get(tenant.id, deployment)
        views = [ModelVersionView.of(deployment, v) for v in registry.versions(record.id)]
        return json_response(VersionList(deployment=deployment, versions=views))
    names = {r.id: r.name for r in registry.of_tenant(tenant.id)}
    views = [ModelVersionView.of(names.get(v.deployment_id, "?"), v)
             for v in registry.tenant_versions(tenant.id)]  # fmt: skip
    return json_response(VersionList(versions=views))
