"""Initial schema: sessions, http exchanges, frames, findings.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=True),
        sa.Column("command", sa.JSON, nullable=True),
        sa.Column("cwd", sa.Text, nullable=True),
        sa.Column("upstream", sa.Text, nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("exit_signal", sa.Integer, nullable=True),
        sa.Column("era", sa.String(16), nullable=True),
        sa.Column("protocol_version", sa.String(32), nullable=True),
        sa.Column("client_name", sa.String(200), nullable=True),
        sa.Column("client_version", sa.String(100), nullable=True),
        sa.Column("server_name", sa.String(200), nullable=True),
        sa.Column("server_version", sa.String(100), nullable=True),
        sa.Column("meta", sa.JSON, nullable=True),
        sa.Column("frame_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("gap_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("recorder_version", sa.String(32), nullable=True),
    )
    op.create_index("ix_sessions_started_at", "sessions", ["started_at"])
    op.create_index("ix_sessions_name_started", "sessions", ["name", "started_at"])

    op.create_table(
        "http_exchanges",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("request_headers", sa.JSON, nullable=True),
        sa.Column("response_headers", sa.JSON, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("first_byte_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("request_size", sa.BigInteger, nullable=True),
        sa.Column("response_size", sa.BigInteger, nullable=True),
        sa.Column("meta", sa.JSON, nullable=True),
    )
    op.create_index("ix_http_exchanges_session", "http_exchanges", ["session_id", "started_at"])

    op.create_table(
        "frames",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("mono_ns", sa.BigInteger, nullable=False),
        sa.Column("direction", sa.String(3), nullable=False),
        sa.Column("channel", sa.String(8), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("method", sa.String(200), nullable=True),
        sa.Column("msg_id", sa.String(300), nullable=True),
        sa.Column("error_code", sa.Integer, nullable=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("partial_parse", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("raw", sa.LargeBinary, nullable=False),
        sa.Column("http_exchange_id", BigId, sa.ForeignKey("http_exchanges.id"), nullable=True),
        sa.Column("sse_id", sa.String(200), nullable=True),
        sa.Column("sse_event", sa.String(100), nullable=True),
        sa.UniqueConstraint("session_id", "seq", name="uq_frames_session_seq"),
    )
    op.create_index("ix_frames_session_method", "frames", ["session_id", "method"])
    op.create_index("ix_frames_session_kind", "frames", ["session_id", "kind"])
    op.create_index("ix_frames_exchange", "frames", ["http_exchange_id"])

    op.create_table(
        "findings",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("severity", sa.String(8), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("frame_seqs", sa.JSON, nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("analyzer_version", sa.String(32), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_findings_session", "findings", ["session_id", "severity"])


def downgrade() -> None:
    op.drop_table("findings")
    op.drop_table("frames")
    op.drop_table("http_exchanges")
    op.drop_table("sessions")
