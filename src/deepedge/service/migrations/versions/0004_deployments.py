"""Deployments, model versions (the registry), served accuracy per window and decisions.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("serving_version", sa.Integer, nullable=True),
        sa.Column("canary_version", sa.Integer, nullable=True),
        sa.Column("previous_version", sa.Integer, nullable=True),
        sa.Column("window", sa.Integer, nullable=False),
        sa.Column("next_window_at", sa.Float, nullable=False),
        sa.Column("last_update_window", sa.Integer, nullable=True),
        sa.Column("samples_since_update", sa.Integer, nullable=False),
        sa.Column("canary_windows_done", sa.Integer, nullable=False),
        sa.Column("update_requested", sa.Integer, nullable=False),
        sa.Column("current_job_id", sa.String(32), nullable=True),
        sa.Column("last_accuracy", sa.Float, nullable=True),
        sa.UniqueConstraint("tenant_id", "name", name="uq_deployments_tenant_name"),
    )
    op.create_index("ix_deployments_status", "deployments", ["status"])
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("deployment_id", sa.String(32), sa.ForeignKey("deployments.id"), nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("parent_number", sa.Integer, nullable=True),
        sa.Column("replaced_number", sa.Integer, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("data_windows_json", sa.Text, nullable=False),
        sa.Column("metrics_json", sa.Text, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("windows_served", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("deployment_id", "number", name="uq_model_versions_number"),
    )
    op.create_index("ix_model_versions_tenant", "model_versions", ["tenant_id"])
    op.create_table(
        "deployment_windows",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("deployment_id", sa.String(32), sa.ForeignKey("deployments.id"), nullable=False),
        sa.Column("window", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("due_at", sa.Float, nullable=False),
        sa.Column("served_version", sa.Integer, nullable=True),
        sa.Column("accuracy", sa.Float, nullable=True),
        sa.Column("canary_version", sa.Integer, nullable=True),
        sa.Column("canary_accuracy", sa.Float, nullable=True),
        sa.Column("previous_version", sa.Integer, nullable=True),
        sa.Column("previous_accuracy", sa.Float, nullable=True),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("severity", sa.Float, nullable=False),
        sa.UniqueConstraint("deployment_id", "window", name="uq_deployment_windows_window"),
    )
    op.create_table(
        "deployment_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("deployment_id", sa.String(32), sa.ForeignKey("deployments.id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("window", sa.Integer, nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer, nullable=True),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("detail_json", sa.Text, nullable=False),
        sa.UniqueConstraint("deployment_id", "seq", name="uq_deployment_events_seq"),
    )


def downgrade() -> None:
    op.drop_table("deployment_events")
    op.drop_table("deployment_windows")
    op.drop_index("ix_model_versions_tenant", table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index("ix_deployments_status", table_name="deployments")
    op.drop_table("deployments")
