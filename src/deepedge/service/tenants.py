"""Tenants and their credentials: tokens are random, shown once, stored only as SHA-256.

A token carries 256 bits of entropy, so an unsalted digest cannot be brute-forced; the
lookup is by digest (indexed, one read per request: a revoked token is refused from the
next request on, in every API process). Three roles:

=========  =========================================================================
tenant     what ``deepedge tenants create`` prints and ``deepedge tokens create``
           mints; acts as its tenant on ``/v1``
job        minted for one sandboxed job that asked for the API (``api_access``); acts
           as the job's tenant, may not mint tokens; revoked when the job ends, with
           the inference keys it created
operator   no tenant: reads ``/metrics`` (every tenant's counts)
=========  =========================================================================

The functions take the caller's connection (:meth:`JobStore.write_connection`), so a
tenant, its first token and its sandbox uid commit together.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import re
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from deepedge.core.errors import ConflictError, InvalidInputError, NotFoundError
from deepedge.service.disk_quota import DEFAULT_MAX_DISK_MB
from deepedge.service.records import JobId, Tenant, TenantId
from deepedge.service.tables import InferenceKeyRow, SandboxUidsRow, TenantRow, TokenRow
from deepedge.service.uid_range import FIRST_UID, UidRange

TOKEN_PREFIX = "dpe_"
# A tenant's name is part of file names (its saved token) and of its models' names.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Tenants' sandbox users: the store's range (deepedge.service.uid_range), in creation order;
# a store that records none (never started as a service) numbers from the first range's.
TENANT_UID_BASE = FIRST_UID
TENANTS, TOKENS = TenantRow.__table__, TokenRow.__table__
UIDS = SandboxUidsRow.__table__


class TokenRole(enum.StrEnum):
    TENANT = "tenant"
    JOB = "job"
    OPERATOR = "operator"


@dataclass(frozen=True)
class TokenRecord:
    """A token without its secret (which is never stored)."""

    id: str
    tenant_id: TenantId | None
    role: TokenRole
    label: str
    job_id: JobId | None
    created_at: float
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> TokenRecord:
        return cls(
            id=row.id, tenant_id=row.tenant_id, role=TokenRole(row.role), label=row.label,
            job_id=row.job_id, created_at=row.created_at, revoked_at=row.revoked_at,
        )  # fmt: skip


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a token's role, and its tenant (none for the operator)."""

    role: TokenRole
    token_id: str
    tenant: Tenant | None
    job_id: JobId | None = None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def insert_tenant(
    conn: Connection,
    name: str,
    *,
    max_active_jobs: int,
    max_queued_jobs: int,
    max_cores: float,
    max_gpus: int,
    grants: Sequence[str] = (),
    max_disk_mb: int = DEFAULT_MAX_DISK_MB,
) -> Tenant:
    """A new tenant with the next sandbox uid of the store's range (IntegrityError on a
    taken name; ConflictError when the range is full; InvalidInputError for a name that is
    not letters, digits, ``.``, ``_`` and ``-``, 64 at most, starting with a letter or digit)."""
    if TENANT_NAME.fullmatch(name) is None:
        shown = repr(name[:40] + "..." * (len(name) > 40)) if name.strip() else "nothing"
        raise InvalidInputError(
            f"a tenant's name is 1 to 64 letters, digits, '.', '_' or '-' (starting with a "
            f"letter or digit), got {shown}",
            field="name",
        )
    highest = conn.execute(select(func.max(TENANTS.c.uid))).scalar()
    uids = recorded_uid_range(conn)
    first = uids.first if uids is not None else TENANT_UID_BASE
    uid = first if highest is None else int(highest) + 1
    if uids is not None and uid not in uids:
        raise ConflictError(f"every sandbox uid of this service's range {uids} is taken")
    values = {
        "id": uuid.uuid4().hex, "name": name, "max_active_jobs": max_active_jobs,
        "max_queued_jobs": max_queued_jobs, "max_cores": max_cores, "max_gpus": max_gpus,
        "created_at": time.time(), "uid": uid, "grants_json": json.dumps(list(grants)),
        "max_disk_mb": max_disk_mb,
    }  # fmt: skip
    conn.execute(insert(TenantRow), values)
    row = conn.execute(select(TENANTS).where(TENANTS.c.id == values["id"])).one()
    return Tenant.from_row(row)


def insert_token(
    conn: Connection,
    role: TokenRole,
    secret: str,
    *,
    tenant_id: TenantId | None,
    label: str,
    job_id: JobId | None = None,
) -> TokenRecord:
    values = {
        "id": uuid.uuid4().hex, "tenant_id": tenant_id, "role": role.value,
        "label": label[:128], "job_id": job_id, "sha256": hash_token(secret),
        "created_at": time.time(), "revoked_at": None,
    }  # fmt: skip
    conn.execute(insert(TokenRow), values)
    return TokenRecord.from_row(_Values(values))


