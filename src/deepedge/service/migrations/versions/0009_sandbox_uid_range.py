"""The range of sandbox uids a store's tenants get, so that two services on one host
never give two tenants one uid (deepedge.service.uid_range).

``sandbox_uids`` holds one row: the range's first uid and its size. A store that has
tenants keeps the uids they were numbered with (from 200000, in creation order): the range
from 200000 to its highest uid, at least 10000 long, is recorded here. A store without
tenants records none: the service picks a free range on this host at its next start.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FIRST_UID = 200_000  # deepedge.service.uid_range.FIRST_UID at the time of writing
RANGE_SIZE = 10_000  # deepedge.service.uid_range.RANGE_SIZE at the time of writing


def upgrade() -> None:
    op.create_table(
        "sandbox_uids",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("first_uid", sa.Integer, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )
    conn = op.get_bind()
    highest = conn.execute(sa.text("SELECT MAX(uid) FROM tenants")).scalar()
    if highest is not None:
        size = max(RANGE_SIZE, int(highest) - FIRST_UID + 1)
        conn.execute(
            sa.text(
                "INSERT INTO sandbox_uids (id, first_uid, size, recorded_at) "
                "VALUES (1, :f, :s, :at)"
            ),
            {"f": FIRST_UID, "s": size, "at": time.time()},
        )


def downgrade() -> None:
    op.drop_table("sandbox_uids")
