"""Dashboard: annotations (notes and tags on sessions and frames) and the indices its pages need.

``frames (session_id, msg_id)`` lets a timeline page find the responses of the requests it shows
without reading the whole session (a 100,000-frame session pages in constant time);
``sessions (frame_count, id)`` serves the "most frames" sort without a scan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "annotations",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("frame_seq", sa.Integer, nullable=True),
        sa.Column("tag", sa.String(64), nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=True),
    )
    op.create_index("ix_annotations_session", "annotations", ["session_id", "frame_seq"])
    op.create_index("ix_annotations_tag", "annotations", ["tag", "session_id"])
    op.create_index("ix_frames_session_msgid", "frames", ["session_id", "msg_id"])
    op.create_index("ix_sessions_frame_count", "sessions", ["frame_count", "id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_frame_count", table_name="sessions")
    op.drop_index("ix_frames_session_msgid", table_name="frames")
    op.drop_table("annotations")
