"""deployment names per team: a live deployment's name is unique in its team, not the pool

Two teams may each serve a deployment of one name (as they may each have a model or a job of
one name); /serve/NAME@TEAM/ tells them apart. Downgrading fails while two teams share a
live deployment's name: stop one of them first.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 23:45:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

LIVE = sa.text("stopped_at IS NULL")


def upgrade() -> None:
    op.drop_index("uq_deployments_live_name", table_name="deployments")
    op.create_index(
        "uq_deployments_live_team_name",
        "deployments",
        ["team_id", "name"],
        unique=True,
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )


def downgrade() -> None:
    op.drop_index("uq_deployments_live_team_name", table_name="deployments")
    op.create_index(
        "uq_deployments_live_name",
        "deployments",
        ["name"],
        unique=True,
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )
