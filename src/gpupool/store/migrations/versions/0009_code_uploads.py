"""code snapshots: who uploaded which (each archive is stored once, by its SHA-256)

A row per user and snapshot gives that user (and the members of their teams, in those teams'
jobs) the right to run the snapshot; the archive itself lives under the data directory
(``code/sha256/<hex>.tar.gz``), not in the database.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-19 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "code_uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("ref", sa.String(length=80), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("uploaded_at", sa.Float(precision=53), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("unpacked_bytes", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_code_uploads_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_code_uploads")),
        sa.UniqueConstraint("ref", "user_id", name="uq_code_uploads_ref_user"),
    )
    op.create_index(op.f("ix_code_uploads_ref"), "code_uploads", ["ref"], unique=False)
    op.create_index(op.f("ix_code_uploads_user_id"), "code_uploads", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_code_uploads_user_id"), table_name="code_uploads")
    op.drop_index(op.f("ix_code_uploads_ref"), table_name="code_uploads")
    op.drop_table("code_uploads")