class _Values(dict[str, Any]):
    def __getattr__(self, name: str) -> Any:
        return self[name]


_PRINCIPAL = select(TOKENS, *[c.label(f"t_{c.name}") for c in TENANTS.c]).select_from(
    TOKENS.outerjoin(TENANTS, TOKENS.c.tenant_id == TENANTS.c.id)
)


def principal(conn: Connection, secret: str) -> Principal | None:
    """The live token ``secret`` is, or None (unknown or revoked)."""
    row = conn.execute(_PRINCIPAL.where(TOKENS.c.sha256 == hash_token(secret))).first()
    if row is None or row.revoked_at is not None:
        return None
    tenant = None
    if row.tenant_id is not None:
        mapping = row._mapping
        tenant = Tenant.from_row(_Values({c.name: mapping[f"t_{c.name}"] for c in TENANTS.c}))
    return Principal(TokenRole(row.role), row.id, tenant, row.job_id)


def tokens_of(conn: Connection, tenant_id: TenantId | None) -> list[TokenRecord]:
    """A tenant's tokens (the operator's with None), oldest first, revoked ones included."""
    where = TOKENS.c.tenant_id.is_(None) if tenant_id is None else TOKENS.c.tenant_id == tenant_id
    rows = conn.execute(select(TOKENS).where(where).order_by(TOKENS.c.created_at, TOKENS.c.id))
    return [TokenRecord.from_row(r) for r in rows]


def revoke(conn: Connection, token_id: str, tenant_id: TenantId | None) -> TokenRecord:
    """Revoke one token of ``tenant_id`` (None: the operator, any token); another tenant's
    token is "not found". Revoking a revoked token changes nothing."""
    query = select(TOKENS).where(TOKENS.c.id == token_id)
    if tenant_id is not None:
        query = query.where(TOKENS.c.tenant_id == tenant_id)
    row = conn.execute(query).first()
    if row is None:
        raise NotFoundError(f"token {token_id} not found")
    if row.revoked_at is None:
        conn.execute(update(TokenRow).where(TOKENS.c.id == token_id).values(revoked_at=time.time()))
    return TokenRecord.from_row(conn.execute(query).one())


