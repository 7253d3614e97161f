"""metrics: jobs' metric points (``job_metrics``) and how far each attempt's are read

``job_metrics`` holds one row per point a job reported (``loss`` at a step) or its runner
sampled (``gpu.0.utilization``), per attempt; ``metric_cursors`` holds, per attempt, the
byte offset up to which the server has read the runner's records file, so that a restarted
server goes on from there without losing or repeating a point.

Downgrading drops both tables and the points with them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 13:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "job_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("at", Time, nullable=False),
        sa.Column("value", sa.Float(precision=53), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_job_metrics_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_metrics")),
    )
    op.create_index("ix_job_metrics_job_name", "job_metrics", ["job_id", "name", "attempt", "id"])
    op.create_table(
        "metric_cursors",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_metric_cursors_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("pk_metric_cursors")),
    )
    op.create_index(op.f("ix_metric_cursors_done"), "metric_cursors", ["done"])


def downgrade() -> None:
    op.drop_index(op.f("ix_metric_cursors_done"), table_name="metric_cursors")
    op.drop_table("metric_cursors")
    op.drop_index("ix_job_metrics_job_name", table_name="job_metrics")
    op.drop_table("job_metrics")
