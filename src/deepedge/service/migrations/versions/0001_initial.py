"""Initial job-store schema: tenants, jobs, history, learners, checkpoints.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("max_active_jobs", sa.Integer, nullable=False),
        sa.Column("max_queued_jobs", sa.Integer, nullable=False),
        sa.Column("max_cores", sa.Float, nullable=False),
        sa.Column("max_gpus", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("manifest_json", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("error_code", sa.String(32)),
        sa.Column("error_message", sa.Text),
        sa.Column("idempotency_key", sa.String(128)),
        sa.Column("requested_action", sa.String(16)),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("deploy_attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency"),
    )
    op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "job_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cause", sa.Text),
        sa.Column("at", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "seq", name="uq_history_job_seq"),
    )
    op.create_index("ix_job_history_job_id", "job_history", ["job_id"])
    op.create_table(
        "learners",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("pid_started_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("ended_at", sa.Float),
        sa.UniqueConstraint("job_id", "rank", "attempt", name="uq_learner_attempt"),
    )
    op.create_index("ix_learners_job_id", "learners", ["job_id"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "name", name="uq_checkpoint_name"),
    )
    op.create_index("ix_checkpoints_job_id", "checkpoints", ["job_id"])


def downgrade() -> None:
    for table in ("checkpoints", "learners", "job_history", "jobs", "tenants"):
        op.drop_table(table)
