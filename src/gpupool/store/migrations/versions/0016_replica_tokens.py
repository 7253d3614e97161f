"""replica tokens: the secret each replica job is started with

The platform's proxy and health checks send it to the replica, so that a replica can tell
them from any other process of its node. Kept server-side only (never in the job's spec).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 15:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployment_replicas") as batch:
        batch.add_column(sa.Column("token", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deployment_replicas") as batch:
        batch.drop_column("token")
