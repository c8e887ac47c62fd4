"""The official SDK, both eras and every server mode, through the real proxy.

Each test runs the same scripted conversation directly and through ``mcptape record
--upstream``, asserts identical results, then reads the SQLite recording: one session per
conversation, every exchange with its status and headers, every JSON-RPC message a frame, every
SSE event its own frame in wire order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_proxy.testing.client import CallbackRecorder, make_client, run_scripted_session, tool_text
from tests.conftest import matrix
from tests.relay.conftest import Proxy, Upstream, local_url, start_upstream

pytestmark = pytest.mark.timeout(180)  # the first test starts three SDK servers


async def scripted(url: str, mode: str) -> dict[str, Any]:
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        return await run_scripted_session(client, rec)


def check_recording(px: Proxy, out: dict[str, Any], *, era: str, stateless: bool = False) -> None:
    sessions = px.sessions()
    assert len(sessions) == 1, sessions
    session = sessions[0]
    assert session["status"] == "ended"
    assert session["transport"] == "http"
    assert session["era"] == era
    rule = session["meta"]["grouping"]["rule"]
    exchanges = px.exchanges()
    frames = px.frames()
    assert all(f["session_id"] == session["id"] for f in frames)
    assert session["frame_count"] == len(frames)
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    by_id = {e["id"]: e for e in exchanges}
    for e in exchanges:
        assert e["status"] is not None, e
        assert e["started_at"] <= e["first_byte_at"] <= e["ended_at"]
        if e["method"] == "POST":
            assert e["outcome"] == "complete", e
        names = {h[0].lower() for h in e["request_headers"]}
        assert "host" in names and "accept" in names
        assert any(h[0].lower() == "content-type" for h in e["response_headers"] or [])
    if era == "initialize" and stateless:
        # No Mcp-Session-Id from a stateless server: grouped by the initialize's client.
        assert rule == "client-identity+idle"
        assert session["meta"]["grouping"]["client"]["name"] == "mcp"
    elif era == "initialize":
        assert rule == "mcp-session-id"
        sid = session["meta"]["grouping"]["mcp_session_id"]
        init = next(f for f in frames if f["method"] == "initialize")
        # The initialize exchange joined the session its response created.
        assert by_id[init["http_exchange_id"]]["session_id"] == session["id"]
        later = [e for e in exchanges if e["id"] != init["http_exchange_id"]]
        for e in later:
            assert [sid] == [h[1] for h in e["request_headers"] if h[0].lower() == "mcp-session-id"]
    else:
        assert rule == "client-identity+idle"
        calls = [
            e
            for e in exchanges
            if e["meta"].get("mcp_headers", {}).get("mcp-method") == "tools/call"
        ]
        assert calls and all("mcp-name" in e["meta"]["mcp_headers"] for e in calls)
    # Every request the client sent is a c2s frame; every one got exactly one response frame.
    requests = [f for f in frames if f["direction"] == "c2s" and f["kind"] == "request"]
    responses = [
        f for f in frames if f["direction"] == "s2c" and f["kind"] in ("response", "error")
    ]
    assert sorted(f["msg_id"] for f in requests) == sorted(f["msg_id"] for f in responses)
    assert all(f["http_exchange_id"] is not None for f in frames)
    # The slow call: its exchange holds request, notifications in order, then the response.
    slow = next(f for f in requests if f["method"] == "tools/call" and b'"slow"' in f["raw"])
    chain = [f for f in frames if f["http_exchange_id"] == slow["http_exchange_id"]]
    assert chain[0]["id"] == slow["id"]
    assert chain[-1]["kind"] == "response" and chain[-1]["msg_id"] == slow["msg_id"]
    progress = [f for f in chain if f["method"] == "notifications/progress"]
    assert len(progress) == len(out["progress"])
    values = [json.loads(f["raw"])["params"]["progress"] for f in progress]
    assert values == [p[0] for p in out["progress"]]
    if progress:
        assert all(f["channel"] == "sse" and f["sse_event"] == "message" for f in chain[1:])


MODES = [
    ("stateful", "legacy"),
    ("stateful", "auto"),
    ("stateless", "legacy"),
    ("stateless", "auto"),
    ("json", "legacy"),
    ("json", "auto"),
]


#: The default run: each server once, both eras; --full: every server in both eras.
SDK_KEPT = {("stateful", "legacy"), ("stateless", "auto"), ("json", "auto")}


@pytest.mark.parametrize(
    ("server", "mode"), matrix(MODES, SDK_KEPT), ids=[f"{s}-{m}" for s, m in MODES]
)
async def test_sdk_session_identical_and_recorded(
    server: str,
    mode: str,
    proxy: Any,
    up_stateful: Upstream,
    up_stateless: Upstream,
    up_json: Upstream,
) -> None:
    up = {"stateful": up_stateful, "stateless": up_stateless, "json": up_json}[server]
    direct = await scripted(up.url, mode)
    with proxy(up.url) as px:
        relayed = await scripted(local_url(px, up.url), mode)
        assert px.stop() == 0
    assert relayed == direct
    era = "2026-07-28" if mode == "auto" else "initialize"
    assert direct["protocol_version"] == ("2026-07-28" if mode == "auto" else "2025-11-25")
    check_recording(px, direct, era=era, stateless=server == "stateless")


async def test_legacy_sse_transport(proxy: Any, up_sse: Upstream) -> None:
    direct = await scripted(up_sse.url, "legacy")
    with proxy(up_sse.url) as px:
        relayed = await scripted(local_url(px, up_sse.url), "legacy")
        assert px.stop() == 0
    assert relayed == direct
    sessions = px.sessions()
    assert len(sessions) == 1
    s = sessions[0]
    assert s["transport"] == "sse" and s["status"] == "ended"
    assert s["meta"]["grouping"]["rule"] == "legacy-sse-session-id"
    assert s["meta"]["grouping"]["ended_by"] == "legacy SSE stream closed"
    exchanges = px.exchanges()
    get = exchanges[0]
    assert get["method"] == "GET" and get["status"] == 200
    assert get["meta"]["endpoint"]["rewritten"] is False  # relative: already points at us
    posts = exchanges[1:]
    assert posts and all(e["status"] == 202 and "session_id=" in e["url"] for e in posts)
    frames = px.frames()
    assert frames[0]["sse_event"] == "endpoint" and frames[0]["raw"].startswith(b"/messages/")
    # Replies ride the GET stream: each is an SSE frame of the GET exchange, in order.
    replies = [f for f in frames if f["direction"] == "s2c" and f["kind"] == "response"]
    assert replies and all(f["http_exchange_id"] == get["id"] for f in replies)
    ids = [int(f["msg_id"]) for f in replies]
    assert ids == sorted(ids)
    # The plain "Accepted" bodies are not frames.
    assert not [f for f in frames if f["kind"] == "noise" and f["sse_event"] != "endpoint"]
    assert posts[0]["meta"]["response_body"]["text"] == "Accepted"


async def test_auto_client_falls_back_when_discover_is_refused(proxy: Any) -> None:
    with start_upstream("--transport", "http", "--initialize-only") as up:
        direct = await scripted(up.url, "auto")
        with proxy(up.url) as px:
            relayed = await scripted(local_url(px, up.url), "auto")
            assert px.stop() == 0
    assert relayed == direct
    assert direct["protocol_version"] == "2025-11-25"  # fell back to the handshake
    exchanges = px.exchanges()
    probe = exchanges[0]
    assert probe["status"] == 400
    frames = px.frames()
    discover_reply = next(
        f for f in frames if f["http_exchange_id"] == probe["id"] and f["direction"] == "s2c"
    )
    assert discover_reply["kind"] == "error" and discover_reply["raw"].startswith(b'{"jsonrpc"')
    # The refused probe is grouped by client identity; the handshake opens its own session.
    rules = sorted(s["meta"]["grouping"]["rule"] for s in px.sessions())
    assert rules == ["client-identity+idle", "mcp-session-id"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_exactly_once_upstream(mode: str, proxy: Any, up_stateful: Upstream) -> None:
    tag = f"once-{mode}"
    with proxy(up_stateful.url) as px:
        async with make_client(local_url(px, up_stateful.url), mode=mode) as client:
            for i in range(10):
                r = await client.call_tool("count", {"tag": f"{tag}-seq-{i}"})
                assert tool_text(r) == f"{tag}-seq-{i}"
            results: list[str] = []

            async def one(i: int) -> None:
                r = await client.call_tool("count", {"tag": f"{tag}-par-{i}"})
                results.append(tool_text(r))

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
        assert px.stop() == 0
    assert len(results) == 20
    for i in range(10):
        assert up_stateful.count(f"COUNT {tag}-seq-{i}") == 1
    for i in range(20):
        assert up_stateful.count(f"COUNT {tag}-par-{i}") == 1
    calls = [f for f in px.frames() if f["method"] == "tools/call"]
    assert len(calls) == 30


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancellation_reaches_the_server(
    mode: str, proxy: Any, up_stateful: Upstream
) -> None:
    tag = f"cancel-{mode}"
    with proxy(up_stateful.url) as px:
        async with make_client(local_url(px, up_stateful.url), mode=mode) as client:
            with anyio.move_on_after(1.0):
                await client.call_tool("watch", {"tag": tag, "seconds": 30})
            # 2026-07-28: the SDK closes the POST; the proxy must close upstream at once.
            # Initialize era: notifications/cancelled is posted (and relayed).
            cancelled = await up_stateful.await_line(f"WATCH CANCELLED {tag}", within=5.0)
            assert cancelled, up_stateful.lines[-5:]
        assert px.stop() == 0
    assert up_stateful.count(f"WATCH START {tag}") == 1
    exchanges = px.exchanges()
    frames = px.frames()
    call = next(f for f in frames if f["method"] == "tools/call" and tag.encode() in f["raw"])
    ex = next(e for e in exchanges if e["id"] == call["http_exchange_id"])
    if mode == "auto":
        assert ex["outcome"] == "host_aborted"
    else:
        assert any(f["method"] == "notifications/cancelled" for f in frames)


async def test_concurrent_sessions_are_kept_apart(proxy: Any, up_stateful: Upstream) -> None:
    """Five initialize-era clients and three named 2026-07-28 clients at once → 8 sessions."""
    with proxy(up_stateful.url) as px:
        url = local_url(px, up_stateful.url)

        async def legacy(i: int) -> None:
            async with make_client(url, mode="legacy") as c:
                for k in range(3):
                    await c.call_tool("echo", {"text": f"l{i}-{k}"})

        async def modern(i: int) -> None:
            from mcp_types import Implementation

            info = Implementation(name=f"client-{i}", version="1.0")
            async with make_client(url, mode="auto", client_info=info) as c:
                for k in range(3):
                    await c.call_tool("echo", {"text": f"m{i}-{k}"})

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(legacy, i)
            for i in range(3):
                tg.start_soon(modern, i)
        assert px.stop() == 0
    sessions = px.sessions()
    assert len(sessions) == 8
    names = sorted(s["meta"]["grouping"].get("client", {}).get("name", "") for s in sessions)
    assert names == ["", "", "", "", "", "client-0", "client-1", "client-2"]
    for s in sessions:
        frames = px.frames(s["id"])
        texts = [
            json.loads(f["raw"])["params"]["arguments"]["text"]
            for f in frames
            if f["method"] == "tools/call"
        ]
        assert len(texts) == 3 and len({t.split("-")[0] for t in texts}) == 1


def test_record_http_rejects_bad_upstream(tmp_path: Path) -> None:
    import subprocess

    from tests.relay.conftest import MCPTAPE

    r = subprocess.run(
        [
            str(MCPTAPE),
            "record",
            "--upstream",
            "ftp://x/y",
            "--port",
            "0",
            "--db",
            str(tmp_path / "x.db"),
        ],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert b"--upstream must be an http:// or https:// URL" in r.stderr


async def test_mrtr_round_trip_recorded(proxy: Any) -> None:
    """2026-07-28 multi-round-trip: input_required, the client's answers, the retry — relayed."""
    with start_upstream("--transport", "http", "--preset", "basic,mrtr") as up:

        async def run(url: str) -> str:
            rec = CallbackRecorder()
            async with make_client(url, mode="auto", recorder=rec) as client:
                return tool_text(await client.call_tool("confirm", {"action": "deploy"}))

        direct = await run(up.url)
        with proxy(up.url) as px:
            relayed = await run(local_url(px, up.url))
            assert px.stop() == 0
    assert relayed == direct == "deploy: accept: Ada"
    frames = px.frames()
    calls = [f for f in frames if f["method"] == "tools/call"]
    assert len(calls) == 2 and calls[0]["msg_id"] != calls[1]["msg_id"]  # the retry: a new id
    first = next(f for f in frames if f["direction"] == "s2c" and f["msg_id"] == calls[0]["msg_id"])
    assert json.loads(first["raw"])["result"]["resultType"] == "input_required"
    retry = json.loads(calls[1]["raw"])["params"]
    assert "requestState" in retry and "inputResponses" in retry
    assert len(px.sessions()) == 1


