"""The dashboard as a traffic inspector (issue #28): the small defects first.

Each test goes through the real dashboard (aiohttp test client) on the recorded sessions.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from tests.dashboard.conftest import (
    FIRST_DIALECT_ONLY,
    TOKEN,
    Recordings,
    get_html,
    get_json,
)
from tests.helpers.shared import copy_sqlite

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def own_client(
    recordings: Recordings, tmp_path: Path
) -> AsyncIterator[tuple[TestClient, Path]]:
    """A client on a private copy of the SQLite recordings (a test may change its rows)."""
    db = copy_sqlite(Path(recordings.db), tmp_path / "own.db")
    app = create_app(f"sqlite:///{db}", token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c, db


@FIRST_DIALECT_ONLY
async def test_a_server_killed_by_a_signal_is_not_exit_none(
    own_client: tuple[TestClient, Path], recordings: Recordings
):
    client, db = own_client
    sid = recordings.ids["demo-legacy"]
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE sessions SET exit_code = NULL, exit_signal = 9 WHERE id = ?", (sid,))
        conn.commit()
    page = await get_html(client, f"/sessions/{sid}")
    assert "None" not in re.sub(r"<code[^>]*>.*?</code>", "", page)
    assert '<span class="exit">killed by SIGKILL (9)</span>' in page
    data = await get_json(client, f"/sessions/{sid}.json")
    assert data["session"]["exit"] == "killed by SIGKILL (9)"
    assert data["session"]["exit_code"] is None and data["session"]["exit_signal"] == 9
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE sessions SET exit_code = 3, exit_signal = NULL WHERE id = ?", (sid,))
        conn.commit()
    page = await get_html(client, f"/sessions/{sid}")
    assert (
        '<span class="exit">exit 3</span>' in page and "signal" not in page.split("exit 3")[1][:20]
    )


async def test_the_era_column_names_both_eras_alike(client: TestClient, recordings: Recordings):
    page = await get_html(client, "/sessions")
    eras = re.findall(r'<span class="muted era" title="([^"]*)">([^<]*)</span>', page)
    assert eras, page[:3000]
    assert {label for _title, label in eras} <= {"initialize handshake", "stateless"}
    # Neither a date nor a bare protocol word in the column; the exact era is in the title.
    assert all(re.search(r"era", title) for title, _label in eras)
    options = re.findall(r'<option value="(initialize|2026-07-28)"[^>]*>([^<]*)</option>', page)
    assert dict(options) == {"initialize": "initialize handshake", "2026-07-28": "stateless"}
    # The twin keeps the stored value the filter takes.
    data = await get_json(client, "/sessions.json")
    assert {s["era"] for s in data["sessions"]} <= {"initialize", "2026-07-28", None}
    sid = recordings.ids["demo-legacy"]
    one = await get_html(client, f"/sessions/{sid}")
    assert "(initialize handshake)" in one and "(initialize era)" not in one


async def test_the_docs_name_the_http_exchange_url_the_links_use(client: TestClient):
    """docs/dashboard.md named ``/sessions/{id}/http/{n}`` (a position); the links and the route
    take the HTTP exchange's database-wide id."""
    doc = (ROOT / "docs" / "dashboard.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| HTTP exchange |"))
    url = re.search(r"`(/sessions/[^`]+)`", row)
    assert url is not None
    param = url.group(1).rsplit("/", 1)[1].strip("{}")
    routes = [r.canonical for r in client.app.router.resources() if "/http/" in r.canonical]
    assert routes and all(f"{{{param}}}" in r for r in routes), (url.group(1), routes)
    assert "database-wide id" in row


# ---------------------------------------------------------------------------------- waterfall


