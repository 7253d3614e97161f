"""experiments: hyper-parameter searches whose trials are jobs

``experiments``: a team's search (its spec as JSON, status, trials made, the best trial so
far, a version for the pipeline's guarded writes). ``trials``: each trial's point, its job,
state, last objective and time, and rung verdicts. ``jobs.platform_env``: the variables
gpupool sets for a job beside its spec (a trial's GPUPOOL_PARAMS and GPUPOOL_TRIAL_ID).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 19:50:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.String(50), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("trials_made", sa.Integer(), nullable=False),
        sa.Column("best_trial", sa.Integer(), nullable=True),
        sa.Column("best_value", sa.Float(precision=53), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("ended_at", Time, nullable=True),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_experiments_team_id_teams"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_experiments_user_id_users"),
        sa.PrimaryKeyConstraint("id", name="pk_experiments"),
    )
    op.create_index("ix_experiments_team_name", "experiments", ["team_id", "name"])
    op.create_index("ix_experiments_status", "experiments", ["status"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("value", sa.Float(precision=53), nullable=True),
        sa.Column("time", sa.Float(precision=53), nullable=True),
        sa.Column("rung", sa.Integer(), nullable=True),
        sa.Column("rungs", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("ended_at", Time, nullable=True),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name="fk_trials_experiment_id_experiments",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_trials_job_id_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.UniqueConstraint("experiment_id", "number", name="uq_trials_experiment_number"),
        sa.UniqueConstraint("job_id", name="uq_trials_job_id"),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("platform_env", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("platform_env")
    op.drop_table("trials")
    op.drop_index("ix_experiments_status", "experiments")
    op.drop_index("ix_experiments_team_name", "experiments")
    op.drop_table("experiments")
