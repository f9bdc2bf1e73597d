"""``/v1/tokens``: a tenant's own tokens -- list, mint, revoke (refused from the next
request on, in every API process: tokens are read from the store on every request).

A job's token (``api_access``) acts as its tenant on the other routes but may not manage
tokens (403): a job must not mint a credential that outlives it. Secrets are shown once,
when minted; the store keeps only their SHA-256.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from deepedge.api.dependencies import PrincipalDep, service_state
from deepedge.core.errors import ForbiddenError
from deepedge.service.tenants import Principal, TokenRecord, TokenRole

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


class TokenView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    role: TokenRole
    label: str
    job_id: str | None
    created_at: float
    revoked_at: float | None

    @classmethod
    def of(cls, record: TokenRecord) -> TokenView:
        return cls(id=record.id, role=record.role, label=record.label, job_id=record.job_id,
                   created_at=record.created_at, revoked_at=record.revoked_at)  # fmt: skip


class TokenList(BaseModel):
    tokens: list[TokenView]


class NewToken(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: Annotated[str, Field(min_length=1, max_length=128)] = "api"


class MintedToken(TokenView):
    token: str = Field(description="the secret: shown this once, never stored")


def _tenant_owner(principal: Principal) -> Principal:
    if principal.role is not TokenRole.TENANT or principal.tenant is None:
        raise ForbiddenError(f"a {principal.role} token cannot manage tokens; use a tenant's")
    return principal


@router.get("")
def list_tokens(request: Request, principal: PrincipalDep) -> TokenList:
    """Every token of the caller's tenant, revoked ones included (never the secrets)."""
    tenant = _tenant_owner(principal).tenant
    assert tenant is not None
    return TokenList(
        tokens=[TokenView.of(t) for t in service_state(request).store.tokens(tenant.id)]
    )


@router.post("", status_code=201, responses={403: {"description": "not a tenant's token"}})
def mint_token(request: Request, principal: PrincipalDep, body: NewToken) -> MintedToken:
    tenant = _tenant_owner(principal).tenant
    assert tenant is not None
    record, secret = service_state(request).store.create_token(
        TokenRole.TENANT, tenant_id=tenant.id, label=body.label
    )
    return MintedToken(**TokenView.of(record).model_dump(), token=secret)


@router.delete("/{token_id}", responses={403: {"description": "not a tenant's token"}})
def revoke_token(request: Request, principal: PrincipalDep, token_id: str) -> TokenView:
    """Revoke one of the tenant's tokens (the caller's own included): refused from the next
    request on. Another tenant's token is "not found"."""
    tenant = _tenant_owner(principal).tenant
    assert tenant is not None
    return TokenView.of(service_state(request).store.revoke_token(token_id, tenant.id))
