"""A session's rows, its findings and the analyzer's swap have one implementation, the
driver's (``store/direct.py``): the recorder process's settle, ``show``, ``export`` and
``stats`` call it directly (no SQLAlchemy on SQLite), the async store (``store/queries.py``) in
a worker thread. Expected rows on both dialects, and a swap of the analyzer's findings that
leaves the recorder's alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_proxy.errors import StoreError
from mcp_proxy.store.direct import DirectStore
from mcp_proxy.store.queries import Store
from mcp_proxy.store.rows import Batch
from mcp_proxy.store.writer import BatchWriter

pytestmark = [pytest.mark.both_dialects, pytest.mark.smoke]

SID = "d" * 32


def _finding(code: str, source: str, seqs: list[int] | None, title: str = "t") -> dict[str, Any]:
    return {
        "session_id": SID,
        "code": code,
        "severity": "info",
        "title": title,
        "detail": None,
        "frame_seqs": seqs,
        "source": source,
        "analyzer_version": "1" if source == "analyzer" else None,
        "created_at": 2.0,
    }


def _seed(url: str) -> None:
    writer = BatchWriter.open(url)
    try:
        writer.write(
            Batch(
                sessions=[
                    {
                        "id": SID,
                        "transport": "http",
                        "status": "ended",
                        "started_at": 1.0,
                        "command": ["srv", "--x"],
                        "meta": {"k": [1, 2]},
                    }
                ],
                exchanges=[],
                findings=[_finding("relay.gap", "recorder", [3])],
            )
        )
    finally:
        writer.close()


def test_rows_and_a_swap_that_keeps_recorder_rows(db_url: str) -> None:
    _seed(db_url)
    with DirectStore(db_url) as d:
        assert d.session("nope") is None and d.analysis_summary(SID) is None
        rows = [
            _finding("a.b", "analyzer", [1, 2], title="lone \ud800 surrogate"),
            _finding("analysis.summary", "analyzer", []),
        ]
        d.replace_analyzer_findings(SID, rows)
        d.replace_analyzer_findings(SID, rows)  # again: replaced, not added
        mine = (d.session(SID), d.recorded_findings(SID), d.analysis_summary(SID))
        assert d.http_exchanges(SID) == []
    session, found, summary = mine
    assert session is not None and session["command"] == ["srv", "--x"]
    assert session["meta"] == {"k": [1, 2]}
    assert [(f["code"], f["source"], f["frame_seqs"]) for f in found] == [
        ("relay.gap", "recorder", [3]),
        ("a.b", "analyzer", [1, 2]),
        ("analysis.summary", "analyzer", []),
    ]
    assert found[1]["title"] == "lone \\ud800 surrogate"
    assert summary is not None and summary["id"] == found[2]["id"]


def test_an_unreachable_database_is_one_store_error_line(tmp_path: Any) -> None:
    with pytest.raises(StoreError) as err:
        DirectStore("sqlite:///" + str(tmp_path / "no" / "such" / "dir.db"))
    assert "\n" not in str(err.value)


async def _through_the_async_store(db_url: str) -> tuple[Any, ...]:
    store = await Store.open(db_url)
    try:
        return (
            await store.get_session(SID),
            await store.recorded_findings(SID),
            await store.analysis_summary(SID),
            await store.http_exchanges(SID),
        )
    finally:
        await store.close()


def test_the_async_store_reads_and_swaps_through_the_driver(db_url: str) -> None:
    _seed(db_url)

    async def swap() -> None:
        store = await Store.open(db_url)
        try:
            rows = [_finding("a.b", "analyzer", [1]), _finding("analysis.summary", "analyzer", [])]
            await asyncio.gather(*(store.replace_analyzer_findings(SID, rows) for _ in range(3)))
        finally:
            await store.close()

    asyncio.run(swap())
    session, found, summary, http = asyncio.run(_through_the_async_store(db_url))
    assert session is not None and session["meta"] == {"k": [1, 2]}
    assert [(f["code"], f["source"]) for f in found] == [
        ("relay.gap", "recorder"),
        ("a.b", "analyzer"),
        ("analysis.summary", "analyzer"),
    ]
    assert summary is not None and summary["id"] == found[2]["id"] and http == []


def test_a_session_is_named_by_prefix_or_name(db_url: str) -> None:
    from mcp_proxy.errors import NotFoundError

    writer = BatchWriter.open(db_url)
    try:
        ids = ["ab12" + "0" * 28, "ab13" + "0" * 28, "cd00" + "0" * 28]
        starts = [1.0, 2.0, 3.0]
        names = ["same", "same", "other"]
        writer.write(
            Batch(
                sessions=[
                    {"id": i, "name": n, "transport": "stdio", "status": "ended", "started_at": t}
                    for i, n, t in zip(ids, names, starts, strict=True)
                ]
            )
        )
    finally:
        writer.close()

    want = {"ab12": ids[0], "AB13": ids[1], "cd": ids[2], "same": ids[1], "other": ids[2]}
    with DirectStore(db_url) as d:
        for ref, sid in (*want.items(), (ids[0], ids[0])):
            assert d.resolve_session(ref)["id"] == sid, ref
        assert [r["id"] for r in d.list_sessions()] == ids[::-1]
        assert [r["id"] for r in d.list_sessions(before=(3.0, ids[2]), limit=1)] == [ids[1]]
        assert [r["id"] for r in d.list_sessions(since=2.0, until=3.0)] == [ids[1]]
        assert [r["id"] for r in d.list_sessions(name="same")] == ids[1::-1]
        assert d.resolve_session("same")["id"] == ids[1]  # the latest of that name
        for ref, says in (("ab1", "ambiguous"), ("nope", "no session matches"), (" ", "empty")):
            with pytest.raises(NotFoundError, match=says):
                d.resolve_session(ref)


def test_tools_list_answers(db_url: str) -> None:
    """``stats`` and the dashboard's cost page read a session's ``tools/list`` answers (one
    query, ``store.columns.ANSWERS_SQL``): an error is no answer to count, a reused id is
    answered by the first answer after each request."""
    from mcp_proxy.testing.factories import Wire

    w = Wire()
    w.handshake()
    w.request("tools/list", 2, {})
    w.result(2, {"tools": [{"name": "a"}]})
    w.request("tools/list", 3, {})
    w.error(3, -32603, "down")
    w.request("tools/list", 2, {})  # the id again
    w.result(2, {"tools": [{"name": "a"}, {"name": "b", "description": "x" * 40}]})
    w.request("tools/call", 4, {"name": "a"})
    w.result(4, {"content": []})
    sid = w.end().record(db_url, name="cost")
    answers = [f["seq"] for f in w.frames if f["kind"] == "response"][1:3]  # after initialize

    with DirectStore(db_url) as d:
        mine = d.tools_list_answers(sid)
        assert [a["seq"] for a in mine] == answers
        raw = d.frame_raw(sid, answers[-1])
        assert raw is not None and b'"b"' in raw
        assert d.frame_raw(sid, 10_000) is None
        assert [r["id"] for r in d.list_sessions(limit=5)] == [sid]
        assert d.list_sessions(name="nope") == []


def test_the_answers_query_stays_on_the_method_and_id_indexes(tmp_path: Any) -> None:
    """On SQLite the query must not walk the session's ``(session_key, seq)`` index for the
    requests or their answers (a million-frame session's every row: 1.3 s for ``stats``)."""
    import sqlite3

    from mcp_proxy.store.columns import ANSWERS_SQL
    from mcp_proxy.store.engine import ensure_schema

    url = "sqlite:///" + str(tmp_path / "plan.db")
    ensure_schema(url)
    conn = sqlite3.connect(tmp_path / "plan.db")
    try:
        args = {"sid": SID, "method": "tools/list", "limit": 20}
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + ANSWERS_SQL, args)]
    finally:
        conn.close()
    searches = [p for p in plan if "frame_rows" in p or p.startswith("SEARCH g")]
    assert any("ix_frames_session_method" in p for p in searches), plan
    assert any("ix_frames_session_msgid" in p for p in searches), plan
    assert not any("uq_frames_session_seq (session_key=?)" in p for p in plan), plan
    assert not any("seq>?" in p for p in plan), plan
