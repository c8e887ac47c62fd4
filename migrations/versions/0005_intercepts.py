"""Intercept: messages held on the wire until a person decides (issue #27).

``intercepts``: one row per held message — the relay inserts it when a rule holds a message and
polls it for a decision; ``mcptape intercept resolve`` and the dashboard, in other processes,
write the decision. No foreign key to ``sessions``: the relay inserts the row at once, while the
session row is still on its way through the recorder process.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "intercepts",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(3), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("method", sa.String(200), nullable=True),
        sa.Column("msg_id", sa.String(300), nullable=True),
        sa.Column("rule", sa.Text, nullable=True),
        sa.Column("original", sa.LargeBinary, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("decision", sa.String(8), nullable=True),
        sa.Column("payload", sa.LargeBinary, nullable=True),
        sa.Column("held_at", sa.Float, nullable=False),
        sa.Column("resolved_at", sa.Float, nullable=True),
        sa.Column("resolved_by", sa.String(200), nullable=True),
    )
    op.create_index("ix_intercepts_state", "intercepts", ["state", "id"])
    op.create_index("ix_intercepts_session", "intercepts", ["session_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_intercepts_session", table_name="intercepts")
    op.drop_index("ix_intercepts_state", table_name="intercepts")
    op.drop_table("intercepts")
