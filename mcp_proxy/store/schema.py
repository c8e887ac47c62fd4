"""The database schema, as SQLAlchemy Core tables.

These definitions are what queries are written against. The schema itself is created and
upgraded only by the alembic migrations in ``migrations/``; a test checks that the migrated
database and these tables agree. Portable types only (SQLite by default, PostgreSQL for teams).
"""

from typing import Any

import sqlalchemy as sa

# The alembic revision these tables correspond to (a test checks it is the migrations' head);
# defined in ``store.rows``, which imports no SQLAlchemy, so the recorder can check it cheaply.
from mcp_proxy.store.rows import SCHEMA_HEAD as SCHEMA_HEAD

metadata = sa.MetaData()

# SQLite only gives AUTOINCREMENT-like rowids to INTEGER PRIMARY KEY; PostgreSQL wants BIGINT.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(200), nullable=True),
    sa.Column("transport", sa.String(16), nullable=False),  # stdio | http | sse
    sa.Column("status", sa.String(16), nullable=False),  # live | ended | crashed
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float, nullable=True),
    sa.Column("updated_at", sa.Float, nullable=True),  # last time a frame was written
    sa.Column("command", sa.JSON, nullable=True),  # argv of the wrapped server (stdio)
    sa.Column("cwd", sa.Text, nullable=True),
    sa.Column("upstream", sa.Text, nullable=True),  # upstream URL (http)
    sa.Column("pid", sa.Integer, nullable=True),  # the recorder's pid (liveness check)
    sa.Column("hostname", sa.String(255), nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("exit_signal", sa.Integer, nullable=True),
    sa.Column("era", sa.String(16), nullable=True),  # initialize | 2026-07-28
    sa.Column("protocol_version", sa.String(32), nullable=True),
    sa.Column("client_name", sa.String(200), nullable=True),
    sa.Column("client_version", sa.String(100), nullable=True),
    sa.Column("server_name", sa.String(200), nullable=True),
    sa.Column("server_version", sa.String(100), nullable=True),
    sa.Column("meta", sa.JSON, nullable=True),  # handshake details, grouping rule, …
    sa.Column("frame_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("gap_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("recorder_version", sa.String(32), nullable=True),
    sa.Index("ix_sessions_started_at", "started_at"),
    sa.Index("ix_sessions_name_started", "name", "started_at"),
)

http_exchanges = sa.Table(
    "http_exchanges",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
    sa.Column("method", sa.String(16), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("status", sa.Integer, nullable=True),
    sa.Column("request_headers", sa.JSON, nullable=True),  # [[name, value], …] in wire order
    sa.Column("response_headers", sa.JSON, nullable=True),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("first_byte_at", sa.Float, nullable=True),
    sa.Column("ended_at", sa.Float, nullable=True),
    sa.Column(
        "outcome", sa.String(32), nullable=True
    ),  # complete | host_aborted | upstream_error …
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("request_size", sa.BigInteger, nullable=True),
    sa.Column("response_size", sa.BigInteger, nullable=True),
    sa.Column("meta", sa.JSON, nullable=True),
    sa.Index("ix_http_exchanges_session", "session_id", "started_at"),
)

# Revision 0004 (schema v2): a session's frames are stored under a small integer key instead of
# its 32-character id, with direction/channel/kind as small integer codes
# (``store.columns``). ``session_keys`` gives every session its key: a trigger fills it when a
# session row is inserted, by whoever inserts it. The view ``frames`` (below) shows the stored
# rows as revision 0003 had them, for readers that need no index and for ad hoc SQL.
session_keys = sa.Table(
    "session_keys",
    metadata,
    sa.Column("key", BigId, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(32), nullable=False),
    sa.UniqueConstraint("id", name="uq_session_keys_id"),
)

# A method name is stored once; frames carry its small integer code (a trigger-free insert-if-
# absent by the writers: ``store.codes``).
methods = sa.Table(
    "methods",
    metadata,
    sa.Column("code", BigId, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("name", name="uq_methods_name"),
)

frame_rows = sa.Table(
    "frame_rows",
    metadata,
    # The row id: insertion order (``tail``) and the view's ``frames.id``.
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    # No foreign keys: the writer resolves keys itself, and PostgreSQL would run a check per
    # COPY row (the recorder's hot path) for each of them.
    sa.Column("session_key", sa.Integer, nullable=False),  # session_keys.key
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("ts", sa.Float, nullable=False),  # wall clock, seconds since the epoch
    sa.Column("mono_ns", sa.BigInteger, nullable=False),  # monotonic clock of the recorder
    sa.Column("direction", sa.SmallInteger, nullable=False),  # columns.DIRECTION_CODES
    sa.Column("channel", sa.SmallInteger, nullable=False),  # columns.CHANNEL_CODES
    sa.Column("kind", sa.SmallInteger, nullable=False),  # columns.KIND_CODES
    sa.Column("method_code", sa.Integer, nullable=True),  # methods.code
    sa.Column("msg_id", sa.String(300), nullable=True),  # JSON text of the id
    sa.Column("error_code", sa.Integer, nullable=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("partial_parse", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("raw", sa.LargeBinary, nullable=False),
    sa.Column("http_exchange_id", BigId, nullable=True),  # http_exchanges.id
    sa.Column("sse_id", sa.String(200), nullable=True),
    sa.Column("sse_event", sa.String(100), nullable=True),
    # True when ``raw`` is the redacted copy (re-serialised), not the wire bytes (migration 0002).
    sa.Column("redacted", sa.Boolean, nullable=True),
    # Every timeline window, ``show``, export and copy walk a session in seq order (a named
    # unique index rather than a constraint: SQLite would name a constraint's index itself).
    sa.Index("uq_frames_session_seq", "session_key", "seq", unique=True),
)

findings = sa.Table(
    "findings",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("severity", sa.String(8), nullable=False),  # error | warning | info
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("frame_seqs", sa.JSON, nullable=True),  # the frames that prove it
    sa.Column("source", sa.String(16), nullable=False),  # recorder | analyzer
    sa.Column("analyzer_version", sa.String(32), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_findings_session", "session_id", "severity"),
)

# Revision 0006: what ``mcptape stats`` prints, stored when a session ends (one row per session:
# its per-method numbers with exact latency histograms, and the fingerprint they were computed
# from, as the findings' ``analysis.summary`` row records theirs: ``analysis.service``).
session_stats = sa.Table(
    "session_stats",
    metadata,
    sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), primary_key=True),
    sa.Column("analyzer_version", sa.String(32), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),  # JSON text (sorted keys)
    sa.Column("methods", sa.JSON, nullable=False),  # [StoredMethod, …] (analysis.stats)
    sa.Column("created_at", sa.Float, nullable=False),
)

# ---------------------------------------------------------------------------------------------
# Dashboard (revision 0003): what people write about the traffic, and the indices its pages use.

annotations = sa.Table(
    "annotations",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
    sa.Column("frame_seq", sa.Integer, nullable=True),  # None: about the whole session
    # Exactly one of tag / note is set: a tag is a short label ("bug-repro") that the sessions
    # page filters on (indexed, so it stays short); a note is free text (never indexed).
    sa.Column("tag", sa.String(64), nullable=True),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=True),
    sa.Index("ix_annotations_session", "session_id", "frame_seq"),
    sa.Index("ix_annotations_tag", "tag", "session_id"),
)

# ---------------------------------------------------------------------------------------------
# Intercept (revision 0005): messages a relay holds until a person decides (docs/intercept.md).
# The relay inserts a row and polls it; ``mcptape intercept resolve`` or the dashboard, in
# another process, writes the decision. No foreign key: the session row may not be written yet.

intercepts = sa.Table(
    "intercepts",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(32), nullable=False),
    sa.Column("direction", sa.String(3), nullable=False),  # c2s | s2c
    sa.Column("kind", sa.String(16), nullable=False),  # request | notification | response | other
    sa.Column("method", sa.String(200), nullable=True),  # a response: its request's method
    sa.Column("msg_id", sa.String(300), nullable=True),  # JSON text of the id
    sa.Column("rule", sa.Text, nullable=True),  # the intercept rule that held it
    sa.Column("original", sa.LargeBinary, nullable=False),  # the frame as the peer sent it
    sa.Column("state", sa.String(8), nullable=False),  # held | resolved
    # forward | edit | answer | drop | timeout (forwarded unchanged) | abandoned (relay ended)
    sa.Column("decision", sa.String(8), nullable=True),
    sa.Column("payload", sa.LargeBinary, nullable=True),  # the edited message or the answer
    sa.Column("held_at", sa.Float, nullable=False),
    sa.Column("resolved_at", sa.Float, nullable=True),
    sa.Column("resolved_by", sa.String(200), nullable=True),
    sa.Index("ix_intercepts_state", "state", "id"),
    sa.Index("ix_intercepts_session", "session_id", "id"),
)

# Frame indexes, each for a query that needs it, partial where most rows would be NULL:
# - a timeline page finds the partners of the requests it shows by id (``pages.partners``);
sa.Index(
    "ix_frames_session_msgid",
    frame_rows.c.session_key,
    frame_rows.c.msg_id,
    sqlite_where=frame_rows.c.msg_id.is_not(None),
    postgresql_where=frame_rows.c.msg_id.is_not(None),
)
# - the filter menu's skip scan over methods and the method filter (``pages.session_methods``);
sa.Index(
    "ix_frames_session_method",
    frame_rows.c.session_key,
    frame_rows.c.method_code,
    sqlite_where=frame_rows.c.method_code.is_not(None),
    postgresql_where=frame_rows.c.method_code.is_not(None),
)
# - the sessions page counts requests per session (``pages.session_counts``): requests only;
sa.Index(
    "ix_frames_requests",
    frame_rows.c.session_key,
    sqlite_where=frame_rows.c.kind == 0,
    postgresql_where=frame_rows.c.kind == 0,
)
# - an HTTP exchange's frames (HTTP sessions only).
sa.Index(
    "ix_frames_exchange",
    frame_rows.c.http_exchange_id,
    sqlite_where=frame_rows.c.http_exchange_id.is_not(None),
    postgresql_where=frame_rows.c.http_exchange_id.is_not(None),
)
# The sessions page's "most frames" sort, keyset-paginated on (frame_count, id).
sa.Index("ix_sessions_frame_count", sessions.c.frame_count, sessions.c.id)

# ---------------------------------------------------------------------------------------------
# The view ``frames``: the rows of ``frame_rows`` decoded (session id, direction/channel/kind
# strings), column for column what the table ``frames`` was up to revision 0003. Not part of
# ``metadata`` (alembic compares tables; the migration creates the view). Readers that select
# through it get the old row shapes; inserts through it go through an INSTEAD OF trigger.
views = sa.MetaData()
frames = sa.Table(
    "frames",
    views,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(32), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("mono_ns", sa.BigInteger, nullable=False),
    sa.Column("direction", sa.String(3), nullable=False),  # c2s | s2c
    sa.Column("channel", sa.String(8), nullable=False),  # stdio | stderr | http | sse | inject
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("method", sa.String(200), nullable=True),
    sa.Column("msg_id", sa.String(300), nullable=True),
    sa.Column("error_code", sa.Integer, nullable=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),
    sa.Column("partial_parse", sa.Boolean, nullable=False),
    sa.Column("raw", sa.LargeBinary, nullable=False),
    sa.Column("http_exchange_id", BigId, nullable=True),
    sa.Column("sse_id", sa.String(200), nullable=True),
    sa.Column("sse_event", sa.String(100), nullable=True),
    sa.Column("redacted", sa.Boolean, nullable=True),
)


def key_of(session_id: object) -> sa.ScalarSelect[int]:
    """``session_keys.key`` of a session as a scalar subquery: how readers filter
    ``frame_rows`` by session id (evaluated once per statement, then an index search)."""
    return sa.select(session_keys.c.key).where(session_keys.c.id == session_id).scalar_subquery()


def select_key(session_id: object) -> sa.Select[Any]:
    """The statement reading one session's key (writers that need it as a number)."""
    return sa.select(session_keys.c.key).where(session_keys.c.id == session_id)
