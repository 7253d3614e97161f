"""trial standing: a trial's job's standing in its experiment, for the choice of victims

``jobs.standing``: 1 for the first of the trials compared at its last rung passed, towards 0
for the last (1 - (rank - 1) / of), written by the experiments pipeline with each verdict;
among victims otherwise alike, the scheduler preempts the worst-ranked trials first. Null
for every other job (counted as 1).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 20:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("standing", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("standing")
