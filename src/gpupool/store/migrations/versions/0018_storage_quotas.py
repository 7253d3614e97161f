"""storage quotas: the most bytes a team's files may take, and what they took at the last scan

``storage_quota`` null: no quota. ``storage_used`` and ``storage_scanned_at`` are written by
the server's storage scan (services.scheduling, loops.storage); null until its first scan.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 23:50:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("storage_quota", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("storage_used", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("storage_scanned_at", sa.Float(precision=53), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("storage_scanned_at")
        batch.drop_column("storage_used")
        batch.drop_column("storage_quota")
