"""Inference keys in the store: created (the secret shown once), listed, revoked.

A key opens one deployment's inference endpoint (:mod:`deepedge.dataplane.keys` says how
the data plane checks it); only its SHA-256 digest and a short prefix (to tell keys apart in
a listing) are stored. Revocation is a timestamp: a revoked key leaves the serving table
that the data plane's replicas follow, so it stops working within one table poll.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update

from deepedge.controlplane.records import DeploymentRecord
from deepedge.core.errors import NotFoundError
from deepedge.dataplane.keys import KeyGrant, key_digest, new_key
from deepedge.service.store import JobStore
from deepedge.service.tables import InferenceKeyRow

KEYS = InferenceKeyRow.__table__
SHOWN_PREFIX = 12  # "dpk_" and 8 characters of the secret


@dataclass(frozen=True)
class InferenceKey:
    id: str
    deployment_id: str
    name: str
    prefix: str
    created_at: float
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> InferenceKey:
        return cls(row.id, row.deployment_id, row.name, row.prefix, row.created_at,
                   row.revoked_at)  # fmt: skip

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "prefix": self.prefix,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "active": self.revoked_at is None,
        }


class InferenceKeyStore:
    def __init__(self, store: JobStore) -> None:
        self.store = store

    def create(
        self, deployment: DeploymentRecord, name: str, now: float | None = None
    ) -> tuple[InferenceKey, str]:
        """A new key for ``deployment``: its record and the secret (never stored)."""
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
        }
        with self.store.write_connection() as conn:
            conn.execute(insert(InferenceKeyRow).values(**row))
        return InferenceKey(row["id"], deployment.id, name, row["prefix"], created,
                            None), secret  # fmt: skip

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
        return InferenceKey(key.id, key.deployment_id, key.name, key.prefix, key.created_at, at)

    def live_grants(self) -> dict[str, KeyGrant]:
        """Every live key of the site, by digest (what the data plane checks against)."""
        query = select(KEYS.c.digest, KEYS.c.deployment_id, KEYS.c.tenant_id).where(
            KEYS.c.revoked_at.is_(None)
        )
        with self.store.read_connection() as conn:
            return {r.digest: KeyGrant(r.deployment_id, r.tenant_id) for r in conn.execute(query)}
