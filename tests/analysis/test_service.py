"""Findings are stored, versioned and recomputed only when stale (real SQLite, real Recorder)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.store.direct import DirectStore
from mcp_proxy.store.queries import Store
from mcp_proxy.testing.factories import Wire
from tests.analysis.cases import CASES


def _crash_session(db_url: str) -> str:
    w = CASES["transport.exit_with_pending"][0]()
    return w.record(db_url, name="crashy")


async def _findings(db_url: str, ref: str, **kw: bool) -> list[dict]:
    store = await Store.open(db_url)
    try:
        s = await store.resolve_session(ref)
        return service.current_findings(db_url, s, **kw)
    finally:
        await store.close()


def _rows(db: Path, sql: str, *args: object) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def _exec(db: Path, sql: str, *args: object) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def test_findings_are_stored_with_a_summary_and_read_back(db_url: str, db_path: Path) -> None:
    sid = _crash_session(db_url)
    rows = asyncio.run(_findings(db_url, "crashy"))
    assert [r["code"] for r in rows] == ["transport.exit_with_pending", "transport.server_crashed"]
    assert all(r["spec"].startswith("https://") for r in rows)
    stored = _rows(db_path, "SELECT * FROM findings WHERE session_id = ?", sid)
    summary = [r for r in stored if r["code"] == "analysis.summary"]
    assert len(summary) == 1 and summary[0]["source"] == "analyzer"
    detail = json.loads(summary[0]["detail"])
    assert detail == {"fingerprint": detail["fingerprint"]}  # nothing written but what is read
    assert detail["fingerprint"]["frames"] == 4 and "2 errors" in summary[0]["title"]
    assert json.loads(stored[0]["frame_seqs"]) == [4]


def test_fresh_findings_are_not_recomputed(
    db_url: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_session(db_url)
    asyncio.run(_findings(db_url, "crashy"))
    calls = []
    real = service.stream_analysis  # what check's recomputation runs
    monkeypatch.setattr(
        service, "stream_analysis", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    asyncio.run(_findings(db_url, "crashy"))
    assert calls == []
    asyncio.run(_findings(db_url, "crashy", recompute=True))
    assert calls == [1]


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE sessions SET frame_count = frame_count + 1",
        "UPDATE sessions SET status = 'ended', exit_code = 0",
    ],
)
def test_new_frames_or_a_new_state_recompute(
    change: str, db_url: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_session(db_url)
    asyncio.run(_findings(db_url, "crashy"))
    _exec(db_path, change)
    calls = []
    real = service.stream_analysis  # what check's recomputation runs
    monkeypatch.setattr(
        service, "stream_analysis", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    rows = asyncio.run(_findings(db_url, "crashy"))
    assert calls == [1]
    # One set of analyzer rows, not two.
    assert len(_rows(db_path, "SELECT id FROM findings WHERE code = 'analysis.summary'")) == 1
    if "status" in change:
        # Ended normally now: the pending request is unanswered rather than lost in a crash.
        assert "exchange.no_response" in [r["code"] for r in rows]


def test_a_new_analyzer_version_recomputes(
    db_url: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_session(db_url)
    asyncio.run(_findings(db_url, "crashy"))
    monkeypatch.setattr(service, "ANALYZER_VERSION", "999")
    asyncio.run(_findings(db_url, "crashy"))
    versions = {r["analyzer_version"] for r in _rows(db_path, "SELECT * FROM findings")}
    assert versions == {"999"}


def test_recorder_findings_are_kept_and_reported(db_url: str, db_path: Path) -> None:
    from mcp_proxy.recorder import Recorder

    sid = _crash_session(db_url)
    rec = Recorder(db_url, flush_interval=0.01)
    rec.start()
    rec.add_finding(
        sid,
        code="recorder.gap",
        severity="error",
        title="3 frame(s) were relayed but not recorded",
        detail="test",
        frame_seqs=[],
    )
    rec.close()
    for _ in range(2):
        rows = asyncio.run(_findings(db_url, "crashy", recompute=True))
        assert [r["code"] for r in rows].count("recorder.gap") == 1
    assert len(_rows(db_path, "SELECT * FROM findings WHERE source = 'recorder'")) == 1


def test_concurrent_refreshes_leave_one_set(db_url: str, db_path: Path) -> None:
    _crash_session(db_url)

    with DirectStore(db_url) as direct:
        s = direct.resolve_session("crashy")
    with ThreadPoolExecutor(2) as pool:  # two recomputations at once, each its own connection
        list(pool.map(lambda _: service.current_findings(db_url, s, recompute=True), range(2)))
    codes = [r["code"] for r in _rows(db_path, "SELECT code FROM findings")]
    assert sorted(codes) == [
        "analysis.summary",
        "transport.exit_with_pending",
        "transport.server_crashed",
    ]


def test_http_shaped_session_through_the_recorder(db_url: str) -> None:
    """HTTP exchanges written by the Recorder reach the analysis with their ids intact."""
    w = CASES["http.session_id_missing"][0]()
    w.record(db_url, name="http")
    rows = asyncio.run(_findings(db_url, "http"))
    assert [r["code"] for r in rows] == ["http.session_id_missing"]

    async def exchanges() -> list:
        store = await Store.open(db_url)
        try:
            s = await store.resolve_session("http")
            a = await service.session_analysis(store, s)
            return a.exchanges
        finally:
            await store.close()

    exs = asyncio.run(exchanges())
    assert [(e.method, e.outcome) for e in exs] == [("initialize", "ok"), ("tools/call", "ok")]
    assert all(e.http is not None for e in exs)


def test_a_live_session_keeps_requests_pending(db_url: str) -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}})
    w.record(db_url, name="live", end=False)
    # The recorder process of this session is this test process (still alive): live.
    rows = asyncio.run(_findings(db_url, "live"))
    assert rows == []
