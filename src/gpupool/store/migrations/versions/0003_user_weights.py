"""user weights: each user's weight in the fair share inside a team

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 22:30:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("weight", sa.Float(), server_default=sa.text("1"), nullable=False)
        )
        batch_op.create_check_constraint(batch_op.f("ck_users_weight_positive"), "weight > 0")


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_users_weight_positive"), type_="check")
        batch_op.drop_column("weight")
