"""Revision 0004 (schema v2) upgrades a v1 database with its data, on SQLite and PostgreSQL.

A database is migrated to 0003 and filled the way revision 0003's recorder wrote it (string
session ids and direction/channel/kind in ``frames``); the upgrade to head must carry every
frame over, and the store must read the same sessions and frames back — through its readers
(which now read ``frame_rows``) and through the compatibility view ``frames``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from mcp_proxy.store import columns
from mcp_proxy.store.engine import alembic_config, current_revision, ensure_schema, sync_engine
from mcp_proxy.store.queries import Store
from mcp_proxy.store.schema import SCHEMA_HEAD
from tests.conftest import DIALECTS
from tests.helpers.db import PgServer

SESSIONS = ("a" * 32, "b" * 32)
KINDS = ("request", "response", "notification", "error", "stderr", "noise")


@pytest.fixture(params=DIALECTS)
def v1_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield "sqlite:///" + str(tmp_path / "v1.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database(migrated=False)
    yield url
    server.drop_database(url)


def _v1_frames(sid: str, n: int) -> list[dict[str, Any]]:
    out = []
    for seq in range(1, n + 1):
        kind = KINDS[seq % len(KINDS)]
        out.append(
            {
                "session_id": sid,
                "seq": seq,
                "ts": 1000.0 + seq,
                "mono_ns": seq * 1000,
                "direction": "c2s" if seq % 2 else "s2c",
                "channel": "stderr" if kind == "stderr" else ("sse" if seq % 5 == 0 else "stdio"),
                "kind": kind,
                "method": "tools/call" if kind in ("request", "notification") else None,
                "msg_id": str(seq // 2) if kind in ("request", "response", "error") else None,
                "error_code": -32602 if kind == "error" else None,
                "size": 3,
                "complete": seq != 7,
                "partial_parse": seq == 8,
                "raw": b"%03d" % seq,
                "http_exchange_id": None,
                "sse_id": "e1" if seq % 5 == 0 else None,
                "sse_event": None,
                "redacted": True if seq == 9 else None,
            }
        )
    return out


def _fill_v1(url: str) -> None:
    cfg = alembic_config(url)
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0003")
        with engine.begin() as conn:
            for i, sid in enumerate(SESSIONS):
                conn.execute(
                    sa.text(
                        "INSERT INTO sessions (id, name, transport, status, started_at,"
                        " frame_count, gap_count) VALUES (:id, :name, 'stdio', 'ended', :t, :n, 0)"
                    ),
                    {"id": sid, "name": f"s{i}", "t": 100.0 + i, "n": 30 + i},
                )
                cols = list(_v1_frames(sid, 1)[0])
                conn.execute(
                    sa.text(
                        f"INSERT INTO frames ({', '.join(cols)})"
                        f" VALUES ({', '.join(':' + c for c in cols)})"
                    ),
                    _v1_frames(sid, 30 + i),
                )
    finally:
        engine.dispose()


def test_a_v1_database_upgrades_with_its_frames(v1_url: str):
    _fill_v1(v1_url)
    ensure_schema(v1_url) if v1_url.startswith("sqlite") else _upgrade(v1_url)
    engine = sync_engine(v1_url)
    try:
        assert current_revision(engine) == SCHEMA_HEAD
        with engine.connect() as conn:
            view = [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM frames"))]
            stored = conn.execute(sa.text("SELECT count(*) FROM frame_rows")).scalar()
    finally:
        engine.dispose()
    assert stored == 30 + 31
    for sid, n in zip(SESSIONS, (30, 31), strict=True):
        want = _v1_frames(sid, n)
        got = sorted((r for r in view if r["session_id"] == sid), key=lambda r: r["seq"])
        assert [_norm(r) for r in got] == [_norm(r) for r in want]

    async def read() -> None:
        store = await Store.open(v1_url)
        try:
            for sid, n in zip(SESSIONS, (30, 31), strict=True):
                frames = await store.frames_by_seq(sid, range(1, n + 1))
                assert [_norm(f) for f in frames] == [_norm(f) for f in _v1_frames(sid, n)]
                counts = await store.session_counts([sid])
                assert counts[sid]["exchanges"] == sum(
                    1 for f in _v1_frames(sid, n) if f["kind"] == "request"
                )
        finally:
            await store.close()

    asyncio.run(read())


def _upgrade(url: str) -> None:
    from mcp_proxy.store.engine import upgrade

    assert upgrade(url) == "0003"


def _norm(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        (
            bytes(row[c])
            if c == "raw"
            else bool(row[c])
            if c in ("complete", "partial_parse")
            else row[c]
        )
        for c in ("session_id", *columns.FRAME_COLUMNS, "redacted")
        if c in row
    )


def test_the_codes_of_the_migration_are_the_stores():
    """The migration froze the codes (data on disk); the store encodes with the same ones."""
    import importlib.util

    path = Path(__file__).parents[2] / "migrations" / "versions" / "0004_compact_frames.py"
    spec = importlib.util.spec_from_file_location("m0004", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.DIRECTIONS == columns.DIRECTION_CODES
    assert module.CHANNELS == columns.CHANNEL_CODES
    assert module.KINDS == columns.KIND_CODES


def test_the_frame_stream_reads_what_the_view_shows(tmp_path: Path):
    """``store.stream.shaped_pages`` (``frame_rows`` as stored), its shape decoded by
    ``mcp_proxy.store.stream.named_rows``, gives a migrated session's rows as the view ``frames`` does."""
    import sqlite3

    from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, named_rows, shaped_pages

    url = "sqlite:///" + str(tmp_path / "s.db")
    _fill_v1(url)
    ensure_schema(url)
    shapes, pages = shaped_pages(url, SESSIONS[1], SHAPED_FRAME_COLUMNS, batch=7)
    streamed = [r for rows in pages for r in named_rows(shapes, rows)]
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        view = conn.execute(
            f"SELECT {', '.join(columns.FRAME_COLUMNS)} FROM frames WHERE session_id = ?"
            " ORDER BY seq",
            (SESSIONS[1],),
        ).fetchall()
    finally:
        conn.close()
    assert streamed == view and len(view) == 31
