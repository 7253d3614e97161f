"""node holdings: what each node keeps of what jobs fetch before they start

``nodes.holds``: the environments, dataset versions and images a node holds (key -> bytes,
as ``scheduler.types.Want`` names them), as its executor last reported them; placement
prefers a node that holds more of a job's wants. ``holds_at``: when that report came. Null
until the first report: the node is taken to hold nothing.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 15:55:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("holds", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("holds_at", Time, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("holds_at")
        batch.drop_column("holds")
