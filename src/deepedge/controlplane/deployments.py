"""The durable registry of deployments and model versions, over the job store's database.

Contract:

* A deployment row carries a ``version`` counter; every change is a :class:`Step` committed
  by :meth:`DeploymentStore.commit` in ONE transaction (deployment fields, model-version
  changes, new versions, the window's accuracy and the decision events together), as a
  compare-and-set on that counter: a concurrent writer (the API rolling back while the
  control loop scores a window) makes the later one miss with :class:`ConflictError`, and
  it recomputes from what is now stored.
* Every status change is checked against the one transition table of
  :mod:`deepedge.controlplane.rollout_status`.
* Tenant-facing reads are scoped by tenant; another tenant's deployment is "not found".
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from deepedge.controlplane.deployment_spec import DeploymentSpec, TargetKind
from deepedge.controlplane.records import (
    DATA_SEVERITY,
    DeploymentId,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
    WindowPoint,
)
from deepedge.controlplane.rollout_status import (
    DeploymentStatus,
    VersionStatus,
    check_deployment_transition,
    check_version_transition,
)
from deepedge.core.errors import ConflictError, NotFoundError
from deepedge.service.records import TenantId
from deepedge.service.store import JobStore
from deepedge.service.tables import (
    DeploymentEventRow,
    DeploymentRow,
    DeploymentWindowRow,
    InferenceKeyRow,
    ModelVersionRow,
)

DEPLOYMENTS = DeploymentRow.__table__
VERSIONS = ModelVersionRow.__table__
WINDOWS = DeploymentWindowRow.__table__
EVENTS = DeploymentEventRow.__table__


@dataclass(frozen=True)
class NewVersion:
    number: int
    parent: int | None
    data_windows: tuple[int, ...]
    note: str
    status: VersionStatus = VersionStatus.TRAINING
    metrics: dict[str, float] = field(default_factory=dict)
    job_id: str | None = None


@dataclass(frozen=True)
class VersionChange:
    number: int
    status: VersionStatus | None = None
    metrics: dict[str, float] | None = None  # merged into the stored metrics
    job_id: str | None = None
    replaced: int | None = None
    served_one_more_window: bool = False


@dataclass(frozen=True)
class Step:
    """Everything one decision changes, committed together (see the module docstring)."""

    deployment: dict[str, Any] = field(default_factory=dict)  # DeploymentRow columns
    versions: tuple[VersionChange, ...] = ()
    new_versions: tuple[NewVersion, ...] = ()
    window: WindowPoint | None = None
    events: tuple[Event, ...] = ()


class DeploymentStore:
    """Repository over the deployment tables; returns frozen records, never ORM rows."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    # -- deployments ----------------------------------------------------------------------

    def create(
        self,
        tenant_id: TenantId,
        spec: DeploymentSpec,
        now: float | None = None,
        warnings: list[str] | tuple[str, ...] = (),
    ) -> tuple[DeploymentRecord, bool]:
        """Insert a deployment, its first version (TRAINING on the base windows) and its
        creation event (with the workload check's ``warnings``) in one transaction. The
        same name with the same spec returns the existing one (``created`` False); with
        another spec it is a conflict."""
        now = time.time() if now is None else now
        existing = self._by_name(tenant_id, spec.name)
        if existing is not None:
            if existing.spec == spec:
                return existing, False
            raise ConflictError(
                f"deployment {spec.name!r} exists with another spec; delete it or pick a new name"
            )
        deployment_id = uuid.uuid4().hex
        values = {
            "id": deployment_id,
            "tenant_id": tenant_id,
            "name": spec.name,
            "spec_json": spec.model_dump_json(),
            "status": DeploymentStatus.UPDATING.value,
            "version": 0,
            "created_at": now,
            "updated_at": now,
            "serving_version": None,
            "canary_version": None,
            "previous_version": None,
            "window": -1,
            "next_window_at": now,
            "last_update_window": None,
            "samples_since_update": 0,
            "canary_windows_done": 0,
            "update_requested": 0,
            "current_job_id": None,
            "last_accuracy": None,
        }
        # the base windows are the drift severity's reference: what they look like is 0
        first = NewVersion(1, None, tuple(range(spec.base_windows)),
                           "first version, trained on the base windows",
                           metrics={DATA_SEVERITY: 0.0})  # fmt: skip
        said = f"; the workload check warned: {'; '.join(warnings)}" if warnings else ""
        created = Event(EventKind.CREATED, f"deployment {spec.name} created{said}", version=1,
                        detail={"warnings": list(warnings)} if warnings else {})  # fmt: skip
        try:
            with self.store.write_connection() as conn:
                self._check_edge_server(conn, tenant_id, spec)
                conn.execute(insert(DeploymentRow), values)
                self._insert_version(conn, DeploymentId(deployment_id), tenant_id, first, now)
                self._insert_events(conn, DeploymentId(deployment_id), (created,), now)
        except IntegrityError as exc:
            raise ConflictError(f"deployment {spec.name!r} already exists") from exc
        return self.get_by_id(DeploymentId(deployment_id)), True

    def _check_edge_server(self, conn: Any, tenant_id: TenantId, spec: DeploymentSpec) -> None:
        """The deployments on one edge server share its windows (one job of one tenant,
        :mod:`deepedge.controlplane.edge_server_window`): all of one tenant, all declaring the
        same GPUs. Checked inside the creating transaction (writers are serialised)."""
        if spec.target.kind is not TargetKind.EDGE_SERVER:
            return
        server = spec.target.nodes[0]
        query = select(DEPLOYMENTS).where(DEPLOYMENTS.c.status != DeploymentStatus.STOPPED.value)
        for row in conn.execute(query):
            other = DeploymentRecord.from_row(row)
            if other.spec.target.kind is not TargetKind.EDGE_SERVER:
                continue
            if other.spec.target.nodes[0] != server:
                continue
            if other.tenant_id != tenant_id:
                raise ConflictError(f"edge server {server} runs another tenant's deployments")
            if other.spec.target.gpus != spec.target.gpus:
                raise ConflictError(
                    f"edge server {server} has {other.spec.target.gpus:g} GPU(s) in deployment "
                    f"{other.name}; target.gpus {spec.target.gpus:g} differs"
                )

    def _by_name(self, tenant_id: TenantId, name: str) -> DeploymentRecord | None:
        query = select(DEPLOYMENTS).where(
            DEPLOYMENTS.c.tenant_id == tenant_id, DEPLOYMENTS.c.name == name
        )
        with self.store.read_connection() as conn:
            row = conn.execute(query).first()
        return DeploymentRecord.from_row(row) if row else None

    def get(self, tenant_id: TenantId, name: str) -> DeploymentRecord:
        found = self._by_name(tenant_id, name)
        if found is None:
            raise NotFoundError(f"deployment {name} not found")
        return found

    def get_by_id(self, deployment_id: DeploymentId) -> DeploymentRecord:
        with self.store.read_connection() as conn:
            row = conn.execute(select(DEPLOYMENTS).where(DEPLOYMENTS.c.id == deployment_id)).first()
        if row is None:
            raise NotFoundError(f"deployment {deployment_id} not found")
        return DeploymentRecord.from_row(row)

    def of_tenant(self, tenant_id: TenantId) -> list[DeploymentRecord]:
        query = (
            select(DEPLOYMENTS)
            .where(DEPLOYMENTS.c.tenant_id == tenant_id)
            .order_by(DEPLOYMENTS.c.created_at, DEPLOYMENTS.c.id)
        )
        with self.store.read_connection() as conn:
            return [DeploymentRecord.from_row(r) for r in conn.execute(query)]

    def live(self) -> list[DeploymentRecord]:
        """Every deployment the control loop runs (all tenants; for the manager only)."""
        query = (
            select(DEPLOYMENTS)
            .where(DEPLOYMENTS.c.status != DeploymentStatus.STOPPED.value)
            .order_by(DEPLOYMENTS.c.created_at, DEPLOYMENTS.c.id)
        )
        with self.store.read_connection() as conn:
            return [DeploymentRecord.from_row(r) for r in conn.execute(query)]

    def count(self) -> int:
        with self.store.read_connection() as conn:
            return int(conn.execute(select(func.count()).select_from(DEPLOYMENTS)).scalar() or 0)

    # -- versions, windows, events --------------------------------------------------------

    def versions(self, deployment_id: DeploymentId) -> list[ModelVersion]:
        query = (
            select(VERSIONS)
            .where(VERSIONS.c.deployment_id == deployment_id)
            .order_by(VERSIONS.c.number)
        )
        with self.store.read_connection() as conn:
            return [ModelVersion.from_row(r) for r in conn.execute(query)]

    def version(self, deployment_id: DeploymentId, number: int) -> ModelVersion:
        query = select(VERSIONS).where(
            VERSIONS.c.deployment_id == deployment_id, VERSIONS.c.number == number
        )
        with self.store.read_connection() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise NotFoundError(f"model version {number} not found")
        return ModelVersion.from_row(row)

    def tenant_versions(self, tenant_id: TenantId) -> list[ModelVersion]:
        query = (
            select(VERSIONS)
            .where(VERSIONS.c.tenant_id == tenant_id)
            .order_by(VERSIONS.c.deployment_id, VERSIONS.c.number)
        )
        with self.store.read_connection() as conn:
            return [ModelVersion.from_row(r) for r in conn.execute(query)]

    def version_count(self) -> int:
        with self.store.read_connection() as conn:
            return int(conn.execute(select(func.count()).select_from(VERSIONS)).scalar() or 0)

    def windows(self, deployment_id: DeploymentId, limit: int = 200) -> list[WindowPoint]:
        """The last ``limit`` windows, oldest first."""
        query = (
            select(WINDOWS)
            .where(WINDOWS.c.deployment_id == deployment_id)
            .order_by(WINDOWS.c.window.desc())
            .limit(limit)
        )
        with self.store.read_connection() as conn:
            return [WindowPoint.from_row(r) for r in reversed(list(conn.execute(query)))]

    def last_scored(self, deployment_ids: list[DeploymentId]) -> dict[DeploymentId, WindowPoint]:
        """Each deployment's newest window with a served accuracy (one with labelled samples);
        a deployment none of whose windows was scored is absent."""
        if not deployment_ids:
            return {}
        newest = (
            select(WINDOWS.c.deployment_id, func.max(WINDOWS.c.window).label("window"))
            .where(WINDOWS.c.deployment_id.in_(deployment_ids), WINDOWS.c.accuracy.is_not(None))
            .group_by(WINDOWS.c.deployment_id)
            .subquery()
        )
        query = select(WINDOWS).join(
            newest,
            (WINDOWS.c.deployment_id == newest.c.deployment_id)
            & (WINDOWS.c.window == newest.c.window),
        )
        with self.store.read_connection() as conn:
            rows = conn.execute(query)
            return {DeploymentId(r.deployment_id): WindowPoint.from_row(r) for r in rows}

    def recent_window_due_at(
        self, deployment_id: DeploymentId, window: int, recent: int = 5
    ) -> float | None:
        """When ``window`` was due, if it is one of the last ``recent`` windows (None: not
        scored yet, or no longer at hand, e.g. after downtime)."""
        return next(
            (w.due_at for w in self.windows(deployment_id, recent) if w.window == window), None
        )

    def events(self, deployment_id: DeploymentId, limit: int = 200) -> list[Event]:
        """The last ``limit`` decisions, oldest first."""
        query = (
            select(EVENTS)
            .where(EVENTS.c.deployment_id == deployment_id)
            .order_by(EVENTS.c.seq.desc())
            .limit(limit)
        )
        with self.store.read_connection() as conn:
            return [Event.from_row(r) for r in reversed(list(conn.execute(query)))]

    def last_event(self, deployment_id: DeploymentId, kind: EventKind) -> Event | None:
        query = (
            select(EVENTS)
            .where(EVENTS.c.deployment_id == deployment_id, EVENTS.c.kind == kind.value)
            .order_by(EVENTS.c.seq.desc())
            .limit(1)
        )
        with self.store.read_connection() as conn:
            row = conn.execute(query).first()
        return Event.from_row(row) if row else None

    def delete(self, current: DeploymentRecord) -> int:
        """Remove a STOPPED deployment with its versions, windows, events and inference
        keys (revoked ones too) in one transaction, compare-and-set on its row version
        (:class:`ConflictError` when it changed meanwhile); returns how many keys went with
        it. Its name is free again afterwards."""
        if current.status is not DeploymentStatus.STOPPED:
            raise ConflictError(f"deployment {current.name} is {current.status}; stop it first")
        with self.store.write_connection() as conn:
            # The compare-and-set first (it also locks the row), the rows that reference
            # the deployment next, the deployment last; any failure rolls back all of it.
            claimed = conn.execute(
                update(DeploymentRow)
                .where(DeploymentRow.id == current.id, DeploymentRow.version == current.version)
                .values(version=current.version + 1)
            )
            if claimed.rowcount != 1:
                raise ConflictError(f"deployment {current.name} changed concurrently; retry")
            for row in (ModelVersionRow, DeploymentWindowRow, DeploymentEventRow):
                conn.execute(delete(row).where(row.deployment_id == current.id))
            keys = conn.execute(
                delete(InferenceKeyRow).where(InferenceKeyRow.deployment_id == current.id)
            ).rowcount
            conn.execute(delete(DeploymentRow).where(DeploymentRow.id == current.id))
        return int(keys)

    # -- the one write path ---------------------------------------------------------------

    def commit(self, current: DeploymentRecord, step: Step, now: float | None = None) -> None:
        """Apply ``step`` to ``current`` as a compare-and-set on its row version."""
        now = time.time() if now is None else now
        values = dict(step.deployment)
        if "status" in values:
            target = DeploymentStatus(values["status"])
            check_deployment_transition(current.status, target)
            values["status"] = target.value
        values.update(version=current.version + 1, updated_at=now)
        with self.store.write_connection() as conn:
            result = conn.execute(
                update(DeploymentRow)
                .where(DeploymentRow.id == current.id, DeploymentRow.version == current.version)
                .values(**values)
            )
            if result.rowcount != 1:
                raise ConflictError(f"deployment {current.name} changed concurrently; retry")
            for new in step.new_versions:
                self._insert_version(conn, current.id, current.tenant_id, new, now)
            for change in step.versions:
                self._change_version(conn, current.id, change, now)
            if step.window is not None:
                self._insert_window(conn, current.id, step.window)
            self._insert_events(conn, current.id, step.events, now)

    def _insert_version(
        self, conn: Any, deployment_id: DeploymentId, tenant_id: str, new: NewVersion, now: float
    ) -> None:
        conn.execute(
            insert(ModelVersionRow),
            {
                "deployment_id": deployment_id,
                "tenant_id": tenant_id,
                "number": new.number,
                "parent_number": new.parent,
                "replaced_number": None,
                "status": new.status.value,
                "job_id": new.job_id,
                "data_windows_json": json.dumps(list(new.data_windows)),
                "metrics_json": json.dumps(new.metrics),
                "note": new.note,
                "windows_served": 0,
                "created_at": now,
                "updated_at": now,
            },
        )

    def _change_version(
        self, conn: Any, deployment_id: DeploymentId, change: VersionChange, now: float
    ) -> None:
        row = conn.execute(
            select(VERSIONS).where(
                VERSIONS.c.deployment_id == deployment_id, VERSIONS.c.number == change.number
            )
        ).first()
        if row is None:
            raise NotFoundError(f"model version {change.number} not found")
        values: dict[str, Any] = {"updated_at": now}
        if change.status is not None:
            check_version_transition(VersionStatus(row.status), change.status)
            values["status"] = change.status.value
        if change.metrics is not None:
            values["metrics_json"] = json.dumps({**json.loads(row.metrics_json), **change.metrics})
        if change.job_id is not None:
            values["job_id"] = change.job_id
        if change.replaced is not None:
            values["replaced_number"] = change.replaced
        if change.served_one_more_window:
            values["windows_served"] = row.windows_served + 1
        conn.execute(update(ModelVersionRow).where(ModelVersionRow.id == row.id).values(**values))

    def _insert_window(self, conn: Any, deployment_id: DeploymentId, point: WindowPoint) -> None:
        conn.execute(
            insert(DeploymentWindowRow),
            {
                "deployment_id": deployment_id,
                "window": point.window,
                "at": point.at,
                "due_at": point.due_at,
                "served_version": point.served_version,
                "accuracy": point.accuracy,
                "canary_version": point.canary_version,
                "canary_accuracy": point.canary_accuracy,
                "previous_version": point.previous_version,
                "previous_accuracy": point.previous_accuracy,
                "samples": point.samples,
                "trigger": point.trigger.value,
                "severity": point.severity,
            },
        )

    def _insert_events(
        self, conn: Any, deployment_id: DeploymentId, events: tuple[Event, ...], now: float
    ) -> None:
        if not events:
            return
        last = conn.execute(
            select(func.coalesce(func.max(EVENTS.c.seq), -1)).where(
                EVENTS.c.deployment_id == deployment_id
            )
        ).scalar()
        for offset, event in enumerate(events, start=1):
            conn.execute(
                insert(DeploymentEventRow),
                {
                    "deployment_id": deployment_id,
                    "seq": int(last) + offset,
                    "at": now,
                    "window": event.window,
                    "kind": event.kind.value,
                    "version": event.version,
                    "job_id": event.job_id,
                    "message": event.message,
                    "detail_json": json.dumps(event.detail, default=str),
                },
            )
