"""datasets and volumes: versioned, content-addressed datasets and a team's mutable volumes

``datasets`` (a name unique per team), ``dataset_versions`` (numbered per dataset; each
names its manifest, a blob of the dataset store, by its SHA-256), ``dataset_blobs`` (the
blobs each team holds: what its uploads may skip), ``dataset_uses`` (the version each job
resolved at submit, and where it mounts it) and ``volumes`` (a team's mutable directories).

Downgrading drops the five tables; the blobs stay in the dataset store, the volumes' files
on the nodes.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 12:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_datasets_created_by_users")
        ),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_datasets_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("team_id", "name", name="uq_datasets_team_name"),
    )
    op.create_index(op.f("ix_datasets_team_id"), "datasets", ["team_id"], unique=False)
    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("manifest", sa.String(length=64), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("blob_count", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("source_job_id", sa.Integer(), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_dataset_versions_created_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_versions_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_versions")),
        sa.UniqueConstraint("dataset_id", "number", name="uq_dataset_versions_dataset_number"),
    )
    op.create_index(
        op.f("ix_dataset_versions_manifest"), "dataset_versions", ["manifest"], unique=False
    )
    op.create_table(
        "dataset_blobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_dataset_blobs_team_id_teams")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_blobs")),
        sa.UniqueConstraint("team_id", "sha256", name="uq_dataset_blobs_team_sha256"),
    )
    op.create_table(
        "dataset_uses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("mount", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_dataset_uses_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_dataset_uses_version_id_dataset_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_uses")),
    )
    op.create_index(op.f("ix_dataset_uses_job_id"), "dataset_uses", ["job_id"], unique=False)
    op.create_index(
        op.f("ix_dataset_uses_version_id"), "dataset_uses", ["version_id"], unique=False
    )
    op.create_table(
        "volumes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("size_limit", sa.BigInteger(), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_volumes_created_by_users")
        ),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_volumes_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volumes")),
        sa.UniqueConstraint("team_id", "name", name="uq_volumes_team_name"),
    )
    op.create_index(op.f("ix_volumes_team_id"), "volumes", ["team_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_volumes_team_id"), table_name="volumes")
    op.drop_table("volumes")
    op.drop_index(op.f("ix_dataset_uses_version_id"), table_name="dataset_uses")
    op.drop_index(op.f("ix_dataset_uses_job_id"), table_name="dataset_uses")
    op.drop_table("dataset_uses")
    op.drop_table("dataset_blobs")
    op.drop_index(op.f("ix_dataset_versions_manifest"), table_name="dataset_versions")
    op.drop_table("dataset_versions")
    op.drop_index(op.f("ix_datasets_team_id"), table_name="datasets")
    op.drop_table("datasets")
