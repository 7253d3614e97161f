"""node lifecycle: drain, up/down state, removal, join time, address, fabric group; node events

A node gains an admin's maintenance flag (``drain``, ``drain_reason``), the state the
cluster sees it in (``state``: up or down, ``down_at``), ``removed_at`` (an admin removed
it), ``joined_at`` (when it last joined; a node known before this revision joined when it
was last discovered), and how the pool reaches it (``address``, ``fabric_group``). Each
change is an event of ``node_events``.

Downgrading forgets removed nodes (the earlier schema cannot tell them apart) and makes the
others schedulable again: the earlier versions have no way to undrain a node.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-20 12:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Time = sa.Float(precision=53)


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("drain", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("drain_reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("state", sa.String(length=10), server_default="up", nullable=False)
        )
        batch_op.add_column(sa.Column("joined_at", Time, nullable=True))
        batch_op.add_column(sa.Column("down_at", Time, nullable=True))
        batch_op.add_column(sa.Column("removed_at", Time, nullable=True))
        batch_op.add_column(sa.Column("address", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("fabric_group", sa.String(length=100), nullable=True))
        batch_op.create_check_constraint("state_known", "state IN ('up', 'down')")
    nodes = _nodes()
    op.get_bind().execute(nodes.update().values(joined_at=nodes.c.discovered_at))
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("at", Time, nullable=False),
        sa.Column("reason", sa.String(length=50), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_events")),
    )
    op.create_index(op.f("ix_node_events_node"), "node_events", ["node"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_node_events_node"), table_name="node_events")
    op.drop_table("node_events")
    nodes = _nodes()
    bind = op.get_bind()
    bind.execute(nodes.delete().where(nodes.c.removed_at.is_not(None)))
    bind.execute(nodes.update().values(schedulable=True))
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_constraint("state_known", type_="check")
        for column in (
            "fabric_group",
            "address",
            "removed_at",
            "down_at",
            "joined_at",
            "state",
            "drain_reason",
            "drain",
        ):
            batch_op.drop_column(column)


def _nodes() -> sa.TableClause:
    return sa.table(
        "nodes",
        sa.column("discovered_at", sa.Float),
        sa.column("joined_at", sa.Float),
        sa.column("removed_at", sa.Float),
        sa.column("schedulable", sa.Boolean),
    )
