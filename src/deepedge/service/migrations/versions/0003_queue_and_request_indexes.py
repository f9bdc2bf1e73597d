"""Index what the manager reads every tick, so a long queue costs no scans.

* ``(tenant_id, status, created_at)`` replaces ``(tenant_id, status)``: a tenant's oldest
  queued jobs are the first entries of one index range (no sort of the whole queue), and
  the per-submission unfinished-job count still reads the index only.
* ``(tenant_id, created_at, id)`` replaces ``(tenant_id, created_at)``: the job list is
  keyset-paged on ``(created_at, id)`` (jobs committed together share a timestamp), and
  each page is one index range in that order.
* ``requested_action``: jobs with a pending halt or checkpoint request are an index range
  instead of a scan of every job ever submitted.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_tenant_status_created", "jobs", ["tenant_id", "status", "created_at"])
    op.drop_index("ix_jobs_tenant_status", table_name="jobs")
    op.create_index("ix_jobs_requested_action", "jobs", ["requested_action"])
    op.create_index("ix_jobs_tenant_created_id", "jobs", ["tenant_id", "created_at", "id"])
    op.drop_index("ix_jobs_tenant_created", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at"])
    op.drop_index("ix_jobs_tenant_created_id", table_name="jobs")
    op.drop_index("ix_jobs_requested_action", table_name="jobs")
    op.create_index("ix_jobs_tenant_status", "jobs", ["tenant_id", "status"])
    op.drop_index("ix_jobs_tenant_status_created", table_name="jobs")
