"""Inference keys: a camera's credential for one deployment's endpoint.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inference_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("deployment_id", sa.String(32), sa.ForeignKey("deployments.id"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_index("ix_inference_keys_deployment", "inference_keys", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_inference_keys_deployment", "inference_keys")
    op.drop_table("inference_keys")
