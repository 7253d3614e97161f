"""environments: Python environments of a team, each version a locked, digest-named env

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 12:40:00.000000
"""

from alembic import op  # noqa: F401

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
