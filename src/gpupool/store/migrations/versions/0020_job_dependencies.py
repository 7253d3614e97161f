"""job dependencies: a job that waits for others to end (afterok, afterany, afternotok)

``job_dependencies``: what each job waits for (``JobSpec.depends_on``, resolved to ids at
submit). ``jobs.waiting``: the job waits for one of them, so the scheduler is not given it;
a partial index finds the few that wait without reading the others.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 12:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# SQLite uses a partial index only for a query whose terms match its own: the services ask
# for waiting == True, which SQLite's dialect writes waiting = 1
SQLITE_WAITING, POSTGRESQL_WAITING = sa.text("waiting = 1"), sa.text("waiting")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_index(
        "ix_jobs_waiting",
        "jobs",
        ["id"],
        sqlite_where=SQLITE_WAITING,
        postgresql_where=POSTGRESQL_WAITING,
    )
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("depends_on_id", sa.Integer(), nullable=False),
        sa.Column("condition", sa.String(length=20), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_job_dependencies_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["depends_on_id"],
            ["jobs.id"],
            name=op.f("fk_job_dependencies_depends_on_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id", name=op.f("pk_job_dependencies")),
    )
    op.create_index(
        op.f("ix_job_dependencies_depends_on_id"), "job_dependencies", ["depends_on_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_job_dependencies_depends_on_id"), table_name="job_dependencies")
    op.drop_table("job_dependencies")
    op.drop_index("ix_jobs_waiting", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("waiting")
