"""The dashboard's main paths on PostgreSQL never scan the frames table nor walk a big session.

The PostgreSQL twin of ``tests/dashboard/test_query_plans.py``: the same generated database
(the benchmark's generator, one big session among many small ones) is moved into PostgreSQL
with ``mcptape db copy`` and ``VACUUM ANALYZE``d (autovacuum does that on a team's server
after a load). The real dashboard serves the pages while every SQL statement it runs is captured; each
is then run again under ``EXPLAIN (ANALYZE, FORMAT JSON)``, which gives both the plan and the
rows each step really read.

Rules (those of the SQLite checker): no sequential scan of ``frames`` anywhere; on the big
session, no step reads more than a page's worth of frames through a condition on
``session_id`` alone (a walk over the session's index is a full read in disguise); the timeline
and the exchange use the indices made for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import event

from dashboard.app import ANALYST, STORE, create_app
from mcp_proxy.store.copy import copy_store
from tests.helpers import db as rdb
from tests.helpers.db import PgServer, libpq_conninfo
from tests.helpers.shared import bench_file

#: More frame rows than this read by one step of one page query is a walk over the session.
PAGE_ROWS = 2_000

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pg_bench(
    pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    # The SQLite twin's generated database, built once per run (tests/helpers/shared.py).
    lite = bench_file(tmp_path_factory)
    big = rdb.rows(lite, "SELECT id FROM sessions ORDER BY frame_count DESC LIMIT 1")[0]["id"]
    url = pg_server.create_database()
    copy_store("sqlite:///" + str(lite), url)
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    yield url, big
    pg_server.drop_database(url)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


#: A condition on one of these besides ``session_id`` narrows a read to part of a session.
#: ``seq`` is not one: ``seq > N`` on the big session still reads all of it after N (the first
#: timeline page through the view sorted the whole session that way — 100,000 frames to keep
#: 201 — until it took its ids from ``frame_rows`` in key order).
NARROWING = re.compile(r"\b(kind|msg_id|method_code|http_exchange_id)\b")


#: Partial indexes whose predicate narrows to part of a session (``kind = request``): reading
#: them is reading what the query asks for (the sessions page's request count), not a walk.
NARROWED_BY_PREDICATE = frozenset({"ix_frames_requests"})


def bad_nodes(plan: dict[str, Any], *, big_session: bool) -> list[str]:
    """Sequential scans of frames; on a big session, a read over ``session_id`` alone.

    The same rule as SQLite's checker: an index search narrowed by another column (the kind,
    the message id) is fine, one on ``session_id`` alone walks the whole session.
    """
    bad = []
    for node in _nodes(plan):
        kind = node["Node Type"]
        index = str(node.get("Index Name") or "")
        on_frames = node.get("Relation Name") == "frame_rows" or index.startswith(
            ("ix_frames", "uq_frames", "frames_")
        )
        if not on_frames:
            continue
        rows = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))
        cond = str(node.get("Index Cond") or node.get("Recheck Cond") or "")
        if "Seq Scan" in kind:
            bad.append(f"{kind} on frames ({rows} rows)")
        elif (
            big_session
            and rows > PAGE_ROWS
            and not NARROWING.search(cond)
            and index not in NARROWED_BY_PREDICATE
        ):
            bad.append(f"{kind} on frames ({index or 'no index'}, {cond}) read {rows} rows")
    return bad


async def _plans_for(url: str, paths: list[str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    app = create_app(url, token="t")

    async def no_background(app: web.Application) -> None:
        app[ANALYST].schedule = lambda sessions: None  # type: ignore[method-assign]

    app.on_startup.append(no_background)
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        seen: list[tuple[str, Any]] = []
        event.listen(
            app[STORE].engine.sync_engine,
            "before_cursor_execute",
            lambda conn, cur, stmt, params, ctx, many: seen.append((stmt, params)),
        )
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            for path in paths:
                seen.clear()
                r = await client.get(path, headers={"Authorization": "Bearer t"})
                assert r.status == 200, (path, (await r.text())[:500])
                plans = []
                for stmt, params in seen:
                    if not stmt.lstrip().upper().startswith(("SELECT", "WITH")):
                        continue
                    row = conn.execute(
                        "EXPLAIN (ANALYZE, FORMAT JSON) " + stmt,  # type: ignore[arg-type]
                        params or None,
                    ).fetchone()
                    assert row is not None
                    plans.append((" ".join(stmt.split()), row[0][0]["Plan"]))
                out[path] = plans
    return out


async def test_main_pages_use_indices_on_postgresql(pg_bench: tuple[str, str]):
    url, big = pg_bench
    seq = rdb.rows(
        url,
        "SELECT seq FROM frames WHERE session_id = ? AND kind = 'request' AND seq > 15000"
        " ORDER BY seq LIMIT 1",
        big,
    )[0]["seq"]
    http_sid = rdb.rows(url, "SELECT id FROM sessions WHERE transport = 'http' LIMIT 1")[0]["id"]
    hid = rdb.rows(url, "SELECT id FROM http_exchanges WHERE session_id = ? LIMIT 1", http_sid)[0][
        "id"
    ]
    paths = [
        f"/sessions/{http_sid}",
        f"/sessions/{http_sid}/http/{hid}",
        "/sessions",
        "/sessions.json",
        "/sessions?sort=oldest",
        "/sessions?sort=frames",
        "/sessions?tag=bug-repro",
        f"/sessions/{big}",
        f"/sessions/{big}.json",
        f"/sessions/{big}?after=15000",
        f"/sessions/{big}/exchanges/{seq}",
        f"/sessions/{big}/frames/{seq}",
    ]
    plans = await _plans_for(url, paths)
    problems = []
    for path, statements in plans.items():
        assert statements, f"no SQL captured for {path}"
        for stmt, plan in statements:
            bad = bad_nodes(plan, big_session=big in path)
            if bad:
                problems.append(f"{path}\n  {stmt[:300]}\n  " + "\n  ".join(bad))
    assert not problems, "full reads on the dashboard's main paths:\n" + "\n".join(problems)

    def indexes(path: str) -> set[str]:
        return {
            str(n.get("Index Name"))
            for _, plan in plans[path]
            for n in _nodes(plan)
            if n.get("Relation Name") == "frame_rows" and n.get("Index Name")
        }

    assert "uq_frames_session_seq" in indexes(f"/sessions/{big}")
    assert "ix_frames_session_msgid" in indexes(f"/sessions/{big}/exchanges/{seq}")


def test_the_checker_catches_a_full_read(pg_bench: tuple[str, str]):
    """The rules above can fail: a scan of every frame, and a walk over the big session."""
    url, big = pg_bench
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:

        def plan(sql: str, *args: Any) -> dict[str, Any]:
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, args).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return row[0][0]["Plan"]

        scan = plan("SELECT count(*) FROM frames WHERE size > %s", 100)
        walk = plan("SELECT count(*) FROM frames WHERE session_id = %s", big)
    assert any("Seq Scan" in b for b in bad_nodes(scan, big_session=False)), scan
    assert bad_nodes(walk, big_session=True), walk
