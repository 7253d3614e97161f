"""job holds: a job kept pending, never started until released

``jobs.held``: the job is held (``JobSpec.hold`` at submission, or ``gpupool hold`` while
pending); the scheduler's snapshot leaves it out (one more predicate on the query it runs
anyway) and a launch never claims it; ``gpupool release`` clears it.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 18:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("held")