async def test_waterfall_twin_agrees_with_the_timeline(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-legacy"]
    wf = await get_json(client, f"/sessions/{sid}/waterfall.json")
    tl = await get_json(client, f"/sessions/{sid}.json?kind=request")
    by_seq = {r["seq"]: r["exchange"] for r in tl["timeline"] if r.get("exchange")}
    bars = wf["bars"]
    assert [b["seq"] for b in bars] == sorted(by_seq)
    for b in bars:
        # One analysis behind both pages: the same latency and outcome for each request.
        assert b["latency_ms"] == by_seq[b["seq"]]["latency_ms"]
        assert b["outcome"] == by_seq[b["seq"]]["outcome"]
        assert 0 <= b["x"] <= 1000 and b["x"] + b["w"] <= 1000.01
        assert 0 <= b["wait_w"] <= b["w"]
        if b["end"] is not None:
            assert b["sent"] <= b["first"] <= b["end"]
    # The scripted session reports progress: its notifications are ticks on their request's bar.
    ticked = [b for b in bars if b["ticks"]]
    assert ticked, [b["method"] for b in bars]
    for b in ticked:
        assert all(b["sent"] <= t["ts"] for t in b["ticks"])
        assert b["first"] <= min(t["ts"] for t in b["ticks"])
    # The axis is the session's span: from its start to its end.
    assert wf["axis"]["start"] == wf["session"]["started_at"] <= min(b["sent"] for b in bars)
    assert wf["axis"]["end"] >= max(b["end"] or b["sent"] for b in bars)
    page = await get_html(client, f"/sessions/{sid}/waterfall")
    assert page.count('<tr id="w') == len(bars)
    assert "style=" not in page  # geometry as SVG attributes: the CSP allows no inline style
    assert "answered after" in page and f'href="/sessions/{sid}/exchanges/{bars[0]["seq"]}"' in page
    session = await get_html(client, f"/sessions/{sid}")
    assert f'href="/sessions/{sid}/waterfall"' in session


async def test_waterfall_pages_like_the_timeline(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-modern"]
    one_page = await get_json(client, f"/sessions/{sid}/waterfall.json")
    whole = one_page["bars"]
    assert len(whole) > 3
    first = await get_json(client, f"/sessions/{sid}/waterfall.json?limit=2")
    assert [b["seq"] for b in first["bars"]] == [b["seq"] for b in whole[:2]]
    assert first["next"] == whole[1]["seq"] and "after=" in first["next_url"]
    second = await get_json(client, first["next_url"].replace("/waterfall", "/waterfall.json"))
    assert [b["seq"] for b in second["bars"]] == [b["seq"] for b in whole[2:4]]
    # Every page's axis is the session's (issue #28, "scaled to the session"): a bar of page 2
    # sits where it sits when the session fits on one page (it was drawn from 0 before).
    assert first["axis"] == second["axis"] == one_page["axis"]
    at = {b["seq"]: (b["x"], b["w"], b["wait_w"]) for b in whole}
    for b in [*first["bars"], *second["bars"]]:
        assert (b["x"], b["w"], b["wait_w"]) == at[b["seq"]]
    assert second["bars"][0]["x"] > 0
    empty = await get_json(client, f"/sessions/{sid}/waterfall.json?after=999999")
    assert empty["bars"] == [] and empty["next"] is None
    await get_json(client, f"/sessions/{sid}/waterfall.json?after=x", status=400)


# ---------------------------------------------------------------------------------- copy


async def test_an_http_exchange_copies_as_curl(bench_db: tuple[Path, str, int]):
    db = bench_db[0]
    with closing(sqlite3.connect(db)) as conn:
        sid, seq, url_, body = conn.execute(
            "SELECT s.id, f.seq, h.url, f.raw FROM sessions s"
            " JOIN http_exchanges h ON h.session_id = s.id"
            " JOIN frames f ON f.http_exchange_id = h.id AND f.kind = 'request'"
            " WHERE s.transport = 'http' AND h.method = 'POST' LIMIT 1"
        ).fetchone()
    app = create_app("sqlite:///" + str(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        page = await get_html(client, f"/sessions/{sid}/exchanges/{seq}")
    m = re.search(r'<template id="copy-curl">(.*?)</template>', page, re.S)
    assert m, page[:3000]
    text = html.unescape(m.group(1))
    argv = shlex.split(text.replace("\\\n", " "))
    assert argv[:4] == ["curl", "-X", "POST", url_]
    headers = [argv[i + 1] for i, a in enumerate(argv) if a == "-H"]
    assert "mcp-name: séarch" in headers  # the sentinel-encoded value, decoded
    assert not any(h.lower().startswith(("host:", "content-length:")) for h in headers)
    assert argv[argv.index("--data-binary") + 1].encode() == bytes(body)
    # A JSON Lines snippet too, and no script could run from any of it.
    assert '<template id="copy-jsonl">' in page and "<script>" not in page.split("</head>")[1]


# ---------------------------------------------------------------------------------- host


async def test_host_timeline_twin(client: TestClient, recordings: Recordings):
    data = await get_json(client, "/timeline.json")  # default window: the newest hour
    assert {lane["name"] for lane in data["lanes"]} == {"demo-legacy", "demo-modern", "hostile"}
    host = data["clients"][0]
    mine = await get_json(client, f"/timeline.json?client={host}&since=0")
    assert all(s["client_name"] == host for lane in mine["lanes"] for s in lane["sessions"])
    none = await get_json(client, "/timeline.json?client=no-such-host&since=0")
    assert none["lanes"] == []
    legacy = next(lane for lane in data["lanes"] if lane["name"] == "demo-legacy")
    requests = legacy["sessions"][0]["requests"]
    assert requests and all(0 <= r["x"] <= 1000 for r in requests)
    assert legacy["requests"] == len(requests)
    # The answers are paired: most requests have a latency.
    assert sum(r["latency_ms"] is not None for r in requests) >= len(requests) - 1
    # A window that starts and ends inside a session (found by bisection on the frame numbers):
    # exactly the requests sent within it.
    sid = recordings.ids["demo-legacy"]
    sent = recordings.rows(
        "SELECT seq, ts FROM frames WHERE session_id = ? AND kind = 'request' ORDER BY seq", sid
    )
    lo, hi = sent[2]["ts"], sent[-3]["ts"]
    inside = await get_json(client, f"/timeline.json?since={lo}&until={hi}")
    lane = next(lane for lane in inside["lanes"] if lane["name"] == "demo-legacy")
    got = [r["seq"] for s in lane["sessions"] for r in s["requests"]]
    assert got == [r["seq"] for r in sent if lo <= r["ts"] <= hi]
    await get_json(client, "/timeline.json?since=nonsense", status=400)
    await get_json(client, "/timeline.json?since=2h&until=3h", status=400)
    page = await get_html(client, "/timeline")
    assert page.count('<tr class="row lane"') == 3 and "style=" not in page
    sid = recordings.ids["demo-legacy"]
    session = await get_html(client, f"/sessions/{sid}")
    assert 'id="host-link" href="/timeline?client=' in session


# ---------------------------------------------------------------------------------- context cost


async def test_context_cost_of_tools_list_and_frames(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-legacy"]
    data = await get_json(client, f"/sessions/{sid}.json")
    cc = data["context_cost"]
    assert cc is not None and cc["how"] == "estimate: 4 bytes of JSON a token"
    raw = recordings.rows(
        "SELECT raw FROM frames WHERE session_id = ? AND seq = ?", sid, cc["response_seq"]
    )[0]["raw"]
    tools = json.loads(bytes(raw))["result"]["tools"]
    assert cc["tool_count"] == len(tools) > 0
    assert cc["tokens"] == -(-len(bytes(raw)) // 4)
    assert sum(t["tokens"] for t in cc["tools"]) <= cc["tokens"]
    costs = [t["tokens"] for t in cc["tools"]]
    assert costs == sorted(costs, reverse=True)
    rows = [r for r in data["timeline"] if r["seq"] and r["channel"] != "stderr"]
    assert rows and all(r["tokens"] == -(-r["size"] // 4) for r in rows)
    page = await get_html(client, f"/sessions/{sid}")
    assert 'id="context-cost"' in page and "4 bytes of JSON a token" in page
    assert f"≈ {cc['tokens']:,} tokens" in page
    frame = await get_html(client, f"/sessions/{sid}/frames/{cc['response_seq']}")
    assert f"≈ {cc['tokens']} tokens" in frame


# ---------------------------------------------------------------------------------- one latency


async def test_one_exchange_has_one_latency_on_every_page(
    client: TestClient, recordings: Recordings
):
    """Issue #28, "the latency chart and the timeline agree": a request's latency is the same
    number on the waterfall, the host timeline and the stats page (a method called once: its
    p50 and max are that request's latency)."""
    sid = recordings.ids["demo-legacy"]
    bars = (await get_json(client, f"/sessions/{sid}/waterfall.json"))["bars"]
    stats = (await get_json(client, f"/sessions/{sid}/stats.json"))["methods"]
    once = {
        (m["direction"], m["method"]): m["latency_ms"]["max"]
        for m in stats
        if m["count"] == 1 and m["latency_ms"]["n"] == 1
    }
    host = await get_json(client, "/timeline.json?since=0")
    lane = next(lane for lane in host["lanes"] if lane["name"] == "demo-legacy")
    on_lane = {r["seq"]: r["latency_ms"] for s in lane["sessions"] for r in s["requests"]}
    checked = 0
    for b in bars:
        if b["latency_ms"] is None:
            continue
        assert on_lane[b["seq"]] == b["latency_ms"], b["method"]
        if (b["direction"], b["method"]) in once:
            assert once[(b["direction"], b["method"])] == b["latency_ms"], b["method"]
            checked += 1
    assert checked >= 2, once
