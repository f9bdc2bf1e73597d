"""Inference keys: what a camera holds to reach one deployment's endpoint.

A key is scoped to one deployment (not its tenant's API token): random, shown once, stored
only as its SHA-256 digest (256 bits of entropy, so an unsalted digest cannot be brute
forced), and revocable. The data plane checks every request against the published table of
live keys (:class:`~deepedge.dataplane.serving_table.ServingTable`):

==========================================  ======
a missing, malformed, unknown or revoked key  401
a key of another tenant, or an unknown model  404 (another tenant's models are not there)
a key of another deployment of the tenant     403
the deployment's own key                      --
==========================================  ======
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from deepedge.core.errors import ForbiddenError, NotFoundError, UnauthorizedError

KEY_PREFIX = "dpk_"


@dataclass(frozen=True)
class KeyGrant:
    """What one live key opens."""

    deployment_id: str
    tenant_id: str


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def bearer(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header (None when absent or malformed)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


def authorize(
    keys: Mapping[str, KeyGrant],
    authorization: str | None,
    deployment_id: str | None,
    tenant_id: str | None,
) -> KeyGrant:
    """Check a request's key for the deployment its URL names (None: no such model).

    Raises :class:`UnauthorizedError`, :class:`NotFoundError` or :class:`ForbiddenError`
    as the module's table says. The look-up is by digest, never by the secret itself.
    """
    key = bearer(authorization)
    if key is None:
        raise UnauthorizedError("an inference key is needed: Authorization: Bearer <key>")
    digest = key_digest(key)
    grant = keys.get(digest)
    if grant is None:
        raise UnauthorizedError("invalid or revoked inference key")
    if deployment_id is None or grant.tenant_id != tenant_id:
        raise NotFoundError("unknown model")
    if grant.deployment_id != deployment_id:
        raise ForbiddenError("this inference key is for another deployment")
    return grant
