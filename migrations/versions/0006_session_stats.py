"""Stored per-session statistics: what ``mcptape stats`` prints, written when a session ends.

``session_stats``: one row per session — its per-method numbers (counts by outcome and exact
latency histograms, per direction, method and tool/prompt/resource name, as a JSON list) and the
fingerprint they were computed from (the analyzer's version, the session's frame count and how
it ended, as for the stored findings). The recorder process writes it when a session ends;
``stats`` reads it, and recomputes it (one streaming pass) when it is missing or stale.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_stats",
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), primary_key=True),
        sa.Column("analyzer_version", sa.String(32), nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("methods", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_stats")
