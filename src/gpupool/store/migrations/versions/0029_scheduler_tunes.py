"""scheduler tunes: tunings of the scheduler's settings by replays of the site's history

``scheduler_tunes``: one row per tuning (asked by an admin or by the nightly autotune): its
status, options, decision and report, the settings version it made when it adopted, and
what the rollback watch found a week later.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 02:30:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "scheduler_tunes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("decision", sa.String(20), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("adopted_version", sa.Integer(), nullable=True),
        sa.Column("checked", sa.JSON(), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("started_at", Time, nullable=True),
        sa.Column("ended_at", Time, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_scheduler_tunes"),
    )
    op.create_index("ix_scheduler_tunes_status", "scheduler_tunes", ["status"])


def downgrade() -> None:
    op.drop_index("ix_scheduler_tunes_status", table_name="scheduler_tunes")
    op.drop_table("scheduler_tunes")
