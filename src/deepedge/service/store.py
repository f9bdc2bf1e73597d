"""The durable job store: SQLite (WAL, ``synchronous=FULL``) embedded, PostgreSQL by URL.

Contract:

* :meth:`JobStore.submit` returns only after the job row *and* its first history entry are
  committed in one transaction, so an acknowledged job survives any crash, and a crash
  before the commit leaves nothing behind.
* Every status change goes through :meth:`JobStore.transition`, a compare-and-set on the
  row's status checked against the one transition table (:mod:`deepedge.service.status`),
  written together with its timestamped history entry.
* Every tenant-facing read is scoped by tenant id; another tenant's job is "not found".

Writers on SQLite take the lock up front (``BEGIN IMMEDIATE``) and are serialised across
threads and processes (:mod:`deepedge.service.write_lock`), so concurrent writers never fail
with "database is locked" half-way through a transaction, and never sleep-poll for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    Select,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from deepedge.core.errors import (
    ConflictError,
    DeepEdgeError,
    NotFoundError,
)
from deepedge.service import tenants
from deepedge.service.disk_quota import DEFAULT_MAX_DISK_MB
from deepedge.service.manifest import JobManifest
from deepedge.service.records import (
    CheckpointRecord,
    HistoryEntry,
    JobId,
    JobRecord,
    LearnerRecord,
    Tenant,
    TenantId,
)
from deepedge.service.status import ACTIVE, TERMINAL, ErrorCode, JobStatus, check_transition
from deepedge.service.submissions import RowValues, Submission, insert_submissions
from deepedge.service.tables import CheckpointRow, HistoryRow, JobRow, LearnerRow, TenantRow
from deepedge.service.write_lock import WriteLock

log = logging.getLogger(__name__)

JOBS, TENANTS = JobRow.__table__, TenantRow.__table__


# The hot statements are built once (bound parameters, not literals): building a statement
# costs more CPU than SQLAlchemy's compiled-cache lookup and SQLite's indexed read together.
_HISTORY, _CHECKPOINTS = HistoryRow.__table__, CheckpointRow.__table__
_JOB_BY_ID = select(JOBS).where(JOBS.c.id == bindparam("job_id"))
_LAST_SEQ = select(func.coalesce(func.max(_HISTORY.c.seq), -1)).where(
    _HISTORY.c.job_id == bindparam("job_id")
)
_INSERT_HISTORY = insert(HistoryRow)
_HISTORY_OF = (
    select(_HISTORY).where(_HISTORY.c.job_id == bindparam("job_id")).order_by(_HISTORY.c.seq)
)
_CHECKPOINTS_OF = (
    select(_CHECKPOINTS)
    .where(_CHECKPOINTS.c.job_id == bindparam("job_id"))
    .order_by(_CHECKPOINTS.c.created_at, _CHECKPOINTS.c.id)
)


def _list_statement(by_status: bool, by_before: bool, by_before_id: bool) -> Select[Any]:
    """Newest first, keyset-paged on ``(created_at, id)``: an index range, never an offset."""
    query = select(JOBS).where(JOBS.c.tenant_id == bindparam("tenant_id"))
    if by_status:
        query = query.where(JOBS.c.status == bindparam("status"))
    if by_before_id:
        # (created_at, id) < (before, before_id), written so that the index range is plain.
        query = query.where(
            JOBS.c.created_at <= bindparam("before"),
            or_(JOBS.c.created_at < bindparam("before"), JOBS.c.id < bindparam("before_id")),
        )
    elif by_before:
        query = query.where(JOBS.c.created_at < bindparam("before"))
    return query.order_by(JOBS.c.created_at.desc(), JOBS.c.id.desc()).limit(
        bindparam("limit", type_=Integer)
    )


_LIST = {
    (a, b, c): _list_statement(a, b, c)
    for a in (False, True)
    for b in (False, True)
    for c in (False, True)
}


MIGRATIONS_DIR = Path(__file__).with_name("migrations")
HEAD_REVISION = "0009"
"""Newest migration shipped; a store already there skips importing Alembic at startup."""


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sqlite_file(url: str) -> Path | None:
    """The side file that serialises writers of this database (None: in-memory)."""
    path = url.removeprefix("sqlite:///").removeprefix("sqlite://")
    return Path(f"{path}.writelock") if path and path != ":memory:" else None


def _sqlite_engine(url: str, immediate: bool) -> Engine:
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=32
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Manual transaction control so that BEGIN IMMEDIATE is ours to issue.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class JobStore:
    """Repository over the job tables; returns frozen records, never ORM rows."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self._read_engine = _sqlite_engine(url, immediate=False)
            self._write_engine = _sqlite_engine(url, immediate=True)
        else:
            self._read_engine = create_engine(url, pool_size=20, max_overflow=20)
            self._write_engine = self._read_engine
        self._reader = sessionmaker(self._read_engine, expire_on_commit=False)
        self._writer = sessionmaker(self._write_engine, expire_on_commit=False)
        self._write_lock: contextlib.AbstractContextManager[object] = (
            WriteLock(_sqlite_file(url)) if self.is_sqlite else contextlib.nullcontext()
        )
        self.tenancy = tenants.Tenancy(self._core, self._write_core)

    # -- plumbing -------------------------------------------------------------------------

    def schema_revision(self) -> str | None:
        try:
            with self._read_engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except (OperationalError, ProgrammingError):
            return None

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision shipped in the package.

        On SQLite a migration that rebuilds a table others reference (copy, drop, rename)
        runs with foreign keys off, as SQLite's own procedure for such changes asks, and
        every reference is checked before the commit."""
        if self.schema_revision() == HEAD_REVISION:
            return
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self._write_engine.connect() as conn:
            raw = conn.connection.driver_connection if self.is_sqlite else None
            if raw is not None:  # outside any transaction: inside one the pragma is ignored
                raw.execute("PRAGMA foreign_keys=OFF")
            try:
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
                if raw is not None:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        conn.rollback()
                        raise ConflictError(f"migration broke foreign keys: {broken[:5]}")
                conn.commit()
            finally:
                if raw is not None:
                    raw.execute("PRAGMA foreign_keys=ON")

    def dispose(self) -> None:
        self._read_engine.dispose()
        if self._write_engine is not self._read_engine:
            self._write_engine.dispose()

    @contextlib.contextmanager
    def _write(self) -> Iterator[Session]:
        with self._write_lock, self._writer.begin() as session:
            yield session

    @contextlib.contextmanager
    def _core(self) -> Iterator[Connection]:
        """A read-only Core connection: the cheap path for the API's hot reads."""
        with self._read_engine.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        with self._reader() as session, session.begin():
            yield session

    def write_connection(self) -> contextlib.AbstractContextManager[Connection]:
        """A Core connection in a write transaction (serialised writers), committed on exit:
        for repositories that share this database (:mod:`deepedge.controlplane.deployments`)."""
        return self._write_core()

    @contextlib.contextmanager
    def _write_core(self) -> Iterator[Connection]:
        with self._write_lock, self._write_engine.begin() as conn:
            yield conn

    def read_connection(self) -> contextlib.AbstractContextManager[Connection]:
        """A read-only Core connection (see :meth:`write_connection`)."""
        return self._core()

    def ping(self) -> None:
        with self._read() as session:
            session.execute(select(1))

    # -- tenants (:class:`deepedge.service.tenants.Tenancy`: tenants and their tokens) ----

    def create_tenant(
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
        """A tenant, its sandbox uid and its first token (:meth:`Tenancy.create`)."""
        return self.tenancy.create(
            name, token, max_active_jobs=max_active_jobs, max_queued_jobs=max_queued_jobs,
            max_cores=max_cores, max_gpus=max_gpus, grants=grants, max_disk_mb=max_disk_mb,
        )  # fmt: skip

    def tenant(self, tenant_id: TenantId) -> Tenant:
        return self.tenancy.get(tenant_id)

    def tenant_by_token(self, token: str) -> Tenant | None:
        """The tenant a live tenant or job token acts for."""
        return self.tenancy.by_token(token)

    # -- jobs -----------------------------------------------------------------------------

    def submit(
        self, tenant: Tenant, manifest: JobManifest, idempotency_key: str | None = None
    ) -> tuple[JobRecord, bool]:
        """Insert a QUEUED job and its history entry in one committed transaction.

        Returns ``(job, created)``; a repeated idempotency key returns the first job.
        Raises :class:`QuotaExceededError` when the tenant could never or may not now queue it.
        """
        outcome = self.submit_many([Submission(tenant, manifest, idempotency_key)])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def submit_many(
        self, submissions: list[Submission]
    ) -> list[tuple[JobRecord, bool] | DeepEdgeError]:
        """Group commit: insert several submissions in ONE transaction (one fsync).

        Each submission is decided in order, as if submitted alone one after the other
        (idempotency keys and queue quotas see the earlier ones of the batch); one that is
        refused gets its error in its slot and does not stop the others. Nothing of the
        batch is visible, or acknowledged, before the commit returns.
        """
        with self._write_lock, self._write_engine.begin() as conn:
            return insert_submissions(conn, submissions)

    def get(self, job_id: str, tenant_id: TenantId | None = None) -> JobRecord:
        """Fetch a job; with ``tenant_id`` another tenant's job is indistinguishable from none."""
        with self._core() as conn:
            row = conn.execute(_JOB_BY_ID, {"job_id": job_id}).first()
        if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
            raise NotFoundError(f"job {job_id} not found")
        return JobRecord.from_row(row)

    def job_ids_with_prefix(self, tenant_id: TenantId, prefix: str, limit: int = 2) -> list[str]:
        """Up to ``limit`` of the tenant's job ids that start with ``prefix`` (hex digits
        only: nothing of it is a LIKE wildcard), in id order."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return []
        query = (
            select(JOBS.c.id)
            .where(JOBS.c.tenant_id == tenant_id, JOBS.c.id.like(prefix + "%"))
            .order_by(JOBS.c.id)
            .limit(limit)
        )
        with self._core() as conn:
            return [str(row.id) for row in conn.execute(query)]

    def view(
        self, job_id: str, tenant_id: TenantId
    ) -> tuple[JobRecord, list[HistoryEntry], list[CheckpointRecord]]:
        """A tenant's job with its history and checkpoints, read on one connection."""
        with self._core() as conn:
            row = conn.execute(_JOB_BY_ID, {"job_id": job_id}).first()
            if row is None or row.tenant_id != tenant_id:
                raise NotFoundError(f"job {job_id} not found")
            entries = conn.execute(_HISTORY_OF, {"job_id": job_id})
            saved = conn.execute(_CHECKPOINTS_OF, {"job_id": job_id})
            return (
                JobRecord.from_row(row),
                [HistoryEntry.from_row(r) for r in entries],
                [CheckpointRecord.from_row(r) for r in saved],
            )

    def list_jobs(
        self,
        tenant_id: TenantId,
        status: JobStatus | None = None,
        limit: int = 50,
        before: float | None = None,
        before_id: str | None = None,
    ) -> list[JobRecord]:
        """Newest first; the next page starts after the last one's ``(created_at, id)``
        (``before_id`` alone is ignored; ``before`` alone keeps the jobs older than it)."""
        by_before_id = before is not None and before_id is not None
        query = _LIST[(status is not None, before is not None, by_before_id)]
        params: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit}
        if status is not None:
            params["status"] = status.value
        if before is not None:
            params["before"] = before
        if by_before_id:
            params["before_id"] = before_id
        with self._core() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(query, params)]

    def jobs_in(self, statuses: Iterable[JobStatus], limit: int | None = None) -> list[JobRecord]:
        """Jobs in any of ``statuses``, oldest first (all tenants: for the manager only)."""
        query = select(JOBS).where(JOBS.c.status.in_([s.value for s in statuses]))
        query = query.order_by(JOBS.c.created_at).limit(limit)
        with self._core() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(query)]

    def queued_for(self, tenant_id: TenantId, limit: int) -> list[JobRecord]:
        """A tenant's oldest QUEUED jobs."""
        query = (
            select(JOBS)
            .where(JOBS.c.tenant_id == tenant_id, JOBS.c.status == JobStatus.QUEUED.value)
            .order_by(JOBS.c.created_at)
            .limit(limit)
        )
        with self._core() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(query)]

    def tenants_with_queued_jobs(self) -> list[TenantId]:
        """One index probe per tenant (not a pass over the whole queue)."""
        queued = (
            select(JOBS.c.id)
            .where(JOBS.c.tenant_id == TENANTS.c.id, JOBS.c.status == JobStatus.QUEUED.value)
            .exists()
        )
        query = select(TENANTS.c.id).where(queued).order_by(TENANTS.c.created_at)
        with self._core() as conn:
            return [TenantId(r[0]) for r in conn.execute(query)]

    def jobs_with_requests(self) -> list[JobRecord]:
        query = select(JOBS).where(JOBS.c.requested_action.is_not(None))
        with self._core() as conn:
            return [JobRecord.from_row(r) for r in conn.execute(query)]

    def history(self, job_id: JobId) -> list[HistoryEntry]:
        with self._core() as conn:
            return [HistoryEntry.from_row(r) for r in conn.execute(_HISTORY_OF, {"job_id": job_id})]

    def transition(
        self,
        job_id: JobId,
        target: JobStatus,
        cause: str,
        *,
        expected: JobStatus | None = None,
        error_code: ErrorCode | None = None,
        **fields: Any,
    ) -> JobRecord:
        """Move a job to ``target`` if the table allows it (and it is still ``expected``).

        The status update and its history entry commit together; a concurrent change makes
        the compare-and-set miss and raises :class:`ConflictError`.
        """
        now = time.time()
        # Core statements on one connection: this runs several times per job, and the ORM
        # unit of work (get, flush, refresh) cost about as much CPU as the rest together.
        with self._write_lock, self._write_engine.begin() as conn:
            row = conn.execute(_JOB_BY_ID, {"job_id": job_id}).first()
            if row is None:
                raise NotFoundError(f"job {job_id} not found")
            current = JobStatus(row.status)
            if expected is not None and current is not expected:
                raise ConflictError(f"job {job_id} is {current}, not {expected}")
            check_transition(current, target)
            values: dict[str, Any] = {
                "status": target.value,
                "version": row.version + 1,
                "updated_at": now,
                **fields,
            }
            if error_code is not None:
                values["error_code"] = error_code.value
                values["error_message"] = cause
            result = conn.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.version == row.version)
                .values(**values)
            )
            if result.rowcount != 1:
                raise ConflictError(f"job {job_id} changed concurrently; retry")
            if target in TERMINAL or target is JobStatus.HALTED:
                # the job's own API tokens (and the inference keys it made) end with it (a
                # halted job gets new tokens on resume)
                tenants.revoke_job_credentials(conn, job_id)
            seq = conn.execute(_LAST_SEQ, {"job_id": job_id}).scalar()
            conn.execute(
                _INSERT_HISTORY,
                {"job_id": job_id, "seq": int(seq or 0) + 1, "status": target.value,
                 "cause": cause, "at": now},
            )  # fmt: skip
            return JobRecord.from_row(RowValues({**row._mapping, **values}))

    def update_fields(self, job_id: JobId, **fields: Any) -> None:
        """Bookkeeping that is not a status change (requested action, attempt counters)."""
        with self._write() as session:
            session.execute(update(JobRow).where(JobRow.id == job_id).values(**fields))

    def request_action(self, job_id: JobId, action: str | None) -> None:
        self.update_fields(job_id, requested_action=action)

    def clear_request(self, job_id: JobId, action: str) -> None:
        """Forget a request once applied, unless a newer one replaced it meanwhile (a halt
        asked for while a checkpoint request was being applied must survive)."""
        with self._write() as session:
            session.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.requested_action == action)
                .values(requested_action=None)
            )

    def delete(self, job_id: JobId) -> None:
        with self._write() as session:
            for table in (CheckpointRow, LearnerRow, HistoryRow):
                session.execute(delete(table).where(table.job_id == job_id))
            session.execute(delete(JobRow).where(JobRow.id == job_id))

    def usage(self, tenant_id: TenantId) -> tuple[int, float, int]:
        """(active jobs, cores, GPUs) the tenant's jobs hold right now."""
        query = select(JobRow).where(
            JobRow.tenant_id == tenant_id, JobRow.status.in_([s.value for s in ACTIVE])
        )
        with self._read() as session:
            rows = list(session.scalars(query))
        manifests = [JobManifest.model_validate_json(r.manifest_json) for r in rows]
        return len(rows), sum(m.cores for m in manifests), sum(m.gpus for m in manifests)

    def counts_by_status(self) -> dict[JobStatus, int]:
        query = select(JobRow.status, func.count()).group_by(JobRow.status)
        with self._read() as session:
            counts = {JobStatus(s): int(n) for s, n in session.execute(query)}
        return {s: counts.get(s, 0) for s in JobStatus}

    # -- learners -------------------------------------------------------------------------

    def add_learner(self, record: LearnerRecord) -> None:
        """Record a learner attempt, or its collector once started: an attempt is recorded
        first with ``pid`` 0 (before its collector exists), so a service killed between
        the start and the record still knows the attempt (and never starts it twice)."""
        with self._write() as session:
            row = session.scalars(
                select(LearnerRow).where(
                    LearnerRow.job_id == record.job_id,
                    LearnerRow.rank == record.rank,
                    LearnerRow.attempt == record.attempt,
                )
            ).first()
            if row is None:
                session.add(LearnerRow(**dataclasses.asdict(record)))
            else:
                row.pid, row.pid_started_at = record.pid, record.pid_started_at

    def learners(self, job_id: JobId, attempt: int | None = None) -> list[LearnerRecord]:
        query = select(LearnerRow).where(LearnerRow.job_id == job_id)
        if attempt is not None:
            query = query.where(LearnerRow.attempt == attempt)
        with self._read() as session:
            return [
                LearnerRecord.from_row(r) for r in session.scalars(query.order_by(LearnerRow.id))
            ]

    def end_learner(
        self, job_id: JobId, rank: int, attempt: int, exit_code: int, at: float
    ) -> None:
        with self._write() as session:
            session.execute(
                update(LearnerRow)
                .where(
                    LearnerRow.job_id == job_id,
                    LearnerRow.rank == rank,
                    LearnerRow.attempt == attempt,
                    LearnerRow.exit_code.is_(None),
                )
                .values(exit_code=exit_code, ended_at=at)
            )

    # -- checkpoints ----------------------------------------------------------------------

    def add_checkpoint(self, job_id: JobId, name: str, size_bytes: int, at: float) -> bool:
        try:
            with self._write() as session:
                session.add(
                    CheckpointRow(job_id=job_id, name=name, size_bytes=size_bytes, created_at=at)
                )
        except IntegrityError:
            return False
        return True

    def checkpoints(self, job_id: JobId) -> list[CheckpointRecord]:
        with self._core() as conn:
            rows = conn.execute(_CHECKPOINTS_OF, {"job_id": job_id})
            return [CheckpointRecord.from_row(r) for r in rows]

    def drop_checkpoints(self, job_id: JobId, names: Iterable[str]) -> None:
        with self._write() as session:
            session.execute(
                delete(CheckpointRow).where(
                    CheckpointRow.job_id == job_id, CheckpointRow.name.in_(list(names))
                )
            )


def manifest_of(job: JobRecord) -> JobManifest:
    return JobManifest.model_validate(json.loads(job.manifest_json))
