"""session token: the API token a web session was opened with, so that revoking it ends it

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-09 10:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("web_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_web_sessions_token_id"), ["token_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_web_sessions_token_id_tokens"),
            "tokens",
            ["token_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("web_sessions", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_web_sessions_token_id_tokens"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_web_sessions_token_id"))
        batch_op.drop_column("token_id")
