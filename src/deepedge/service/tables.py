"""ORM tables of the job store (SQLAlchemy 2). The Alembic migrations create exactly these."""

from __future__ import annotations

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class TenantRow(Base):
    __tablename__ = "tenants"
    __table_args__ = (UniqueConstraint("uid", name="uq_tenants_uid"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    max_active_jobs: Mapped[int] = mapped_column(Integer)
    max_queued_jobs: Mapped[int] = mapped_column(Integer)
    max_cores: Mapped[float] = mapped_column(Float)
    max_gpus: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    uid: Mapped[int] = mapped_column(Integer)  # its sandbox user
    grants_json: Mapped[str] = mapped_column(Text, default="[]")  # host folders, read-only
    max_disk_mb: Mapped[int] = mapped_column(Integer)  # disk quota of its folders


class SandboxUidsRow(Base):
    """The range this store's tenants' sandbox uids come from (one row; claimed on the
    host at start: deepedge.service.uid_range)."""

    __tablename__ = "sandbox_uids"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    first_uid: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    """One credential, stored as its SHA-256 digest; revoked ones stay (who, when)."""

    __tablename__ = "tokens"
    __table_args__ = (
        UniqueConstraint("sha256", name="uq_tokens_sha256"),
        Index("ix_tokens_tenant", "tenant_id"),
        Index("ix_tokens_job", "job_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), nullable=True)
    role: Mapped[str] = mapped_column(String(16))  # tenant | job | operator
    label: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency"),
        Index("ix_jobs_tenant_created_id", "tenant_id", "created_at", "id"),
        Index("ix_jobs_status", "status"),
        Index("ix_jobs_tenant_status_created", "tenant_id", "status", "created_at"),
        Index("ix_jobs_requested_action", "requested_action"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    manifest_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    error_code: Mapped[str | None] = mapped_column(String(32), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(128), nullable=True)
    requested_action: Mapped[str | None] = mapped_column(String(16), nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    deploy_attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)


class HistoryRow(Base):
    __tablename__ = "job_history"
    __table_args__ = (UniqueConstraint("job_id", "seq", name="uq_history_job_seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    cause: Mapped[str | None] = mapped_column(Text, nullable=True)
    at: Mapped[float] = mapped_column(Float)


class LearnerRow(Base):
    """One launched learner attempt: enough to re-attach to it after a service crash."""

    __tablename__ = "learners"
    __table_args__ = (UniqueConstraint("job_id", "rank", "attempt", name="uq_learner_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    pid: Mapped[int] = mapped_column(Integer)
    pid_started_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class CheckpointRow(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_checkpoint_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class DeploymentRow(Base):
    """One deployment and the control loop's durable state for it (compare-and-set on
    ``version``: every writer checks the version it read)."""

    __tablename__ = "deployments"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name", name="uq_deployments_tenant_name"),
        Index("ix_deployments_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(64))
    spec_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    serving_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    window: Mapped[int] = mapped_column(Integer, default=-1)
    next_window_at: Mapped[float] = mapped_column(Float)
    last_update_window: Mapped[int | None] = mapped_column(Integer, nullable=True)
    samples_since_update: Mapped[int] = mapped_column(Integer, default=0)
    canary_windows_done: Mapped[int] = mapped_column(Integer, default=0)
    update_requested: Mapped[int] = mapped_column(Integer, default=0)
    current_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    last_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)


class ModelVersionRow(Base):
    """One trained model of a deployment with its lineage (parent, data windows, job)."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("deployment_id", "number", name="uq_model_versions_number"),
        Index("ix_model_versions_tenant", "tenant_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    deployment_id: Mapped[str] = mapped_column(ForeignKey("deployments.id"))
    tenant_id: Mapped[str] = mapped_column(String(32))
    number: Mapped[int] = mapped_column(Integer)
    parent_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    replaced_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    data_windows_json: Mapped[str] = mapped_column(Text)
    metrics_json: Mapped[str] = mapped_column(Text)
    note: Mapped[str] = mapped_column(Text)
    windows_served: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class DeploymentWindowRow(Base):
    """The served accuracy of one window (golden labels), with canary and shadow scores."""

    __tablename__ = "deployment_windows"
    __table_args__ = (
        UniqueConstraint("deployment_id", "window", name="uq_deployment_windows_window"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    deployment_id: Mapped[str] = mapped_column(ForeignKey("deployments.id"))
    window: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    due_at: Mapped[float] = mapped_column(Float)
    served_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    canary_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    canary_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    previous_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    samples: Mapped[int] = mapped_column(Integer)
    trigger: Mapped[str] = mapped_column(String(16))
    severity: Mapped[float] = mapped_column(Float)


class DeploymentEventRow(Base):
    """One decision of the control plane, in order (``seq`` per deployment)."""

    __tablename__ = "deployment_events"
    __table_args__ = (UniqueConstraint("deployment_id", "seq", name="uq_deployment_events_seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    deployment_id: Mapped[str] = mapped_column(ForeignKey("deployments.id"))
    seq: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    window: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kind: Mapped[str] = mapped_column(String(32))
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    message: Mapped[str] = mapped_column(Text)
    detail_json: Mapped[str] = mapped_column(Text)


class InferenceKeyRow(Base):
    """A camera's key to one deployment's inference endpoint (only its SHA-256 digest)."""

    __tablename__ = "inference_keys"
    __table_args__ = (
        Index("ix_inference_keys_deployment", "deployment_id"),
        Index("ix_inference_keys_job", "job_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    deployment_id: Mapped[str] = mapped_column(ForeignKey("deployments.id"))
    name: Mapped[str] = mapped_column(String(64))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the job whose token created it (revoked with that job's tokens); None: a tenant's
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
