"""notebooks: users' JupyterLabs, each run as a job of kind notebook while it runs

A row per notebook: its owner and team, the resources it asks for, its current job and the
token its JupyterLab was started with (the proxy adds it; never shown), when it was last
active, and why it stopped. Downgrading drops the table; the notebooks' jobs stay as jobs.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 13:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notebooks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("gpu_types", sa.JSON(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("token", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.Column("started_at", sa.Float(precision=53), nullable=True),
        sa.Column("active_at", sa.Float(precision=53), nullable=True),
        sa.Column("stopped_at", sa.Float(precision=53), nullable=True),
        sa.Column("stop_reason", sa.String(length=50), nullable=True),
        sa.Column("stop_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_notebooks_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_notebooks_team_id_teams")),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_notebooks_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notebooks")),
    )
    op.create_index(op.f("ix_notebooks_stopped_at"), "notebooks", ["stopped_at"], unique=False)
    op.create_index(op.f("ix_notebooks_team_id"), "notebooks", ["team_id"], unique=False)
    op.create_index(op.f("ix_notebooks_user_id"), "notebooks", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_notebooks_user_id"), table_name="notebooks")
    op.drop_index(op.f("ix_notebooks_team_id"), table_name="notebooks")
    op.drop_index(op.f("ix_notebooks_stopped_at"), table_name="notebooks")
    op.drop_table("notebooks")
