"""fair sharing: team quotas, preemption and checkpoint bookkeeping

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 18:30:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams", schema=None) as batch_op:
        batch_op.add_column(sa.Column("guarantee", sa.JSON(), server_default="{}", nullable=False))
        batch_op.add_column(sa.Column("gpu_limit", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column("weight", sa.Float(), server_default=sa.text("1"), nullable=False)
        )

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("preemptible", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch_op.add_column(
            sa.Column("attained", sa.Float(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.add_column(sa.Column("queued_at", sa.Float(precision=53), nullable=True))
        batch_op.add_column(sa.Column("checkpoint_at", sa.Float(precision=53), nullable=True))
        batch_op.add_column(
            sa.Column("preemptions", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )

    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stop_reason", sa.String(length=20), nullable=True))
        batch_op.create_index(batch_op.f("ix_attempts_ended_at"), ["ended_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_ended_at"))
        batch_op.drop_column("stop_reason")

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("preemptions")
        batch_op.drop_column("checkpoint_at")
        batch_op.drop_column("queued_at")
        batch_op.drop_column("attained")
        batch_op.drop_column("preemptible")

    with op.batch_alter_table("teams", schema=None) as batch_op:
        batch_op.drop_column("weight")
        batch_op.drop_column("gpu_limit")
        batch_op.drop_column("guarantee")
