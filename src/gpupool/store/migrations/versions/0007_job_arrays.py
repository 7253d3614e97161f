"""job arrays: tasks of one spec, each a job with an index, at most N of them at once

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-09 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_arrays",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("indexes", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("submitted_at", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_arrays")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("array_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_jobs_array_id_job_arrays"), "job_arrays", ["array_id"], ["id"]
        )
        batch_op.create_unique_constraint("uq_jobs_array_task", ["array_id", "array_index"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_jobs_array_task", type_="unique")
        batch_op.drop_constraint(batch_op.f("fk_jobs_array_id_job_arrays"), type_="foreignkey")
        batch_op.drop_column("array_index")
        batch_op.drop_column("array_id")
    op.drop_table("job_arrays")
