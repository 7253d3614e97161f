"""quota history: each team's quota and the pool's size over time, for the teams' history

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:00:00.000000
"""

import time

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

teams = sa.table(
    "teams",
    sa.column("id", sa.Integer()),
    sa.column("guarantee", sa.JSON()),
    sa.column("gpu_limit", sa.Float()),
    sa.column("weight", sa.Float()),
)


def upgrade() -> None:
    quota_changes = op.create_table(
        "quota_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(precision=53), nullable=False),
        sa.Column("guarantee", sa.JSON(), nullable=False),
        sa.Column("gpu_limit", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"],
            ["teams.id"],
            name=op.f("fk_quota_changes_team_id_teams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quota_changes")),
    )
    op.create_index("ix_quota_changes_team_at", "quota_changes", ["team_id", "at"], unique=False)
    op.create_table(
        "pool_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(precision=53), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_changes")),
    )
    op.create_index(op.f("ix_pool_changes_at"), "pool_changes", ["at"], unique=False)
    _record_todays_quotas(quota_changes)


def downgrade() -> None:
    op.drop_index(op.f("ix_pool_changes_at"), table_name="pool_changes")
    op.drop_table("pool_changes")
    op.drop_index("ix_quota_changes_team_at", table_name="quota_changes")
    op.drop_table("quota_changes")


def _record_todays_quotas(quota_changes: sa.Table) -> None:
    """Today's quotas are the earliest known: without them, a team's first change after the
    upgrade would be taken for its quota of all time. (The pool's size is recorded when the
    server next registers its node.)"""
    now = time.time()
    rows = op.get_bind().execute(sa.select(teams)).all()
    if not rows:
        return
    op.bulk_insert(
        quota_changes,
        [
            {
                "team_id": team_id,
                "at": now,
                "guarantee": guarantee or {},
                "gpu_limit": gpu_limit,
                "weight": weight,
            }
            for team_id, guarantee, gpu_limit, weight in rows
        ],
    )