def revoke_job_credentials(conn: Connection, job_id: JobId) -> int:
    """Revoke what a job could use the API with (it ended): the tokens minted for it, and
    the inference keys it created with them (a key would otherwise open its tenant's
    endpoint for as long as nobody revoked it). Returns how many tokens were live."""
    now = time.time()
    result = conn.execute(
        update(TokenRow)
        .where(TOKENS.c.job_id == job_id, TOKENS.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    conn.execute(
        update(InferenceKeyRow)
        .where(InferenceKeyRow.job_id == job_id, InferenceKeyRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return int(result.rowcount or 0)


def token_live(conn: Connection, token_id: str) -> bool:
    """Whether the token ``token_id`` is still live (read in the caller's transaction)."""
    row = conn.execute(select(TOKENS.c.revoked_at).where(TOKENS.c.id == token_id)).first()
    return row is not None and row.revoked_at is None


def recorded_uid_range(conn: Connection) -> UidRange | None:
    row = conn.execute(select(UIDS)).first()
    return None if row is None else UidRange(int(row.first_uid), int(row.size))


def uid_span(conn: Connection) -> tuple[int, int] | None:
    """The lowest and highest sandbox uid of the store's tenants (None: no tenant)."""
    low, high = conn.execute(select(func.min(TENANTS.c.uid), func.max(TENANTS.c.uid))).one()
    return None if low is None else (int(low), int(high))


def record_uid_range(conn: Connection, uids: UidRange) -> None:
    """Record the store's range; one that would leave a tenant's uid out is refused."""
    span = uid_span(conn)
    if span is not None and not (span[0] in uids and span[1] in uids):
        raise ConflictError(f"the range {uids} leaves out tenants' uids {span[0]}-{span[1]}")
    values = {"first_uid": uids.first, "size": uids.size, "recorded_at": time.time()}
    if conn.execute(update(SandboxUidsRow).where(UIDS.c.id == 1).values(**values)).rowcount:
        return
    conn.execute(insert(SandboxUidsRow), {"id": 1, **values})


def set_grants(conn: Connection, tenant_id: TenantId, grants: Sequence[str]) -> None:
    result = conn.execute(
        update(TenantRow)
        .where(TENANTS.c.id == tenant_id)
        .values(grants_json=json.dumps(list(grants)))
    )
    if result.rowcount != 1:
        raise NotFoundError(f"tenant {tenant_id} not found")


def set_max_disk_mb(conn: Connection, tenant_id: TenantId, max_disk_mb: int) -> None:
    result = conn.execute(
        update(TenantRow).where(TENANTS.c.id == tenant_id).values(max_disk_mb=max_disk_mb)
    )
    if result.rowcount != 1:
        raise NotFoundError(f"tenant {tenant_id} not found")


Connect = Callable[[], contextlib.AbstractContextManager[Connection]]


class Tenancy:
    """Tenants and their tokens, on the store's connections (``JobStore.tenancy``): a read
    connection, and a write transaction (serialised writers) committed on exit."""

    def __init__(self, read: Connect, write: Connect) -> None:
        self._read = read
        self._write = write

    def create(
        self,
        name: str,
        token: str,
        *,
        max_active_jobs: int = 4,
        max_queued_jobs: int = 1000,
        max_cores: float = 8.0,
        max_gpus: int = 0,
        grants: Sequence[str] = (),
        max_disk_mb: int = DEFAULT_MAX_DISK_MB,
    ) -> Tenant:
        """A tenant, its sandbox uid and its first token ``token``, in one transaction."""
        try:
            with self._write() as conn:
                tenant = insert_tenant(
                    conn, name, max_active_jobs=max_active_jobs, max_queued_jobs=max_queued_jobs,
                    max_cores=max_cores, max_gpus=max_gpus, grants=grants,
                    max_disk_mb=max_disk_mb,
                )  # fmt: skip
                insert_token(conn, TokenRole.TENANT, token, tenant_id=tenant.id,
                             label="first token")  # fmt: skip
        except IntegrityError as exc:
            raise ConflictError(f"tenant {name!r} (or that token) already exists") from exc
        return tenant

    def authenticate(self, token: str) -> Principal | None:
        """Who ``token`` is (None: unknown or revoked); one indexed read."""
        with self._read() as conn:
            return principal(conn, token)

    def by_token(self, token: str) -> Tenant | None:
        found = self.authenticate(token)
        return found.tenant if found is not None else None

    def get(self, tenant_id: TenantId) -> Tenant:
        return self._one(TENANTS.c.id == tenant_id, f"tenant {tenant_id} not found")

    def named(self, name: str) -> Tenant:
        return self._one(TENANTS.c.name == name, f"tenant {name!r} not found")

    def _one(self, where: Any, missing: str) -> Tenant:
        with self._read() as conn:
            row = conn.execute(select(TENANTS).where(where)).first()
        if row is None:
            raise NotFoundError(missing)
        return Tenant.from_row(row)

    def all(self) -> list[Tenant]:
        with self._read() as conn:
            rows = conn.execute(select(TENANTS).order_by(TENANTS.c.created_at))
            return [Tenant.from_row(r) for r in rows]

    def uid_range(self) -> UidRange | None:
        """The range the store's sandbox uids come from (None: never recorded)."""
        with self._read() as conn:
            return recorded_uid_range(conn)

    def uid_span(self) -> tuple[int, int] | None:
        with self._read() as conn:
            return uid_span(conn)

    def record_uid_range(self, uids: UidRange) -> None:
        with self._write() as conn:
            record_uid_range(conn, uids)

    def set_grants(self, tenant_id: TenantId, grants: Sequence[str]) -> Tenant:
        with self._write() as conn:
            set_grants(conn, tenant_id, grants)
        return self.get(tenant_id)

    def set_max_disk_mb(self, tenant_id: TenantId, max_disk_mb: int) -> Tenant:
        with self._write() as conn:
            set_max_disk_mb(conn, tenant_id, max_disk_mb)
        return self.get(tenant_id)

    def create_token(
        self,
        role: TokenRole,
        *,
        tenant_id: TenantId | None,
        label: str,
        job_id: JobId | None = None,
    ) -> tuple[TokenRecord, str]:
        """A new token and its secret (shown once; only its digest is kept)."""
        secret = new_token()
        with self._write() as conn:
            record = insert_token(conn, role, secret, tenant_id=tenant_id, label=label,
                                  job_id=job_id)  # fmt: skip
        return record, secret

    def tokens(self, tenant_id: TenantId | None) -> list[TokenRecord]:
        with self._read() as conn:
            return tokens_of(conn, tenant_id)

    def revoke(self, token_id: str, tenant_id: TenantId | None) -> TokenRecord:
        """Refused from the next request on (``tenant_id`` None: the operator's revoke)."""
        with self._write() as conn:
            return revoke(conn, token_id, tenant_id)

    def revoke_job_credentials(self, job_id: JobId) -> int:
        with self._write() as conn:
            return revoke_job_credentials(conn, job_id)
