"""container images: OCI images pulled or imported, kept by manifest digest

``images``: what a team (or the site, ``team_id`` null) holds, by the name it was pulled or
imported as, with the digest of its manifest, its size and its config (Env, Entrypoint, Cmd,
WorkingDir). The files live in the image store (the data directory's ``images``), once per
digest; downgrading drops the table and leaves them there.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 12:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_images_team_id_teams")),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_images_created_by_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_images")),
        sa.UniqueConstraint("team_id", "name", name="uq_images_team_name"),
    )
    op.create_index(op.f("ix_images_team_id"), "images", ["team_id"], unique=False)
    op.create_index(op.f("ix_images_digest"), "images", ["digest"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_images_digest"), table_name="images")
    op.drop_index(op.f("ix_images_team_id"), table_name="images")
    op.drop_table("images")
