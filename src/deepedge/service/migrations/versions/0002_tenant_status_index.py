"""Index jobs by (tenant, status): the per-tenant unfinished-job count of every submission
and the manager's per-tenant queue reads become index range scans.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_tenant_status", "jobs", ["tenant_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_tenant_status", table_name="jobs")
