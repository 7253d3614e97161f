"""team admins, and deleted teams kept with a deletion time instead of a changed name

A membership may make its user an admin of the team (``memberships.admin``). A deleted team
keeps its row for its finished jobs' records, marked by ``teams.deleted_at``; its name is
free again, so names are unique among the teams not deleted (a partial unique index). Teams
deleted before this revision were renamed ``NAME~ID``: they get their name back and the
time of the upgrade as their deletion time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-12 12:00:00.000000
"""

import time

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LIVE = sa.text("deleted_at IS NULL")
OLD_MARK = "~"  # in the name of a team deleted before this revision: NAME~ID


def upgrade() -> None:
    with op.batch_alter_table("memberships", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("admin", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("teams", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deleted_at", sa.Float(precision=53), nullable=True))
        batch_op.drop_constraint("uq_teams_name", type_="unique")
    _mark_renamed_teams_deleted(time.time())
    op.create_index(
        "uq_teams_live_name",
        "teams",
        ["name"],
        unique=True,
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )


def downgrade() -> None:
    op.drop_index("uq_teams_live_name", table_name="teams")
    _rename_deleted_teams()
    with op.batch_alter_table("teams", schema=None) as batch_op:
        batch_op.create_unique_constraint("uq_teams_name", ["name"])
        batch_op.drop_column("deleted_at")
    with op.batch_alter_table("memberships", schema=None) as batch_op:
        batch_op.drop_column("admin")


def _mark_renamed_teams_deleted(now: float) -> None:
    teams = _teams()
    bind = op.get_bind()
    renamed = bind.execute(
        sa.select(teams.c.id, teams.c.name).where(teams.c.name.like(f"%{OLD_MARK}%"))
    ).all()
    for team_id, name in renamed:
        original = name.split(OLD_MARK, 1)[0]
        bind.execute(
            teams.update().where(teams.c.id == team_id).values(name=original, deleted_at=now)
        )


def _rename_deleted_teams() -> None:
    """Back to the names the earlier revisions gave deleted teams (no name has '~')."""
    teams = _teams()
    op.get_bind().execute(
        teams.update()
        .where(teams.c.deleted_at.is_not(None))
        .values(name=teams.c.name + OLD_MARK + sa.cast(teams.c.id, sa.String))
    )


def _teams() -> sa.TableClause:
    return sa.table(
        "teams",
        sa.column("id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("deleted_at", sa.Float),
    )
