"""models: the model registry (``models``, ``model_versions``, ``model_files``)

A model is a name of a team (unique per team); each of its versions records the archive of
its files in the model store (by content, ``sha256:<hex>``, and where it was stored), the job
it was registered from with that job's spec and final metrics, and who registered it; each
file of a version has its path, size and SHA-256.

Downgrading drops the three tables; the archives stay in the data directory's ``models``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 13:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_models_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("team_id", "name", name="uq_models_team_name"),
    )
    op.create_index(op.f("ix_models_team_id"), "models", ["team_id"], unique=False)
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("archive", sa.String(length=80), nullable=False),
        sa.Column("archive_path", sa.Text(), nullable=False),
        sa.Column("archive_bytes", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("source_job_id", sa.Integer(), nullable=True),
        sa.Column("source_path", sa.Text(), server_default="", nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_model_versions_created_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_model_versions_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sa.UniqueConstraint("model_id", "number", name="uq_model_versions_model_number"),
    )
    op.create_index(op.f("ix_model_versions_archive"), "model_versions", ["archive"], unique=False)
    op.create_index(
        op.f("ix_model_versions_source_job_id"), "model_versions", ["source_job_id"], unique=False
    )
    op.create_table(
        "model_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_model_files_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_files")),
    )
    op.create_index(op.f("ix_model_files_version_id"), "model_files", ["version_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_model_files_version_id"), table_name="model_files")
    op.drop_table("model_files")
    op.drop_index(op.f("ix_model_versions_source_job_id"), table_name="model_versions")
    op.drop_index(op.f("ix_model_versions_archive"), table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index(op.f("ix_models_team_id"), table_name="models")
    op.drop_table("models")
