"""An inference key remembers the job whose token created it, and ends with that job.

``inference_keys.job_id``: set when a sandboxed job with ``api_access`` created the key with
its own token; the transition that ends the job (or halts it) revokes such keys with the
job's tokens. Keys made before this revision, and keys made with a tenant's token, have
none and live until revoked.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("inference_keys", sa.Column("job_id", sa.String(32), nullable=True))
    op.create_index("ix_inference_keys_job", "inference_keys", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_inference_keys_job", table_name="inference_keys")
    with op.batch_alter_table("inference_keys") as batch:
        batch.drop_column("job_id")
