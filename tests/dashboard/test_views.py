"""The pages' ``.json`` twins and HTML, through aiohttp's test client on real recordings."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from aiohttp.test_utils import TestClient

from tests.dashboard.conftest import AUTH, TOKEN, Recordings, get_html, get_json

pytestmark = pytest.mark.timeout(60)


async def test_sessions_twin_lists_counts_and_status(client: TestClient, recordings: Recordings):
    data = await get_json(client, "/sessions.json")
    by_name = {s["name"]: s for s in data["sessions"]}
    assert set(by_name) == {"demo-legacy", "demo-modern", "hostile"}
    legacy = by_name["demo-legacy"]
    frames = recordings.rows(
        "SELECT kind FROM frames WHERE session_id = ?", recordings.ids["demo-legacy"]
    )
    assert legacy["frame_count"] == len(frames)
    assert legacy["exchanges"] == sum(1 for f in frames if f["kind"] == "request")
    assert legacy["status"] == "ended"
    assert legacy["era"] == "initialize"
    assert by_name["demo-modern"]["era"] == "2026-07-28"
    assert legacy["duration"] > 0
    # Newest first, and the HTML shows the same sessions in the same order.
    started = [s["started_at"] for s in data["sessions"]]
    assert started == sorted(started, reverse=True)
    html = await get_html(client, "/sessions")
    links = re.findall(r'href="/sessions/([0-9a-f]{32})"', html)
    assert links == [s["id"] for s in data["sessions"]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("transport=stdio", {"demo-legacy", "demo-modern", "hostile"}),
        ("era=2026-07-28", {"demo-modern"}),
        ("q=demo", {"demo-legacy", "demo-modern"}),
        ("method=prompts/get", {"demo-legacy", "demo-modern"}),
        ("text=stray+print", {"demo-legacy", "demo-modern"}),
        ("text=gnp.exe", {"hostile"}),
        ("status=crashed", set()),
        ("since=1h", {"demo-legacy", "demo-modern", "hostile"}),
        ("until=2000-01-01", set()),
    ],
)
async def test_sessions_filters(client: TestClient, query: str, expected: set[str]):
    data = await get_json(client, "/sessions.json?" + query)
    assert {s["name"] for s in data["sessions"]} == expected


async def test_sessions_keyset_pages_and_sorts(client: TestClient):
    everything = [s["id"] for s in (await get_json(client, "/sessions.json"))["sessions"]]
    seen: list[str] = []
    url = "/sessions.json?limit=1"
    while url:
        page = await get_json(client, url)
        assert len(page["sessions"]) == 1
        seen += [s["id"] for s in page["sessions"]]
        url = page["next_url"] and page["next_url"].replace("/sessions?", "/sessions.json?")
    assert seen == everything
    oldest = [s["id"] for s in (await get_json(client, "/sessions.json?sort=oldest"))["sessions"]]
    assert oldest == everything[::-1]
    by_frames = (await get_json(client, "/sessions.json?sort=frames"))["sessions"]
    counts = [s["frame_count"] for s in by_frames]
    assert counts == sorted(counts, reverse=True)


async def test_bad_requests_are_400_and_unknown_sessions_404(client: TestClient):
    assert (await get_json(client, "/sessions.json?sort=sideways", 400))["error"]["status"] == 400
    await get_json(client, "/sessions.json?cursor=garbage", 400)
    await get_json(client, "/sessions.json?since=yesterday-ish", 400)
    await get_json(client, "/sessions/" + "f" * 32 + ".json", 404)
    html = await get_html(client, "/sessions/" + "e" * 32, 404)
    assert "no session matches" in html


async def test_session_timeline_twin(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-legacy"]
    data = await get_json(client, f"/sessions/{sid}.json?every=1")
    rows = data["timeline"]
    db_frames = recordings.rows("SELECT * FROM frames WHERE session_id = ? ORDER BY seq", sid)
    assert [r["seq"] for r in rows] == [f["seq"] for f in db_frames]
    assert data["next"] is None
    # Requests carry the analysis's exchange; answers point back at their request.
    init = rows[0]
    assert init["method"] == "initialize" and init["kind"] == "request"
    assert init["exchange"]["outcome"] == "ok" and init["exchange"]["latency_ms"] >= 0
    answer = next(r for r in rows if r["seq"] == init["exchange"]["response_seq"])
    assert answer["belongs_to"]["request_seq"] == init["seq"]
    # Outcomes from the taxonomy: a JSON-RPC error, a tool error.
    errs = [r for r in rows if r["exchange"] and r["exchange"]["outcome"] == "error"]
    assert len(errs) == 1 and errs[0]["exchange"]["error_code"] == -32602
    assert errs[0]["exchange"]["error_class"] == "jsonrpc.invalid_params"
    assert errs[0]["exchange"]["outcome_label"].startswith("Invalid params")
    tool_errors = [r for r in rows if r["exchange"] and r["exchange"]["outcome"] == "tool_error"]
    assert [r["exchange"]["name"] for r in tool_errors] == ["fail"]
    # stderr and noise are in place, interleaved with the JSON-RPC traffic.
    stderr = [r for r in rows if r["channel"] == "stderr"]
    assert [r["preview"] for r in stderr] == ["warning: disk almost full"] * 2
    assert any(r["kind"] == "noise" and "stray print" in r["preview"] for r in rows)
    assert "tools/call" in data["methods"]
    assert {f["code"] for f in data["findings"]} >= {"transport.server_noise", "tool.error_result"}
    assert data["analysis"]["current"] is True


async def test_notifications_fold_into_their_request(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-legacy"]
    every = (await get_json(client, f"/sessions/{sid}.json?every=1"))["timeline"]
    folded = (await get_json(client, f"/sessions/{sid}.json"))["timeline"]
    slow = next(r for r in folded if r["exchange"] and r["exchange"]["name"] == "slow")
    methods = [g["method"] for g in slow["grouped"]]
    assert methods.count("notifications/progress") == 3
    assert methods.count("notifications/message") == 3
    grouped_seqs = {g["seq"] for r in folded for g in r["grouped"]}
    assert [r["seq"] for r in folded] == [r["seq"] for r in every if r["seq"] not in grouped_seqs]
    html = await get_html(client, f"/sessions/{sid}")
    assert "+6 notifications" in html


async def test_session_timeline_filters_and_pages(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-legacy"]
    c2s = (await get_json(client, f"/sessions/{sid}.json?direction=c2s"))["timeline"]
    assert c2s and all(r["direction"] == "c2s" for r in c2s)
    calls = (await get_json(client, f"/sessions/{sid}.json?method=tools/call"))["timeline"]
    assert calls and all(r["method"] == "tools/call" for r in calls)
    stderr = (await get_json(client, f"/sessions/{sid}.json?kind=stderr"))["timeline"]
    assert len(stderr) == 2
    tool_errors = (await get_json(client, f"/sessions/{sid}.json?outcome=tool_error"))["timeline"]
    assert [r["exchange"]["name"] for r in tool_errors] == ["fail"]
    first = await get_json(client, f"/sessions/{sid}.json?limit=5&every=1")
    assert [r["seq"] for r in first["timeline"]] == [1, 2, 3, 4, 5] and first["next"] == 5
    second = await get_json(client, f"/sessions/{sid}.json?limit=5&after=5&every=1")
    assert [r["seq"] for r in second["timeline"]] == [6, 7, 8, 9, 10]
    html = await get_html(client, f"/sessions/{sid}?limit=5")
    assert f"/sessions/{sid}?limit=5&amp;after=5" in html or "after=5" in html


async def test_exchange_twin_groups_progress_and_reads_outcomes(
    client: TestClient, recordings: Recordings
):
    sid = recordings.ids["demo-legacy"]
    calls = [
        r
        for r in (await get_json(client, f"/sessions/{sid}.json?method=tools/call"))["timeline"]
        if r["kind"] == "request"
    ]
    by_name = {}
    for call in calls:
        ex = await get_json(client, f"/sessions/{sid}/exchanges/{call['seq']}.json")
        assert ex["request"]["seq"] == call["seq"] == ex["exchange"]["request_seq"]
        by_name[ex["exchange"]["name"]] = ex
    slow = by_name["slow"]
    assert slow["exchange"]["outcome"] == "ok" and slow["exchange"]["latency_ms"] > 0
    whys = [r["why"] for r in slow["related"]]
    assert whys.count("progress") == 3 and whys.count("log") == 3
    assert by_name["fail"]["exchange"]["outcome"] == "tool_error"
    assert "tool.error_result" in {f["code"] for f in by_name["fail"]["findings"]}
    bad = by_name["protocol_error"]
    assert bad["exchange"]["outcome_label"].startswith("Invalid params")
    assert bad["response"]["error_code"] == -32602
    html = await get_html(client, f"/sessions/{sid}/exchanges/{calls[0]['seq']}")
    assert "<details open>" in html  # the collapsible JSON tree
    # A frame that is not a request has no exchange page.
    await get_json(client, f"/sessions/{sid}/exchanges/{slow['response']['seq']}.json", 404)


async def test_frame_twin_and_raw_bytes(client: TestClient, recordings: Recordings):
    sid = recordings.ids["demo-modern"]
    seq = recordings.frame_seq("demo-modern", method="tools/list", kind="request")
    raw = recordings.rows("SELECT raw FROM frames WHERE session_id=? AND seq=?", sid, seq)[0]["raw"]
    data = await get_json(client, f"/sessions/{sid}/frames/{seq}.json")
    assert data["frame"]["text"].encode() == raw
    assert data["frame"]["kind"] == "request" and data["exchange"]["request_seq"] == seq
    assert data["exchange"]["outcome"] == "ok" and data["exchange"]["response_seq"] > seq
    assert data["prev"] == seq - 1 and data["next"] == seq + 1
    r = await client.get(f"/sessions/{sid}/frames/{seq}/raw", headers=AUTH)
    assert r.status == 200 and await r.read() == raw
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers["Content-Disposition"].startswith("attachment")
    await get_json(client, f"/sessions/{sid}/frames/99999.json", 404)


async def test_stats_twins(client: TestClient, recordings: Recordings):
    overall = await get_json(client, "/stats.json")
    assert overall["sessions_analysed"] == 3
    by_method = {(r["direction"], r["method"]): r for r in overall["methods"]}
    calls = by_method[("c2s", "tools/call")]
    assert calls["count"] >= 2 * 8 and calls["tool_errors"] == 2 and calls["errors"] == 2
    assert by_method[("c2s", "initialize")]["count"] == 2  # the two initialize-era sessions
    for r in overall["methods"]:
        lat = r["latency_ms"]
        if lat["n"]:
            assert lat["min"] <= lat["p50"] <= lat["p95"] <= lat["max"]
    areas = {a["area"]: a for a in overall["errors"]}
    codes = {c["code"]: c["count"] for a in overall["errors"] for c in a["codes"]}
    assert codes["tool.error_result"] == 2 and codes["transport.server_noise"] >= 3
    assert sum(a["count"] for a in areas.values()) == sum(codes.values())
    sid = recordings.ids["hostile"]
    one = await get_json(client, f"/sessions/{sid}/stats.json")
    assert one["scope"] == "session"
    assert {r["method"] for r in one["methods"]} >= {"tools/call", "initialize"}
    html = await get_html(client, "/stats")
    assert "<svg" in html and 'class="box"' in html


async def test_annotations_add_edit_delete_and_filter(client: TestClient, recordings: Recordings):
    # demo-legacy: the browser tests annotate demo-modern, the security tests only tag sessions.
    sid = recordings.ids["demo-legacy"]
    headers = {**AUTH, "X-Mcptape-Token": TOKEN}
    r = await client.post(
        f"/sessions/{sid}/annotations.json", json={"tag": "views-tag"}, headers=headers
    )
    assert r.status == 201, await r.text()
    tag = (await r.json())["annotation"]
    seq = recordings.frame_seq("demo-legacy", method="tools/call", kind="request")
    r = await client.post(
        f"/sessions/{sid}/annotations.json",
        json={"note": "this call is the bug", "frame_seq": seq},
        headers=headers,
    )
    note = (await r.json())["annotation"]
    assert note["frame_seq"] == seq

    listed = await get_json(client, "/sessions.json?tag=views-tag")
    assert [s["id"] for s in listed["sessions"]] == [sid]
    assert "views-tag" in listed["sessions"][0]["tags"]
    page = await get_json(client, f"/sessions/{sid}.json")
    assert "views-tag" in [a["tag"] for a in page["annotations"]]
    marked = await get_json(client, f"/sessions/{sid}.json?annotated=1")
    assert [r["seq"] for r in marked["timeline"]] == [seq]
    assert marked["timeline"][0]["annotations"][0]["note"] == "this call is the bug"

    r = await client.post(
        f"/annotations/{note['id']}.json", json={"note": "edited"}, headers=headers
    )
    assert (await r.json())["annotation"]["note"] == "edited"
    r = await client.post(f"/annotations/{tag['id']}/delete.json", headers=headers)
    assert r.status == 200
    assert (await get_json(client, "/sessions.json?tag=views-tag"))["sessions"] == []
    r = await client.delete(f"/annotations/{note['id']}.json", headers=headers)
    assert r.status == 200
    assert (await get_json(client, f"/sessions/{sid}.json?annotated=1"))["timeline"] == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"tag": "Has Spaces"}, 400),
        ({"tag": "x" * 65}, 400),
        ({"tag": "ok", "note": "both"}, 400),
        ({}, 400),
        ({"note": "on a frame that is not there", "frame_seq": 99999}, 404),
    ],
)
async def test_annotation_validation(client, recordings: Recordings, body, status):
    sid = recordings.ids["demo-legacy"]
    r = await client.post(
        f"/sessions/{sid}/annotations.json", json=body, headers={**AUTH, "X-Mcptape-Token": TOKEN}
    )
    assert r.status == status, await r.text()


async def test_live_stream_of_an_ended_session_says_so(client: TestClient, recordings: Recordings):
    sid = recordings.ids["hostile"]
    r = await client.get(f"/sessions/{sid}/live?after=0", headers=AUTH)
    assert r.status == 200 and r.content_type == "text/event-stream"
    text = await r.text()  # the stream ends once the session is known not to be live
    events = re.findall(r"^event: (\w+)$", text, re.M)
    assert events[0] == "frames" and events[-1] == "status"
    assert '"status": "ended"' in text


async def test_sessions_live_stream_reports_counts(client: TestClient, recordings: Recordings):
    ids = ",".join(recordings.ids.values())
    r = await client.get(f"/sessions/live?ids={ids}&newest=1", headers=AUTH)
    assert r.status == 200 and r.content_type == "text/event-stream"
    event = (await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10)).decode()
    r.close()
    assert event.startswith("event: sessions\n")
    data = json.loads(event.split("data: ", 1)[1])
    assert {u["id"] for u in data["updates"]} == set(recordings.ids.values())
    assert all(u["status"] == "ended" and u["frame_count"] > 0 for u in data["updates"])
    assert data["newer"] == 3  # every session started after epoch second 1


#: Nesting far beyond what Python's JSON parser can follow (its recursion limit is ~1,000).
DEEP_BODY = 100_000


@pytest.mark.parametrize(
    ("body", "blamed"),
    [
        ("[" * DEEP_BODY + "]" * DEEP_BODY, "nested too deeply"),
        ('{"note": ' + "[" * DEEP_BODY + "]" * DEEP_BODY + "}", "nested too deeply"),
        ('{"note": ' + "[" * 500 + "]" * 500 + "}", "'note' must be text"),
        ('{"tag": {"a": {"b": 1}}}', "'tag' must be text"),
    ],
    ids=["deep-body", "deep-note", "nested-note", "object-tag"],
)
async def test_a_deeply_nested_annotation_body_is_refused_for_itself(
    client: TestClient, recordings: Recordings, body: str, blamed: str
):
    """A 100k-deep annotation body is a 400 about the annotation's body, never a 422 blaming "a
    frame in this session" (issue 22, item 15); and nothing was added."""
    sid = recordings.ids["hostile"]
    headers = {**AUTH, "X-Mcptape-Token": TOKEN, "Content-Type": "application/json"}
    before = len((await get_json(client, f"/sessions/{sid}.json"))["annotations"])
    r = await client.post(f"/sessions/{sid}/annotations.json", data=body, headers=headers)
    err = (await r.json())["error"]
    assert r.status == 400, err
    assert "annotation" in err["message"] and blamed in err["message"], err
    assert "frame" not in err["message"] and "\n" not in err["message"]
    assert len((await get_json(client, f"/sessions/{sid}.json"))["annotations"]) == before


async def test_a_note_of_brackets_is_only_text(client: TestClient, recordings: Recordings):
    """A note is text: 1,000 opening brackets are kept as written, not parsed."""
    sid = recordings.ids["hostile"]
    headers = {**AUTH, "X-Mcptape-Token": TOKEN}
    note = "[" * 1000
    r = await client.post(f"/sessions/{sid}/annotations.json", json={"note": note}, headers=headers)
    assert r.status == 201, await r.text()
    added = (await r.json())["annotation"]
    assert added["note"] == note
    r = await client.delete(f"/annotations/{added['id']}.json", headers=headers)
    assert r.status == 200, await r.text()
