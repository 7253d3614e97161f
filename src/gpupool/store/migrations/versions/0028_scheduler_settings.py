"""scheduler settings: the scheduler's live settings as a versioned record

``scheduler_settings``: one row per version (1, 2, 3 ...): every knob's value, its source
(admin, rollback, tune, autotune, watch), who made it, when and why, the version a rollback
took its knobs from, and what a tune predicted of it.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 02:10:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "scheduler_settings",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("knobs", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("rollback_of", sa.Integer(), nullable=True),
        sa.Column("prediction", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("version", name="pk_scheduler_settings"),
    )


def downgrade() -> None:
    op.drop_table("scheduler_settings")
