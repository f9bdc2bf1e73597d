"""Tenants kept apart: tokens of their own (revocable), a sandbox uid, granted folders.

* ``tokens``: every credential, hashed (SHA-256): a tenant's tokens (``role`` tenant), the
  per-job tokens a sandboxed learner calls the API with (``job``, revoked when the job
  ends), the operator's (``operator``, no tenant: ``/metrics``). ``revoked_at`` set means
  refused from the next request on. The digests of the ``tenants`` table move here.
* ``tenants.uid``: the unprivileged user the tenant's code runs as in the sandbox; the
  existing tenants are numbered in creation order.
* ``tenants.grants_json``: host folders the operator granted the tenant (read-only in its
  sandboxes: its workloads' code and data).

On SQLite the batch operations rebuild ``tenants`` (copy, drop, rename), which the store
runs with foreign keys off and checks afterwards (:meth:`JobStore.migrate`).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

FIRST_UID = 200_000  # deepedge.service.sandbox.TENANT_UID_BASE at the time of writing


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("label", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.UniqueConstraint("sha256", name="uq_tokens_sha256"),
    )
    op.create_index("ix_tokens_tenant", "tokens", ["tenant_id"])
    op.create_index("ix_tokens_job", "tokens", ["job_id"])
    op.add_column("tenants", sa.Column("uid", sa.Integer, nullable=True))
    op.add_column("tenants", sa.Column("grants_json", sa.Text, nullable=False, server_default="[]"))
    conn = op.get_bind()
    rows = conn.execute(
        sa.text("SELECT id, token_sha256, created_at FROM tenants ORDER BY created_at, id")
    ).fetchall()
    for number, row in enumerate(rows):
        conn.execute(
            sa.text("UPDATE tenants SET uid = :uid WHERE id = :id"),
            {"uid": FIRST_UID + number, "id": row.id},
        )
        conn.execute(
            sa.text(
                "INSERT INTO tokens (id, tenant_id, role, label, job_id, sha256, created_at) "
                "VALUES (:id, :tenant, 'tenant', 'first token', NULL, :sha, :at)"
            ),
            {"id": uuid.uuid4().hex, "tenant": row.id, "sha": row.token_sha256,
             "at": row.created_at},
        )  # fmt: skip
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("token_sha256")
        batch.alter_column("uid", existing_type=sa.Integer, nullable=False)
        batch.create_unique_constraint("uq_tenants_uid", ["uid"])


def downgrade() -> None:
    """Back to one digest per tenant: its oldest tenant token (revoked ones included)."""
    conn = op.get_bind()
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("token_sha256", sa.String(64), nullable=True))
    conn.execute(
        sa.text(
            "UPDATE tenants SET token_sha256 = (SELECT sha256 FROM tokens WHERE "
            "tokens.tenant_id = tenants.id AND role = 'tenant' ORDER BY created_at LIMIT 1)"
        )
    )
    with op.batch_alter_table("tenants") as batch:
        batch.drop_constraint("uq_tenants_uid", type_="unique")
        batch.drop_column("uid")
        batch.drop_column("grants_json")
    op.drop_index("ix_tokens_job", table_name="tokens")
    op.drop_index("ix_tokens_tenant", table_name="tokens")
    op.drop_table("tokens")
