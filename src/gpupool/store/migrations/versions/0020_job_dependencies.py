"""job dependencies: a job that waits for others to end (afterok, afterany, afternotok)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 12:40:00.000000
"""

from alembic import op  # noqa: F401

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
