"""workloads: what kind of work a job is (a batch job, a notebook's, a deployment replica's)

Notebooks and model deployments run their workloads as jobs, through the same submit path
(quotas, fair share, the scheduler, the sandbox): ``jobs.kind`` tells them apart (JobKind:
job, notebook, replica). Every job stored before this revision is a batch job. Downgrading
drops the column; notebooks' and replicas' jobs then show as batch jobs.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 13:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=20), server_default="job", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("kind")
