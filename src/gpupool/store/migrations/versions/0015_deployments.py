"""deployments: served models with replicas, their keys and their events

A deployment is a desired state (a model version, replicas, resources, a command or the
built-in server) that the server reconciles; each replica is a slot running one replica job
at a time. Keys that may call a deployment's /serve address are stored as hashes.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 13:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TIME = sa.Float(precision=53)
LIVE = sa.text("stopped_at IS NULL")


def upgrade() -> None:
    _deployments()
    _replicas()
    _keys()
    _events()


def downgrade() -> None:
    op.drop_index(op.f("ix_deployment_events_deployment_id"), table_name="deployment_events")
    op.drop_table("deployment_events")
    op.drop_index(op.f("ix_deployment_keys_deployment_id"), table_name="deployment_keys")
    op.drop_table("deployment_keys")
    op.drop_index(op.f("ix_deployment_replicas_job_id"), table_name="deployment_replicas")
    op.drop_index("ix_deployment_replicas_live", table_name="deployment_replicas")
    op.drop_table("deployment_replicas")
    op.drop_index(op.f("ix_deployments_team_id"), table_name="deployments")
    op.drop_index("uq_deployments_live_name", table_name="deployments")
    op.drop_table("deployments")


def _deployments() -> None:
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("stopped_at", TIME, nullable=True),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("template", sa.JSON(), nullable=False),
        sa.Column("model_version_id", sa.Integer(), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("last_generation", sa.Integer(), nullable=False),
        sa.Column("rolling_from", sa.Integer(), nullable=True),
        sa.Column("rolling_from_version_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=50), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["model_version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployments_model_version_id_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["rolling_from_version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployments_rolling_from_version_id_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["team_id"], ["teams.id"], name=op.f("fk_deployments_team_id_teams")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_deployments_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
    )
    op.create_index(
        "uq_deployments_live_name",
        "deployments",
        ["name"],
        unique=True,
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )
    op.create_index(op.f("ix_deployments_team_id"), "deployments", ["team_id"], unique=False)


def _replicas() -> None:
    op.create_table(
        "deployment_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("model_version_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("ready_at", TIME, nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("next_start_at", TIME, nullable=True),
        sa.Column("retired_at", TIME, nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_replicas_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_deployment_replicas_job_id_jobs")
        ),
        sa.ForeignKeyConstraint(
            ["model_version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployment_replicas_model_version_id_model_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_replicas")),
    )
    op.create_index(
        "ix_deployment_replicas_live",
        "deployment_replicas",
        ["deployment_id", "retired_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_deployment_replicas_job_id"), "deployment_replicas", ["job_id"], unique=False
    )


def _keys() -> None:
    op.create_table(
        "deployment_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=False),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_deployment_keys_created_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_keys_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_deployment_keys_key_hash")),
    )
    op.create_index(
        op.f("ix_deployment_keys_deployment_id"),
        "deployment_keys",
        ["deployment_id"],
        unique=False,
    )


def _events() -> None:
    op.create_table(
        "deployment_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("reason", sa.String(length=50), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_events_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_events")),
    )
    op.create_index(
        op.f("ix_deployment_events_deployment_id"),
        "deployment_events",
        ["deployment_id"],
        unique=False,
    )
