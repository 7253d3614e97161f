"""volume usage: what each volume's directory takes, as the storage scan last measured it

``volumes.used_bytes``: its files' bytes (as ``du`` counts them), written by the storage
pipeline at each scan; a volume past its ``size_limit`` has its jobs stopped and new jobs
that mount it refused until it is cleaned. ``used_at``: when. Null until the first scan.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 16:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    with op.batch_alter_table("volumes") as batch:
        batch.add_column(sa.Column("used_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("used_at", Time, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("volumes") as batch:
        batch.drop_column("used_at")
        batch.drop_column("used_bytes")
