"""``GET /v1/tenant``: who the caller's token speaks for, its quotas and what it holds now
(the dashboard's header, ``deepedge context``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict

from deepedge.api.dependencies import TenantDep, json_response, service_state

router = APIRouter(prefix="/v1", tags=["tenant"])


class TenantView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    max_active_jobs: int
    max_queued_jobs: int
    max_cores: float
    max_gpus: int
    max_disk_mb: int
    active_jobs: int
    cores_in_use: float
    gpus_in_use: int


@router.get("/tenant", response_model=TenantView)
def whoami(request: Request, tenant: TenantDep) -> Response:
    active, cores, gpus = service_state(request).store.usage(tenant.id)
    return json_response(
        TenantView(
            id=tenant.id,
            name=tenant.name,
            max_active_jobs=tenant.max_active_jobs,
            max_queued_jobs=tenant.max_queued_jobs,
            max_cores=tenant.max_cores,
            max_gpus=tenant.max_gpus,
            max_disk_mb=tenant.max_disk_mb,
            active_jobs=active,
            cores_in_use=cores,
            gpus_in_use=gpus,
        )
    )
