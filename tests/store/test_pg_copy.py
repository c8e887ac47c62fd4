"""The PostgreSQL fast path (``mcp_proxy.store.pg``): binary COPY writes exactly what it is given.

Rows go in as the recorder builds them (tuples in ``store.writes.FRAME_COLS`` order) and come
back identical through the store's own read API — every byte value in ``raw``, NULLs, a large
frame, non-ASCII text — inside the caller's transaction (a rollback leaves nothing).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from mcp_proxy.store import pg
from mcp_proxy.store.engine import sync_engine
from mcp_proxy.store.queries import Store
from mcp_proxy.store.rows import FRAME_COLS
from mcp_proxy.store.schema import http_exchanges, sessions
from tests.helpers.db import PgServer


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


def _session(conn: sa.Connection) -> str:
    sid = uuid.uuid4().hex
    conn.execute(
        sessions.insert(),
        [{"id": sid, "transport": "http", "status": "live", "started_at": time.time()}],
    )
    return sid


def _rows(sid: str, exchange: int) -> list[tuple]:
    every_byte = bytes(range(256))
    big = b"\x00\xff" * (3 << 20)  # 6 MiB
    base = time.time()
    out = []
    for seq, (raw, kind, method, msg_id, code, chan, xid, complete, partial, redacted) in enumerate(
        [
            (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\n',
                "request",
                "tools/call",
                "1",
                None,
                "stdio",
                None,
                True,
                False,
                None,
            ),
            (every_byte, "noise", None, None, None, "stdio", None, False, True, None),
            (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602}}',
                "error",
                None,
                "1",
                -32602,
                "http",
                exchange,
                True,
                False,
                True,
            ),
            (big, "response", None, '"r\u00e9p"', None, "sse", exchange, 1, 0, False),
            (
                "caf\u00e9 \u2603\n".encode(),
                "stderr",
                "m\u00e9thode",
                None,
                None,
                "stderr",
                None,
                True,
                False,
                None,
            ),
        ],
        start=1,
    ):
        out.append(
            (sid, seq, base + seq, 1000 + seq, "s2c" if seq % 2 else "c2s", chan, kind, method,
             msg_id, code, len(raw), complete, partial, raw, xid, "ev-1" if chan == "sse" else None,
             "message" if chan == "sse" else None, redacted)
        )  # fmt: skip
    return out


def test_copy_frames_writes_what_the_recorder_built(pg_url: str):
    engine = sync_engine(pg_url)
    try:
        with engine.begin() as conn:
            sid = _session(conn)
            xid = conn.execute(
                http_exchanges.insert().returning(http_exchanges.c.id),
                [{"session_id": sid, "method": "POST", "url": "/mcp", "started_at": 1.0}],
            ).scalar_one()
            rows = _rows(sid, xid)
            assert pg.copy_frames(conn, rows) == len(rows)
    finally:
        engine.dispose()

    async def read() -> list[dict]:
        async with await Store.open(pg_url) as store:
            return await store.frames(sid)

    got = asyncio.run(read())
    assert len(got) == len(rows)
    for want, row in zip(rows, got, strict=True):
        have = tuple(row[c] for c in FRAME_COLS)
        # 1/0 for booleans (a recorder may build them so) are stored as booleans.
        want = tuple(bool(v) if c in ("complete", "partial_parse") else v
                     for c, v in zip(FRAME_COLS, want, strict=True))  # fmt: skip
        assert have == want


def test_copy_joins_the_callers_transaction(pg_url: str):
    engine = sync_engine(pg_url)
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            sid = _session(conn)
            pg.copy_frames(conn, _rows(sid, 0)[:2])
            trans.rollback()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM frames")).scalar() == 0
            assert conn.execute(sa.text("SELECT count(*) FROM sessions")).scalar() == 0
    finally:
        engine.dispose()


def test_copy_rows_handles_json_columns_and_names_unknown_columns(pg_url: str):
    engine = sync_engine(pg_url)
    try:
        with engine.begin() as conn:
            dbapi = conn.connection.driver_connection
            cols = ("id", "transport", "status", "started_at", "meta", "command")
            pg.copy_rows(
                dbapi,
                "sessions",
                cols,
                [("a" * 32, "stdio", "ended", 1.5, {"replay_of": {"session_id": "b" * 32}},
                  ["python", "-m", "srv"])],
            )  # fmt: skip
            with pytest.raises(ValueError, match="no column"):
                pg.copy_rows(dbapi, "sessions", ("id", "nope"), [])
        with engine.connect() as conn:
            row = conn.execute(sa.select(sessions.c.meta, sessions.c.command)).one()
        assert row.meta == {"replay_of": {"session_id": "b" * 32}}
        assert row.command == ["python", "-m", "srv"]
    finally:
        engine.dispose()


def test_copy_errors_are_sqlalchemys_so_the_writer_can_tell_them_apart(pg_url: str):
    """A bad row is a DataError (the writer retries row by row); a server that went away is an
    OperationalError (the writer retries the batch later) and the connection is invalidated."""
    engine = sync_engine(pg_url)
    try:
        with engine.connect() as conn:
            with conn.begin():
                sid = _session(conn)
            row = _rows(sid, 0)[0]
            at = FRAME_COLS.index("method")
            bad = (*row[:at], "nul\x00byte", *row[at + 1 :])  # PostgreSQL text holds no NUL
            with pytest.raises(sa.exc.DataError), conn.begin():
                pg.copy_frames(conn, [bad])
        with engine.connect() as conn:
            pid = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
            with engine.connect() as killer:
                killer.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            with pytest.raises(sa.exc.OperationalError) as info, conn.begin():
                pg.copy_frames(conn, _rows(sid, 0)[:1])
            assert info.value.connection_invalidated
        with engine.begin() as conn:  # the pool reconnects by itself
            assert pg.copy_frames(conn, _rows(sid, 0)[:1]) == 1
    finally:
        engine.dispose()
