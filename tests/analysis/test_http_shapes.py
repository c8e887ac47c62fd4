"""Clean Streamable HTTP traffic, in the shapes the official SDK puts on the wire, stays clean.

Built by hand from the wire facts (docs in /shared/notes): statuses, headers, SSE responses,
the standalone GET stream, 202s, DELETE. Written through the real Recorder, analysed through
the service, as ``mcptape check`` would.
"""

from __future__ import annotations

import asyncio
import base64

from mcp_proxy.analysis import service
from mcp_proxy.store.queries import Store
from mcp_proxy.testing.factories import MODERN, Wire, envelope

SSE = [["content-type", "text/event-stream"], ["cache-control", "no-cache, no-transform"]]
JSON = [["content-type", "application/json"]]
ACCEPT = [["content-type", "application/json"], ["accept", "application/json, text/event-stream"]]


def _init_era() -> Wire:
    w = Wire(transport="http")
    s = [["mcp-session-id", "8f0c"], ["mcp-protocol-version", "2025-11-25"]]
    h = w.exchange(request_headers=ACCEPT, response_headers=[*SSE, ["mcp-session-id", "8f0c"]])
    w.request(
        "initialize",
        0,
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"roots": {"listChanged": True}},
            "clientInfo": {"name": "c", "version": "1"},
        },
        http=h,
    )
    w.result(
        0,
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "s", "version": "1"},
        },
        http=h,
        channel="sse",
        sse_event="message",
    )
    h = w.exchange(request_headers=ACCEPT + s, status=202, response_headers=[])
    w.notify("notifications/initialized", http=h)
    g = w.exchange(
        "GET",
        request_headers=[["accept", "text/event-stream"], *s],
        response_headers=SSE,
        outcome="host_aborted",
    )
    w.frame("s2c", b"", channel="sse", http=g)  # the priming event (id + empty data)
    h = w.exchange(request_headers=ACCEPT + s, response_headers=SSE)
    w.request(
        "tools/call", 1, {"name": "slow", "arguments": {}, "_meta": {"progressToken": 1}}, http=h
    )
    w.progress(1, 1, 2, http=h, channel="sse")
    w.log("step 1/2", http=h, channel="sse")
    w.progress(1, 2, 2, http=h, channel="sse")
    w.result(
        1, {"content": [{"type": "text", "text": "done"}], "isError": False}, http=h, channel="sse"
    )
    # The server asks the client for roots on the GET stream; the answer is POSTed (202).
    w.request("roots/list", 0, direction="s2c", http=g, channel="sse")
    h = w.exchange(request_headers=ACCEPT + s, status=202, response_headers=[])
    w.result(0, {"roots": []}, direction="c2s", http=h)
    h = w.exchange("DELETE", request_headers=s, response_headers=[])
    return w.end()


def _modern() -> Wire:
    w = Wire(transport="http")

    def post(
        method: str,
        id: int,
        params: dict,
        *,
        name: str | None = None,
        extra: list[list[str]] = (),
        status: int = 200,
        sse: bool = False,
        outcome: str = "complete",
    ) -> int:  # type: ignore[assignment]
        h = [*ACCEPT, ["mcp-protocol-version", MODERN], ["mcp-method", method]]
        if name is not None:
            h.append(["mcp-name", name])
        hid = w.exchange(
            request_headers=[*h, *extra],
            status=status,
            response_headers=SSE if sse else JSON,
            outcome=outcome,
        )
        w.request(method, id, {**params, "_meta": envelope(log_level="info")}, http=hid)
        return hid

    hid = post("server/discover", 1, {})
    w.result(
        1,
        {
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {"listChanged": True}, "logging": {}},
            "ttlMs": 0,
            "cacheScope": "private",
            "resultType": "complete",
        },
        http=hid,
    )
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"},
        },
    }
    hid = post("tools/list", 2, {})
    w.result(
        2,
        {"tools": [{"name": "lookup", "inputSchema": schema}], "resultType": "complete"},
        http=hid,
    )
    region = "=?base64?" + base64.b64encode("zürich".encode()).decode() + "?="
    hid = post(
        "tools/call",
        3,
        {"name": "lookup", "arguments": {"region": "zürich", "query": "q"}},
        name="lookup",
        extra=[["mcp-param-region", region]],
    )
    w.result(3, {"content": [], "isError": False, "resultType": "complete"}, http=hid)
    hid = post("tools/call", 4, {"name": "slow", "arguments": {}}, name="slow", sse=True)
    w.log("working", http=hid, channel="sse")
    w.result(
        4, {"content": [], "isError": False, "resultType": "complete"}, http=hid, channel="sse"
    )
    ask = {
        "resultType": "input_required",
        "inputRequests": {
            "ok": {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": "Sure?",
                    "requestedSchema": {"type": "object", "properties": {}},
                },
            }
        },
        "requestState": "s1",
    }
    hid = post("tools/call", 5, {"name": "confirm", "arguments": {}}, name="confirm")
    w.result(5, ask, http=hid)
    hid = post(
        "tools/call",
        6,
        {
            "name": "confirm",
            "arguments": {},
            "inputResponses": {"ok": {"action": "accept", "content": {}}},
            "requestState": "s1",
        },
        name="confirm",
    )
    w.result(6, {"content": [], "isError": False, "resultType": "complete"}, http=hid)
    # Cancelling in 2026-07-28 is closing the request's connection.
    post(
        "tools/call",
        7,
        {"name": "hang", "arguments": {}},
        name="hang",
        sse=True,
        outcome="host_aborted",
    )
    return w.end()


def _check(db_url: str, w: Wire, name: str) -> list[dict]:
    w.record(db_url, name=name)

    async def go() -> list[dict]:
        store = await Store.open(db_url)
        try:
            return service.current_findings(db_url, await store.resolve_session(name))
        finally:
            await store.close()

    return asyncio.run(go())


def test_initialize_era_streamable_http_is_clean(db_url: str) -> None:
    w = _init_era()
    a = w.analyze()
    assert [f.code for f in a.findings if f.severity != "info"] == []
    slow = next(e for e in a.exchanges if e.name == "slow")
    assert len(slow.progress_seqs) == 2 and len(slow.log_seqs) == 1
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    assert roots.outcome == "ok"
    rows = _check(db_url, w, "init-http")
    assert [r["code"] for r in rows if r["severity"] != "info"] == []


def test_modern_streamable_http_is_clean(db_url: str) -> None:
    w = _modern()
    a = w.analyze()
    assert [(f.code, f.title) for f in a.findings if f.severity != "info"] == []
    assert {f.code for f in a.findings} == {"exchange.cancelled"}
    assert [c.outcome for c in a.chains] == ["complete"]
    rows = _check(db_url, w, "modern-http")
    assert [r["code"] for r in rows] == ["exchange.cancelled"]
