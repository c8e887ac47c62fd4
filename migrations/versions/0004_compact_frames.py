"""Schema v2: frames stored compactly under an integer session key, decoded by the view ``frames``.

Revision 0003 stored the 32-character session id in every frame row and in four indexes, and
direction/channel/kind as strings: ~460 bytes on disk per 91-byte frame. This revision:

- ``session_keys (key, id)``: every session's small integer key, filled by a trigger whenever a
  session row is inserted (so every writer of ``sessions`` — the recorder, ``db copy``,
  ``import``, a test's SQL — gets one without knowing);
- ``frame_rows``: the frames with ``session_key`` and integer codes for direction/channel/kind
  (``mcp_proxy.store.columns``), no foreign keys (checked per row by PostgreSQL on the
  recorder's COPY path), and only the indexes queries use, partial where most rows are NULL;
- the view ``frames``: exactly the columns of revision 0003's table, decoded, with an
  INSTEAD OF INSERT trigger — ad hoc SQL and old tools keep working.

The data of a v1 database is carried over (frame ids kept, so ``tail`` positions stay valid).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# The codes are data on disk: frozen here (they equal mcp_proxy.store.columns, a test checks).
DIRECTIONS = {"c2s": 0, "s2c": 1}
CHANNELS = {"stdio": 0, "http": 1, "sse": 2, "stderr": 3, "inject": 4}
KINDS = {
    "request": 0,
    "response": 1,
    "notification": 2,
    "error": 3,
    "batch": 4,
    "invalid": 5,
    "noise": 6,
    "stderr": 7,
    "empty": 8,
    "undecodable": 9,
}
#: The columns both tables share, besides id/session/codes.
PLAIN = (
    "seq", "ts", "mono_ns", "msg_id", "error_code", "size", "complete",
    "partial_parse", "raw", "http_exchange_id", "sse_id", "sse_event", "redacted",
)  # fmt: skip
CODED = {"direction": DIRECTIONS, "channel": CHANNELS, "kind": KINDS}


def _encode(expr: str, codes: dict[str, int]) -> str:
    return (
        "CASE " + expr + " " + " ".join(f"WHEN '{n}' THEN {c}" for n, c in codes.items()) + " END"
    )


def _decode(expr: str, codes: dict[str, int]) -> str:
    return (
        "CASE " + expr + " " + " ".join(f"WHEN {c} THEN '{n}'" for n, c in codes.items()) + " END"
    )


def _view_sql() -> str:
    # The table is aliased ``frames`` so that query plans through the view name the frames.
    cols = [
        "frames.id AS id",
        "k.id AS session_id",
        "frames.seq AS seq",
        "frames.ts AS ts",
        "frames.mono_ns AS mono_ns",
        *(f"{_decode('frames.' + c, codes)} AS {c}" for c, codes in CODED.items()),
        "mt.name AS method",
        *(f"frames.{c} AS {c}" for c in PLAIN if c not in ("seq", "ts", "mono_ns")),
    ]
    return (
        "CREATE VIEW frames AS SELECT "
        + ", ".join(cols)
        + " FROM frame_rows AS frames JOIN session_keys AS k ON k.key = frames.session_key"
        " LEFT JOIN methods AS mt ON mt.code = frames.method_code"
    )


def _insert_values(new: str) -> tuple[str, str]:
    """The column list and VALUES of one frame_rows insert from a view row (``NEW``)."""
    names = ["session_key", "method_code", *CODED, *PLAIN]
    values = [
        f"(SELECT key FROM session_keys WHERE id = {new}.session_id)",
        f"(SELECT code FROM methods WHERE name = {new}.method)",
        *(_encode(f"{new}.{c}", codes) for c, codes in CODED.items()),
        *(
            f"COALESCE({new}.complete, TRUE)"
            if c == "complete"
            else f"COALESCE({new}.partial_parse, FALSE)"
            if c == "partial_parse"
            else f"{new}.{c}"
            for c in PLAIN
        ),
    ]
    return ", ".join(names), ", ".join(values)


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    op.create_table(
        "session_keys",
        sa.Column("key", BigId, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False),
        sa.UniqueConstraint("id", name="uq_session_keys_id"),
    )
    op.execute("INSERT INTO session_keys (id) SELECT id FROM sessions ORDER BY started_at, id")
    op.create_table(
        "methods",
        sa.Column("code", BigId, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.UniqueConstraint("name", name="uq_methods_name"),
    )
    op.execute(
        "INSERT INTO methods (name) SELECT DISTINCT method FROM frames"
        " WHERE method IS NOT NULL ORDER BY method"
    )
    op.create_table(
        "frame_rows",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("mono_ns", sa.BigInteger, nullable=False),
        sa.Column("direction", sa.SmallInteger, nullable=False),
        sa.Column("channel", sa.SmallInteger, nullable=False),
        sa.Column("kind", sa.SmallInteger, nullable=False),
        sa.Column("method_code", sa.Integer, nullable=True),
        sa.Column("msg_id", sa.String(300), nullable=True),
        sa.Column("error_code", sa.Integer, nullable=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("partial_parse", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("raw", sa.LargeBinary, nullable=False),
        sa.Column("http_exchange_id", BigId, nullable=True),
        sa.Column("sse_id", sa.String(200), nullable=True),
        sa.Column("sse_event", sa.String(100), nullable=True),
        sa.Column("redacted", sa.Boolean, nullable=True),
    )
    # The old rows, in id order (dense pages), then the old table and its indexes go; the new
    # indexes are built after the copy (faster than maintaining them row by row).
    select = ", ".join(
        [
            "f.id",
            "k.key",
            "mt.code",
            *(_encode("f." + c, codes) for c, codes in CODED.items()),
            *(f"f.{c}" for c in PLAIN),
        ]
    )
    op.execute(
        "INSERT INTO frame_rows"
        f" (id, session_key, method_code, {', '.join(CODED)}, {', '.join(PLAIN)}) "
        f"SELECT {select} FROM frames AS f JOIN session_keys AS k ON k.id = f.session_id "
        "LEFT JOIN methods AS mt ON mt.name = f.method ORDER BY f.id"
    )
    for name in ("ix_frames_session_method", "ix_frames_session_kind", "ix_frames_exchange"):
        op.drop_index(name, table_name="frames")
    op.drop_index("ix_frames_session_msgid", table_name="frames")
    op.drop_table("frames")
    if pg:
        op.execute(
            "SELECT setval(pg_get_serial_sequence('frame_rows', 'id'),"
            " COALESCE((SELECT max(id) FROM frame_rows), 0) + 1, false)"
        )
    c = sa.column
    op.create_index("uq_frames_session_seq", "frame_rows", ["session_key", "seq"], unique=True)
    op.create_index(
        "ix_frames_session_msgid",
        "frame_rows",
        ["session_key", "msg_id"],
        sqlite_where=c("msg_id").is_not(None),
        postgresql_where=c("msg_id").is_not(None),
    )
    op.create_index(
        "ix_frames_session_method",
        "frame_rows",
        ["session_key", "method_code"],
        sqlite_where=c("method_code").is_not(None),
        postgresql_where=c("method_code").is_not(None),
    )
    op.create_index(
        "ix_frames_requests",
        "frame_rows",
        ["session_key"],
        sqlite_where=sa.text("kind = 0"),
        postgresql_where=sa.text("kind = 0"),
    )
    op.create_index(
        "ix_frames_exchange",
        "frame_rows",
        ["http_exchange_id"],
        sqlite_where=c("http_exchange_id").is_not(None),
        postgresql_where=c("http_exchange_id").is_not(None),
    )
    op.execute(_view_sql())
    names, values = _insert_values("NEW")
    if pg:
        op.execute(
            "CREATE FUNCTION mcptape_session_key() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO session_keys (id) VALUES (NEW.id) ON CONFLICT (id) DO NOTHING; "
            "RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER sessions_key AFTER INSERT ON sessions FOR EACH ROW "
            "EXECUTE FUNCTION mcptape_session_key()"
        )
        op.execute(
            "CREATE FUNCTION mcptape_frames_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.method IS NOT NULL THEN INSERT INTO methods (name) VALUES (NEW.method)"
            " ON CONFLICT (name) DO NOTHING; END IF; "
            f"INSERT INTO frame_rows (id, {names}) VALUES (COALESCE(NEW.id, "
            f"nextval(pg_get_serial_sequence('frame_rows', 'id'))), {values}) "
            "RETURNING id INTO NEW.id; RETURN NEW; END $$"
        )
        op.execute(
            "CREATE TRIGGER frames_insert INSTEAD OF INSERT ON frames FOR EACH ROW "
            "EXECUTE FUNCTION mcptape_frames_insert()"
        )
    else:
        op.execute(
            "CREATE TRIGGER sessions_key AFTER INSERT ON sessions BEGIN "
            "INSERT OR IGNORE INTO session_keys (id) VALUES (NEW.id); END"
        )
        op.execute(
            "CREATE TRIGGER frames_insert INSTEAD OF INSERT ON frames BEGIN "
            "INSERT OR IGNORE INTO methods (name) SELECT NEW.method WHERE NEW.method IS NOT NULL; "
            f"INSERT INTO frame_rows (id, {names}) VALUES (NEW.id, {values}); END"
        )


def downgrade() -> None:
    """Back to revision 0003's table ``frames``, with the data (decoded through the view)."""
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    if pg:
        op.execute("DROP TRIGGER frames_insert ON frames")
        op.execute("DROP FUNCTION mcptape_frames_insert()")
        op.execute("DROP TRIGGER sessions_key ON sessions")
        op.execute("DROP FUNCTION mcptape_session_key()")
    else:
        op.execute("DROP TRIGGER frames_insert")
        op.execute("DROP TRIGGER sessions_key")
    op.execute("ALTER VIEW frames RENAME TO frames_v2" if pg else "DROP VIEW frames")
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
        sa.Column("redacted", sa.Boolean, nullable=True),
        sa.UniqueConstraint("session_id", "seq", name="uq_frames_v1_session_seq"),
    )
    select = ", ".join(
        [
            "f.id",
            "k.id",
            "mt.name",
            *(_decode("f." + c, codes) for c, codes in CODED.items()),
            *(f"f.{c}" for c in PLAIN),
        ]
    )
    op.execute(
        f"INSERT INTO frames (id, session_id, method, {', '.join(CODED)}, {', '.join(PLAIN)}) "
        f"SELECT {select} FROM frame_rows AS f JOIN session_keys AS k ON k.key = f.session_key "
        "LEFT JOIN methods AS mt ON mt.code = f.method_code ORDER BY f.id"
    )
    if pg:
        op.execute("DROP VIEW frames_v2")
        op.execute(
            "SELECT setval(pg_get_serial_sequence('frames', 'id'),"
            " COALESCE((SELECT max(id) FROM frames), 0) + 1, false)"
        )
    op.drop_table("frame_rows")
    op.drop_table("methods")
    op.drop_table("session_keys")
    if pg:
        op.execute(
            "ALTER TABLE frames RENAME CONSTRAINT uq_frames_v1_session_seq TO uq_frames_session_seq"
        )
    op.create_index("ix_frames_session_method", "frames", ["session_id", "method"])
    op.create_index("ix_frames_session_kind", "frames", ["session_id", "kind"])
    op.create_index("ix_frames_exchange", "frames", ["http_exchange_id"])
    op.create_index("ix_frames_session_msgid", "frames", ["session_id", "msg_id"])
