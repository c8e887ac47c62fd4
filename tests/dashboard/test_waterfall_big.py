"""The waterfall of a session too big to analyse whole (issue #28): its bars carry their
notifications as ticks too, read for the page only (bounded by ``WATERFALL_NOTES``).

The benchmark's generated database: its big session (over ``INLINE_LIMIT`` frames) reports
progress on about a fifth of its tool calls, with the call's id as its progress token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from tests.dashboard.conftest import TOKEN, get_html, get_json
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(180)


async def test_big_session_waterfall_has_ticks(bench_db: tuple[Path, str, int]):
    db, big, _seq = bench_db
    progress = {}
    for r in rdb.rows(
        db,
        "SELECT seq, raw FROM frames WHERE session_id = ? AND method = ? AND seq <= 3000",
        big,
        "notifications/progress",
    ):
        token = json.loads(bytes(r["raw"]))["params"]["progressToken"]
        progress.setdefault(str(token), []).append(r["seq"])
    requests = {
        r["seq"]: r["msg_id"]
        for r in rdb.rows(
            db,
            "SELECT seq, msg_id FROM frames WHERE session_id = ? AND kind = 'request'"
            " AND seq <= 3000",
            big,
        )
    }
    app = create_app("sqlite:///" + str(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        wf = await get_json(client, f"/sessions/{big}/waterfall.json?limit=300")
        assert wf["bars"]
        ticked = 0
        for b in wf["bars"]:
            if b["seq"] > 3000:
                continue
            want = progress.get(str(requests[b["seq"]]), [])
            assert [t["seq"] for t in b["ticks"]] == want, b["seq"]
            ticked += bool(want)
        assert ticked >= 10
        assert wf["notifications_left_out"] is False
        page = await get_html(client, f"/sessions/{big}/waterfall?limit=300")
        assert 'id="notes-left-out"' not in page


async def test_big_session_waterfall_reads_a_bounded_number_of_notifications(
    bench_db: tuple[Path, str, int], monkeypatch: pytest.MonkeyPatch
):
    import dashboard.views.waterfall as waterfall

    db, big, _seq = bench_db
    monkeypatch.setattr(waterfall, "WATERFALL_NOTES", 3)
    app = create_app("sqlite:///" + str(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        wf = await get_json(client, f"/sessions/{big}/waterfall.json?limit=300")
        assert len(wf["bars"]) == 300 and wf["notifications_left_out"] is True
        # three notifications read (the host's notifications/initialized among them)
        assert 1 <= sum(len(b["ticks"]) for b in wf["bars"]) <= 3
        page = await get_html(client, f"/sessions/{big}/waterfall?limit=300")
        assert 'id="notes-left-out"' in page
