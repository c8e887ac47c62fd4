"""HTTP exchanges in the dashboard: headers in wire order, Mcp-* marked, sentinels decoded.

Runs on the generated database (the HTTP relay's own recordings are not needed to show what is
stored); its HTTP sessions carry an ``Mcp-Name`` sent as ``=?base64?…?=``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app

pytestmark = pytest.mark.timeout(60)


async def test_http_exchange_page_and_timeline_chips(bench_db: tuple[Path, str, int]):
    db = bench_db[0]
    conn = sqlite3.connect(db)
    sid, hid = conn.execute(
        "SELECT s.id, h.id FROM sessions s JOIN http_exchanges h ON h.session_id = s.id"
        " WHERE s.transport = 'http' AND h.status = 400 LIMIT 1"
    ).fetchone()
    conn.close()
    app = create_app("sqlite:///" + str(db), token="t")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        auth = {"Authorization": "Bearer t"}
        r = await client.get(f"/sessions/{sid}/http/{hid}.json", headers=auth)
        data = await r.json()
        http = data["http"]
        assert http["status"] == 400 and http["method"] == "POST"
        names = [h["name"] for h in http["request_headers"]]
        assert names[0] == "content-type"  # wire order kept
        by_name = {h["name"]: h for h in http["request_headers"]}
        assert by_name["mcp-name"]["mcp"] and by_name["mcp-name"]["decoded"] == "séarch"
        assert by_name["mcp-method"]["decoded"] is None  # plain values are not "decoded"
        assert not by_name["content-type"]["mcp"]
        assert all(f["seq"] for f in data["frames"])
        html = await (await client.get(f"/sessions/{sid}/http/{hid}", headers=auth)).text()
        assert '<tr class="mcp"><th>mcp-name</th>' in html and "séarch" in html
        timeline = await (await client.get(f"/sessions/{sid}.json", headers=auth)).json()
        chips = [r["http"] for r in timeline["timeline"] if r["http"] and r["seq"]]
        assert chips and {c["status"] for c in chips} <= {200, 400}
        page = await (await client.get(f"/sessions/{sid}", headers=auth)).text()
        assert 'class="badge http http-bad"' in page
        # The refused DELETE carried no frame: it is a row of its own, at its time (the end).
        last = timeline["timeline"][-1]
        assert last["kind"] == "http" and last["seq"] is None
        assert (last["http"]["method"], last["http"]["status"]) == ("DELETE", 405)
        assert f'id="h{last["http"]["id"]}"' in page
        narrowed = await (
            await client.get(f"/sessions/{sid}.json?kind=request", headers=auth)
        ).json()
        assert all(r["kind"] == "request" for r in narrowed["timeline"])
        await client.get(f"/sessions/{sid}/http/999999.json", headers=auth)
        r = await client.get(f"/sessions/{sid}/http/999999.json", headers=auth)
        assert r.status == 404


async def test_sessions_list_analyses_in_the_background(bench_db: tuple[Path, str, int]):
    """Unanalysed sessions on a list page get analysed behind it; the counts then appear."""
    db = bench_db[0]
    app = create_app("sqlite:///" + str(db), token="t")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        auth = {"Authorization": "Bearer t"}
        url = "/sessions.json?sort=oldest&limit=20"
        first = (await (await client.get(url, headers=auth)).json())["sessions"]
        pending = [s["id"] for s in first if not s["analysed"]]
        assert pending, "the generated sessions start unanalysed"
        for _ in range(100):
            again = (await (await client.get(url, headers=auth)).json())["sessions"]
            if all(s["analysed"] for s in again):
                break
            await asyncio.sleep(0.1)
        assert all(s["analysed"] for s in again)
        # Generated sessions answer some calls with -32602 "Unknown tool": counted now.
        assert any(sum(s["findings"].values()) for s in again)
        conn = sqlite3.connect(db)
        (n,) = conn.execute(
            "SELECT count(*) FROM findings WHERE code = 'analysis.summary' AND session_id IN"
            f" ({','.join('?' * len(pending))})",
            pending,
        ).fetchone()
        conn.close()
        assert n == len(pending)
