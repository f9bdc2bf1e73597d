"""What every router shares: the service's state, the caller's tenant, one JSON writer.

Every ``/v1`` route needs ``Authorization: Bearer <token>`` (:data:`TenantDep`); tokens are
looked up in the store and cached for :data:`TOKEN_CACHE_S` seconds per process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from deepedge.controlplane.deployments import DeploymentStore
from deepedge.core.errors import UnauthorizedError
from deepedge.service.config import ServiceSettings
from deepedge.service.group_commit import SubmissionCommitter
from deepedge.service.records import JobRecord, Tenant
from deepedge.service.store import JobStore
from deepedge.service.tenants import hash_token
from deepedge.service.workspace import JobDir

TOKEN_CACHE_S = 10.0
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


def service_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


def deployment_store(request: Request) -> DeploymentStore:
    return DeploymentStore(service_state(request).store)


async def current_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Tenant:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing bearer token (Authorization: Bearer <token>)")
    state = service_state(request)
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


def json_response(document: BaseModel, status_code: int = 200) -> Response:
    """Serialise once (the hot paths skip FastAPI's second validation of the response)."""
    return Response(document.model_dump_json(), status_code, media_type="application/json")
