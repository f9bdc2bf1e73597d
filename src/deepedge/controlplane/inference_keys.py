"""Inference keys in the store: created (the secret shown once), listed, revoked.

A key opens one deployment's inference endpoint (:mod:`deepedge.dataplane.keys` says how
the data plane checks it); only its SHA-256 digest and a short prefix (to tell keys apart in
a listing) are stored. Revocation is a timestamp: a revoked key leaves the serving table
that the data plane's replicas follow, so it stops working within one table poll.

A key created with a job's token (a sandboxed job with ``api_access``) records that job and
ends with it, as the job's token does (:func:`deepedge.service.tenants.revoke_job_credentials`,
in the transition that ends the job); it is created only while that token is live, in the
same write transaction, so a job that ends meanwhile leaves no key behind.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update

from deepedge.controlplane.records import DeploymentRecord
from deepedge.core.errors import NotFoundError, UnauthorizedError
from deepedge.dataplane.keys import KeyGrant, key_digest, new_key
from deepedge.service.store import JobStore
from deepedge.service.tables import InferenceKeyRow
from deepedge.service.tenants import token_live

KEYS = InferenceKeyRow.__table__
SHOWN_PREFIX = 12  # "dpk_" and 8 characters of the secret


@dataclass(frozen=True)
class JobToken:
    """The job token a key is being created with: the job, and the token to check live."""

    job_id: str
    token_id: str


@dataclass(frozen=True)
class InferenceKey:
    id: str
    deployment_id: str
    name: str
    prefix: str
    created_at: float
    revoked_at: float | None
    job_id: str | None = None  # the job whose token created it: the key ends with the job

    @classmethod
    def from_row(cls, row: Any) -> InferenceKey:
        return cls(row.id, row.deployment_id, row.name, row.prefix, row.created_at,
                   row.revoked_at, row.job_id)  # fmt: skip

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "prefix": self.prefix,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "active": self.revoked_at is None,
            "job_id": self.job_id,
        }


class InferenceKeyStore:
    def __init__(self, store: JobStore) -> None:
        self.store = store

    def create(
        self,
        deployment: DeploymentRecord,
        name: str,
        now: float | None = None,
        job_token: JobToken | None = None,
    ) -> tuple[InferenceKey, str]:
        """A new key for ``deployment``: its record and the secret (never stored). Made with
        a job's token (``job_token``), it ends with that job; a token revoked meanwhile (the
        job ended) is :class:`UnauthorizedError` and no key."""
        secret = new_key()
        created = time.time() if now is None else now
        row: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "tenant_id": deployment.tenant_id,
            "deployment_id": deployment.id,
            "name": name,
            "digest": key_digest(secret),
            "prefix": secret[:SHOWN_PREFIX],
            "created_at": created,
            "revoked_at": None,
            "job_id": job_token.job_id if job_token is not None else None,
        }
        with self.store.write_connection() as conn:
            if job_token is not None and not token_live(conn, job_token.token_id):
                raise UnauthorizedError("unknown or revoked token (its job has ended)")
            conn.execute(insert(InferenceKeyRow).values(**row))
        return InferenceKey(row["id"], deployment.id, name, row["prefix"], created,
                            None, row["job_id"]), secret  # fmt: skip

    def of_deployment(self, deployment: DeploymentRecord) -> list[InferenceKey]:
        query = (
            select(KEYS)
            .where(KEYS.c.deployment_id == deployment.id)
            .order_by(KEYS.c.created_at, KEYS.c.id)
        )
        with self.store.read_connection() as conn:
            return [InferenceKey.from_row(r) for r in conn.execute(query)]

    def revoke(
        self, deployment: DeploymentRecord, key_id: str, now: float | None = None
    ) -> InferenceKey:
        """Revoke one of the deployment's keys (by id or by its shown prefix); revoking a
        revoked key is a no-op that returns it."""
        match = [k for k in self.of_deployment(deployment) if key_id in {k.id, k.prefix}]
        if not match:
            raise NotFoundError(f"inference key {key_id} not found")
        key = match[0]
        if key.revoked_at is not None:
            return key
        at = time.time() if now is None else now
        with self.store.write_connection() as conn:
            conn.execute(
                update(InferenceKeyRow)
                .where(InferenceKeyRow.id == key.id, InferenceKeyRow.revoked_at.is_(None))
                .values(revoked_at=at)
            )
        return dataclasses.replace(key, revoked_at=at)

    def live_grants(self) -> dict[str, KeyGrant]:
        """Every live key of the site, by digest (what the data plane checks against)."""
        query = select(KEYS.c.digest, KEYS.c.deployment_id, KEYS.c.tenant_id).where(
            KEYS.c.revoked_at.is_(None)
        )
        with self.store.read_connection() as conn:
            return {r.digest: KeyGrant(r.deployment_id, r.tenant_id) for r in conn.execute(query)}
