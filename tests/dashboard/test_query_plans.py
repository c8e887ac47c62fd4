"""The paths the performance targets cover never scan a table: SQLite's query plans, checked.

A database shaped like the benchmark's (one big session among many small ones, findings, tags,
HTTP sessions) is generated at a small scale by the benchmark's own generator; the dashboard
serves the pages while every SQL statement it runs is captured, and each is explained with
``EXPLAIN QUERY PLAN``. Plans are those of a database nobody ran ``ANALYZE`` on, which is what
users have.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import event

from dashboard.app import ANALYST, STORE, create_app

TABLES = ("frames", "frame_rows", "sessions", "findings", "annotations", "http_exchanges")

pytestmark = pytest.mark.timeout(90)


def bad_plan_lines(plan: list[str], *, small_session: bool = False) -> list[str]:
    """Full scans: a table read without an index, any walk over the whole frames table, and a
    walk over one whole session's frames (an index search on ``session_id`` alone — the way a
    100,000-frame session gets read end to end to answer one page). A small session is read
    whole on purpose (it is analysed whole), so for it only the first two count."""
    bad = []
    for line in plan:
        # (schema v2: the view ``frames`` reads ``frame_rows``, keyed by ``session_key``)
        if not small_session and re.match(
            r"SEARCH (frames|\w+ USING (COVERING )?INDEX uq_frames_session_seq) .*\(session_(id|key)=\?\)$",
            line,
        ):
            bad.append(line)
            continue
        m = re.match(r"SCAN (\w+)", line)
        if not m or m.group(1) not in TABLES:
            continue
        if "USING" not in line or m.group(1) in ("frames", "frame_rows"):
            bad.append(line)
    return bad


async def _plans_for(db: Path, paths: list[str]) -> dict[str, list[tuple[str, list[str]]]]:
    app = create_app("sqlite:///" + str(db), token="t")

    async def no_background(app: web.Application) -> None:
        # The list page queues small sessions for analysis behind it; those whole-session
        # reads are deliberate and not part of any page, so keep them out of the capture.
        app[ANALYST].schedule = lambda sessions: None  # type: ignore[method-assign]

    app.on_startup.append(no_background)
    out: dict[str, list[tuple[str, list[str]]]] = {}
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        seen: list[tuple[str, Any]] = []
        event.listen(
            app[STORE].engine.sync_engine,
            "before_cursor_execute",
            lambda conn, cur, stmt, params, ctx, many: seen.append((stmt, params)),
        )
        conn = sqlite3.connect(db)
        try:
            for path in paths:
                seen.clear()
                r = await client.get(path, headers={"Authorization": "Bearer t"})
                assert r.status == 200, (path, (await r.text())[:500])
                plans = []
                for stmt, params in seen:
                    if not stmt.lstrip().upper().startswith(("SELECT", "WITH")):
                        continue
                    rows = conn.execute("EXPLAIN QUERY PLAN " + stmt, params).fetchall()
                    plans.append((" ".join(stmt.split()), [row[3] for row in rows]))
                out[path] = plans
        finally:
            conn.close()
    return out


async def test_main_pages_use_indices(bench_db: tuple[Path, str, int]):
    db, big, seq = bench_db
    conn = sqlite3.connect(db)
    (http_sid,) = conn.execute(
        "SELECT id FROM sessions WHERE transport = 'http' LIMIT 1"
    ).fetchone()
    (hid,) = conn.execute(
        "SELECT id FROM http_exchanges WHERE session_id = ? LIMIT 1", (http_sid,)
    ).fetchone()
    conn.close()
    paths = [
        f"/sessions/{http_sid}",
        f"/sessions/{http_sid}/http/{hid}",
        "/sessions",
        "/sessions.json",
        "/sessions?sort=oldest",
        "/sessions?sort=frames",
        f"/sessions/{big}",
        f"/sessions/{big}.json",
        f"/sessions/{big}?after=15000",
        f"/sessions/{big}/exchanges/{seq}",
        f"/sessions/{big}/frames/{seq}",
        f"/sessions/{big}/waterfall",
        f"/sessions/{big}/waterfall?after=15000",
        "/timeline?client=bench-host",
        "/timeline.json",
    ]
    plans = await _plans_for(db, paths)
    problems = []
    for path, statements in plans.items():
        assert statements, f"no SQL captured for {path}"
        for stmt, plan in statements:
            bad = bad_plan_lines(plan, small_session=http_sid in path)
            if bad:
                problems.append(f"{path}\n  {stmt[:300]}\n  " + "\n  ".join(plan))
    assert not problems, "full scans on the dashboard's main paths:\n" + "\n".join(problems)
    # The timeline and the exchange read the big session through its indices only.
    timeline = " ".join(" ".join(p) for _, p in plans[f"/sessions/{big}"])
    assert "sqlite_autoindex_frames_1" in timeline or "uq_frames_session_seq" in timeline
    exchange = " ".join(" ".join(p) for _, p in plans[f"/sessions/{big}/exchanges/{seq}"])
    assert "ix_frames_session_msgid" in exchange


def test_the_checker_catches_a_full_scan(bench_db: tuple[Path, str, int]):
    """The rule above must be able to fail: a query that reads every frame is flagged."""
    db = bench_db[0]
    conn = sqlite3.connect(db)
    try:
        plan = [
            r[3]
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT count(*) FROM frames WHERE size > ?", (100,)
            )
        ]
        session_walk = [
            r[3]
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT DISTINCT method FROM frames ORDER BY method"
            )
        ]
        # What the partner lookup did before it lost its ORDER BY: sorted by seq, SQLite walked
        # the whole session on the (session_id, seq) index instead of using the msg_id index.
        whole_session = [
            r[3]
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM frames WHERE session_id = ? AND msg_id IN"
                " (?, ?) AND kind IN ('request', 'response') ORDER BY seq",
                (bench_db[1], "1", "2"),
            )
        ]
    finally:
        conn.close()
    assert bad_plan_lines(plan), plan
    assert bad_plan_lines(session_walk), session_walk
    assert bad_plan_lines(whole_session), whole_session