async def test_subscriptions_listen_stream(proxy: Any, up_stateful: Upstream) -> None:
    """A long-lived 2026-07-28 listen POST: acknowledged through the relay, closed by the host."""
    with proxy(up_stateful.url) as px:
        async with make_client(local_url(px, up_stateful.url), mode="auto") as client:
            async with client.listen(tools_list_changed=True) as sub:
                assert sub.honored is not None
            await client.call_tool("echo", {"text": "after listen"})  # the relay serves on
        assert px.stop() == 0
    frames = px.frames()
    listen = next(f for f in frames if f["method"] == "subscriptions/listen")
    ack = next(f for f in frames if f["method"] == "notifications/subscriptions/acknowledged")
    assert ack["http_exchange_id"] == listen["http_exchange_id"] and ack["channel"] == "sse"
    meta = json.loads(ack["raw"])["params"]["_meta"]
    assert meta["io.modelcontextprotocol/subscriptionId"] == json.loads(listen["raw"])["id"]
    ex = next(e for e in px.exchanges() if e["id"] == listen["http_exchange_id"])
    assert ex["outcome"] == "host_aborted"  # closing the stream is how a listen ends


async def test_mcp_param_headers_kept_and_decoded(proxy: Any, up_stateful: Upstream) -> None:
    """Mcp-Param-* mirrored from an x-mcp-header argument: stored as sent, decoded for display."""
    with proxy(up_stateful.url) as px:
        async with make_client(local_url(px, up_stateful.url), mode="auto") as client:
            r1 = await client.call_tool("lookup", {"region": "eu-west", "query": "q1"})
            r2 = await client.call_tool("lookup", {"region": "Zürich ✓", "query": "q2"})
        assert (tool_text(r1), tool_text(r2)) == ("q1@eu-west", "q2@Zürich ✓")
        assert px.stop() == 0
    calls = [
        e for e in px.exchanges() if e["meta"].get("mcp_headers", {}).get("mcp-name") == "lookup"
    ]
    # The client did not know the tool's x-mcp-header yet: the server refused the first call
    # (400, header mismatch), the client fetched the tools and retried with the header.
    assert [c["status"] for c in calls] == [400, 200, 200]
    assert "Mcp-Param-Region" not in calls[0]["meta"]["mcp_headers"]
    plain, encoded = (c["meta"]["mcp_headers"]["Mcp-Param-Region"] for c in calls[1:])
    assert plain == "eu-west"
    assert encoded["raw"].startswith("=?base64?") and encoded["decoded"] == "Zürich ✓"
    sent = [h[1] for h in calls[2]["request_headers"] if h[0].lower() == "mcp-param-region"]
    assert sent == [encoded["raw"]]  # the original is what is stored with the exchange
    refused = next(
        f
        for f in px.frames()
        if f["http_exchange_id"] == calls[0]["id"] and f["direction"] == "s2c"
    )
    assert refused["kind"] == "error" and refused["error_code"] == -32020
