"""datasets and volumes: versioned, content-addressed datasets and a team's mutable volumes

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 12:40:00.000000
"""

from alembic import op  # noqa: F401

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
