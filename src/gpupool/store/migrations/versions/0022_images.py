"""container images: OCI images pulled or imported, kept by manifest digest

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 12:40:00.000000
"""

from alembic import op  # noqa: F401

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
