"""environments: Python environments of a team, each version a locked, digest-named env

``environments`` (a team's names; ``team_id`` null: a prefix an admin registered for every
team) and ``environment_versions`` (each a lock, its Python and platform, and its id);
``notebooks.environment``: the environment a notebook's kernel runs in, as asked.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 12:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_environments_team_id_teams")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_environments")),
        sa.UniqueConstraint("team_id", "name", name="uq_environments_team_name"),
    )
    op.create_index(op.f("ix_environments_team_id"), "environments", ["team_id"], unique=False)
    op.create_table(
        "environment_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("env", sa.String(length=71), nullable=False),
        sa.Column("python", sa.String(length=20), nullable=False),
        sa.Column("platform", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("lock", sa.Text(), nullable=True),
        sa.Column("prefix", sa.Text(), nullable=True),
        sa.Column("packages", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.id"],
            name=op.f("fk_environment_versions_environment_id_environments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_environment_versions_created_by_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_environment_versions")),
        sa.UniqueConstraint("environment_id", "env", name="uq_environment_versions_env"),
    )
    op.create_index(
        op.f("ix_environment_versions_environment_id"),
        "environment_versions",
        ["environment_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_environment_versions_env"), "environment_versions", ["env"], unique=False
    )
    with op.batch_alter_table("notebooks") as batch:
        batch.add_column(sa.Column("environment", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("notebooks") as batch:
        batch.drop_column("environment")
    op.drop_index(op.f("ix_environment_versions_env"), table_name="environment_versions")
    op.drop_index(op.f("ix_environment_versions_environment_id"), table_name="environment_versions")
    op.drop_table("environment_versions")
    op.drop_index(op.f("ix_environments_team_id"), table_name="environments")
    op.drop_table("environments")
