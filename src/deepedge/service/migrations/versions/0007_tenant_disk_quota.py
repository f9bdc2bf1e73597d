"""A disk quota per tenant: ``tenants.max_disk_mb`` (its folders of the data folder together).

Existing tenants get the default quota (:data:`deepedge.service.disk_quota.DEFAULT_MAX_DISK_MB`
at the time of writing).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DEFAULT_MAX_DISK_MB = 10_240


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(
            sa.Column(
                "max_disk_mb", sa.Integer, nullable=False, server_default=str(DEFAULT_MAX_DISK_MB)
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("max_disk_mb")
