"""The dashboard's "Analyse now" (issue #24): the one bounded pass over the session, whatever its
size — it stores the session's findings and per-method numbers and holds no session whole (the
full load of every frame is never called); the per-session locks of whole analyses are bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard import analysis as an
from dashboard.app import create_app
from mcp_proxy.analysis import service
from mcp_proxy.store.queries import Store
from tests.helpers import db as rdb
from tests.helpers.shared import copy_sqlite

pytestmark = pytest.mark.timeout(180)


async def test_analyse_now_runs_the_bounded_pass_and_stores_numbers_too(
    bench_db: tuple[Path, str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = copy_sqlite(bench_db[0], tmp_path / "bench.db")
    big = bench_db[1]  # over INLINE_LIMIT frames

    def whole_load(*_a: object, **_k: object) -> None:
        raise AssertionError("Analyse now loaded the whole session")

    monkeypatch.setattr(service, "load_sync", whole_load)
    rdb.execute(db, "DELETE FROM session_stats WHERE session_id = ?", big)
    app = create_app("sqlite:///" + str(db), token="t")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        auth = {"Authorization": "Bearer t"}
        r = await client.post(f"/sessions/{big}/analyse.json", headers=auth)
        assert r.status == 200, await r.text()
        found = (await r.json())["findings"]
    stored = rdb.rows(
        db, "SELECT code FROM findings WHERE session_id = ? AND source = 'analyzer'", big
    )
    assert "analysis.summary" in {f["code"] for f in stored}
    assert len(found) == len([f for f in stored if f["code"] != "analysis.summary"]) + len(
        rdb.rows(db, "SELECT id FROM findings WHERE session_id = ? AND source = 'recorder'", big)
    )
    assert len(rdb.rows(db, "SELECT * FROM session_stats WHERE session_id = ?", big)) == 1


async def test_whole_analysis_locks_are_bounded(
    bench_db: tuple[Path, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(an, "LOCKS", 2)
    db = bench_db[0]
    store = await Store.open("sqlite:///" + str(db))
    try:
        analyst = an.Analyst(store)
        small = [
            await store.session(r["id"])
            for r in rdb.rows(db, "SELECT id FROM sessions ORDER BY frame_count LIMIT 4")
        ]
        for s in small:
            assert await analyst.whole(s) is not None
        assert analyst.locks() == 2
    finally:
        await store.close()


async def test_current_findings_are_read_through_the_stores_connection(
    bench_db: tuple[Path, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's findings, current or not to be analysed, come through the async store's one
    driver connection: no connection of their own per page view (on PostgreSQL an engine, a
    connection and its log-in each time)."""
    db = bench_db[0]
    store = await Store.open("sqlite:///" + str(db))
    try:
        session = await store.session(bench_db[1])

        def no_new_connection(*_a: object, **_k: object) -> None:
            raise AssertionError("a connection of its own for a read")

        monkeypatch.setattr(service, "DirectStore", no_new_connection)
        got, _fresh = await service.findings_view(store, session, analyse_if_stale=False)
        assert isinstance(got, list)
    finally:
        await store.close()


async def test_analysis_passes_run_one_at_a_time(
    bench_db: tuple[Path, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clicks of "Analyse now" on several sessions run one bounded pass at a time: the worker
    threads the pages' reads use are not all taken by passes."""
    import asyncio

    running = peak = 0
    entered = asyncio.Event()
    release = asyncio.Event()

    async def pass_(*_a: object, **_k: object) -> tuple[list[object], bool]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        entered.set()
        await release.wait()
        running -= 1
        return [], True

    monkeypatch.setattr(service, "findings_view", pass_)
    db = bench_db[0]
    store = await Store.open("sqlite:///" + str(db))
    try:
        analyst = an.Analyst(store)
        ids = [r["id"] for r in rdb.rows(db, "SELECT id FROM sessions LIMIT 3")]
        sessions = [await store.session(i) for i in ids]
        clicks = asyncio.gather(*(analyst.refresh(s) for s in sessions))
        await entered.wait()
        for _ in range(20):  # let every click run as far as it can
            await asyncio.sleep(0)
        assert running == 1
        release.set()
        await clicks
        assert peak == 1
    finally:
        await store.close()
