"""What every router shares: the service's state, the caller's tenant, one JSON writer.

Every ``/v1`` route needs ``Authorization: Bearer <token>`` (:data:`TenantDep`). A token is
looked up in the store on every request (one indexed read), so a revoked one is refused
from the next request on, in every API process; ``/metrics`` wants the operator's
(:data:`OperatorDep`). The statuses a route may answer besides its own are declared once
here (:data:`AUTH_RESPONSES`) for the OpenAPI document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from deepedge.controlplane.deployments import DeploymentStore
from deepedge.core.errors import ForbiddenError, UnauthorizedError
from deepedge.dataplane.sample_store import SampleStore, sample_store_path
from deepedge.service.config import ServiceSettings
from deepedge.service.group_commit import SubmissionCommitter
from deepedge.service.records import JobRecord, Tenant
from deepedge.service.sandbox_run import SandboxRunner
from deepedge.service.store import JobStore
from deepedge.service.tenants import Principal, TokenRole
from deepedge.service.workspace import JobDir

bearer = HTTPBearer(auto_error=False, description="a tenant token (`deepedge tenants create`)")


class ErrorBody(BaseModel):
    """Every error answer: ``error`` (a stable code), ``message`` (one line), and for bad
    input the ``field`` at fault."""

    error: str
    message: str
    field: str | None = None


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing, unknown or revoked token"},
    404: {"model": ErrorBody, "description": "not found (another tenant's is not found too)"},
}


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
    committer: SubmissionCommitter
    runner: SandboxRunner  # runs tenant code (a workload's check) in the tenant's sandbox


def service_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


def deployment_store(request: Request) -> DeploymentStore:
    return DeploymentStore(service_state(request).store)


def sample_store(request: Request) -> SampleStore:
    """The site's sample store, opened once per app (a connection per thread)."""
    state = request.app.state
    store: SampleStore | None = getattr(state, "sample_store", None)
    if store is None:
        store = state.sample_store = SampleStore(
            sample_store_path(service_state(request).settings.data_dir)
        )
    return store


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing bearer token (Authorization: Bearer <token>)")
    principal = service_state(request).store.tenancy.authenticate(credentials.credentials)
    if principal is None:
        raise UnauthorizedError("unknown or revoked token")
    return principal


PrincipalDep = Annotated[Principal, Depends(current_principal)]


async def current_tenant(principal: PrincipalDep) -> Tenant:
    if principal.tenant is None:
        raise ForbiddenError("an operator token has no tenant; use a tenant's token")
    return principal.tenant


TenantDep = Annotated[Tenant, Depends(current_tenant)]


async def current_operator(request: Request) -> None:
    """The operator's token, unless the service was started with its metrics public."""
    if service_state(request).settings.public_metrics:
        return
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError("missing bearer token: /metrics needs the operator's token")
    principal = service_state(request).store.tenancy.authenticate(token)
    if principal is None:
        raise UnauthorizedError("unknown or revoked token")
    if principal.role is not TokenRole.OPERATOR:
        raise ForbiddenError("/metrics counts every tenant's jobs: it needs an operator token")


OperatorDep = Annotated[None, Depends(current_operator)]


def json_response(document: BaseModel, status_code: int = 200) -> Response:
    """Serialise once (the hot paths skip FastAPI's second validation of the response)."""
    return Response(document.model_dump_json(), status_code, media_type="application/json")
