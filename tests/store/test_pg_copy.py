"""The PostgreSQL fast path (``mcp_proxy.store.pg``): binary COPY writes exactly what it is given.

Rows go in as the recorder builds them (tuples in ``store.writes.FRAME_COLS`` order, through the
recorder's PostgreSQL backend, ``store.writes.DriverBackend``) and come back identical through
the store's own read API — every byte value in ``raw``, NULLs, a large frame, non-ASCII text —
inside the caller's transaction (a rollback leaves nothing).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from mcp_proxy.store import pg
from mcp_proxy.store.engine import Driver
from mcp_proxy.store.queries import Store
from mcp_proxy.store.rows import FRAME_COLS, FrameRow
from mcp_proxy.store.writes import DriverBackend
from tests.helpers.db import PgServer


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


def _session(backend: DriverBackend, conn: object) -> str:
    sid = uuid.uuid4().hex
    row = {"id": sid, "transport": "http", "status": "live", "started_at": time.time()}
    backend.insert_sessions(conn, [row])
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
    backend = DriverBackend(Driver(pg_url))
    try:
        with backend.transaction() as conn:
            sid = _session(backend, conn)
            exchange = {"session_id": sid, "method": "POST", "url": "/mcp", "started_at": 1.0}
            (xid,) = backend.insert_exchanges(conn, [exchange])
            rows = _rows(sid, xid)
            backend.insert_frames(conn, [FrameRow(*r) for r in rows], {xid: xid}.get)
    finally:
        backend.close()

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


def _count(db: Driver, table: str) -> int:
    with db.transaction() as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_copy_joins_the_callers_transaction(pg_url: str):
    db = Driver(pg_url)
    backend = DriverBackend(db)
    try:
        with db.connection() as conn:
            sid = _session(backend, conn)
            backend.insert_frames(conn, [FrameRow(*r) for r in _rows(sid, 0)[:2]], {}.get)
            conn.rollback()
        assert (_count(db, "frames"), _count(db, "sessions")) == (0, 0)
    finally:
        db.close()


def test_copy_rows_handles_json_columns_and_names_unknown_columns(pg_url: str):
    db = Driver(pg_url)
    try:
        with db.transaction() as dbapi:
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
        with db.transaction() as conn:
            meta, command = conn.execute("SELECT meta, command FROM sessions").fetchone()
        assert meta == {"replay_of": {"session_id": "b" * 32}}
        assert command == ["python", "-m", "srv"]
    finally:
        db.close()


def test_the_writer_tells_a_bad_row_from_a_lost_server(pg_url: str):
    """A bad row is not transient (the writer retries row by row); a server that went away is
    (the writer retries the batch later), and the next batch has a connection again."""
    db = Driver(pg_url)
    backend = DriverBackend(db)
    try:
        with backend.transaction() as conn:
            sid = _session(backend, conn)
        row = FrameRow(*_rows(sid, 0)[0])
        bad = row._replace(method="nul\x00byte")  # PostgreSQL text holds no NUL
        with pytest.raises(psycopg.Error) as info, backend.transaction() as conn:
            backend.insert_frames(conn, [bad], {}.get)
        assert not backend.is_transient(info.value)
        with pytest.raises(psycopg.Error) as info, backend.transaction() as conn:
            with psycopg.connect(pg_url) as killer:
                pid = conn.info.backend_pid
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            backend.insert_frames(conn, [row], {}.get)
        assert backend.is_transient(info.value)
        with backend.transaction() as conn:  # the pool reconnects by itself
            backend.insert_frames(conn, [row], {}.get)
        assert _count(db, "frames") == 1
    finally:
        db.close()
