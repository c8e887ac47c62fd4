"""HAR in and out, pure: producers' shapes (mitmproxy, devtools, mcptape), grouping, linearity."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from mcp_proxy.diff import diff_sessions
from mcp_proxy.recording.har import dumps_har, to_har
from mcp_proxy.recording.har_read import loads_har
from mcp_proxy.recording.model import Recording, RecordingFormatError, SessionRecording
from mcp_proxy.recording.registry import detect, read_recording
from tests.recording.conftest import GOLDEN

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "mitm-client", "version": "9"},
    },
}
INIT_RESULT = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "srv", "version": "2"},
    },
}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo"}}
PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
CALL_RESULT = {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}


def _entry(started: str, req: dict[str, Any], resp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "startedDateTime": started,
        "time": 12.5,
        "request": req,
        "response": resp,
        "cache": {},
        "timings": {"send": 0.1, "wait": 10, "receive": 2.4, "ssl": -1, "connect": -1},
        **extra,
    }


def mitmproxy_har() -> dict[str, Any]:
    """The shape mitmproxy's ``hardump`` writes: HTTP/2 pseudo-headers, base64 bodies, no pages,
    the SSE stream only in ``content.text``, the session id on the initialize response."""
    sse = (
        f"event: message\r\ndata: {json.dumps(PROGRESS)}\r\n\r\n"
        f"id: 7\r\nevent: message\r\ndata: {json.dumps(CALL_RESULT)}\r\n\r\n"
    )
    h2 = [{"name": ":authority", "value": "srv.example:8443"}]
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "mitmproxy", "version": "12.1.1", "comment": ""},
            "pages": [],
            "entries": [
                _entry(
                    "2026-01-02T03:04:05.100000+00:00",
                    {
                        "method": "POST",
                        "url": "https://srv.example:8443/mcp",
                        "httpVersion": "HTTP/2.0",
                        "headers": [*h2, {"name": "content-type", "value": "application/json"}],
                        "postData": {"mimeType": "application/json", "text": json.dumps(INIT)},
                    },
                    {
                        "status": 200,
                        "headers": [
                            {"name": "content-type", "value": "application/json"},
                            {"name": "mcp-session-id", "value": "S1"},
                        ],
                        "content": {
                            "size": 10,
                            "mimeType": "application/json",
                            "text": base64.b64encode(json.dumps(INIT_RESULT).encode()).decode(),
                            "encoding": "base64",
                        },
                    },
                ),
                _entry(
                    "2026-01-02T03:04:05.300000+00:00",
                    {"method": "GET", "url": "https://srv.example:8443/favicon.ico", "headers": h2},
                    {"status": 404, "headers": [], "content": {"size": 0, "mimeType": "text/html"}},
                ),
                _entry(
                    "2026-01-02T03:04:05.400000+00:00",
                    {
                        "method": "POST",
                        "url": "https://srv.example:8443/mcp",
                        "headers": [*h2, {"name": "mcp-session-id", "value": "S1"}],
                        "postData": {"mimeType": "application/json", "text": json.dumps(CALL)},
                    },
                    {
                        "status": 200,
                        "headers": [{"name": "content-type", "value": "text/event-stream"}],
                        "content": {"mimeType": "text/event-stream", "text": sse},
                    },
                ),
            ],
        }
    }


def test_a_mitmproxy_shaped_har_becomes_one_session_with_its_frames() -> None:
    rec = loads_har(json.dumps(mitmproxy_har(), indent=1).encode(), "mitm.har")
    s = rec.one()
    assert (
        s.session["transport"] == "http" and s.session["upstream"] == "https://srv.example:8443/mcp"
    )
    assert s.session["client_name"] == "mitm-client" and s.session["server_name"] == "srv"
    assert s.session["protocol_version"] == "2025-11-25" and s.session["era"] == "initialize"
    assert s.session["meta"]["har"]["creator"] == "mitmproxy 12.1.1"
    assert len(s.exchanges) == 2  # the favicon is not MCP
    assert all(not k.startswith(":") for ex in s.exchanges for k, _ in ex["request_headers"])
    kinds = [(f["direction"], f["channel"], f["kind"], f["method"], f["msg_id"]) for f in s.frames]
    assert kinds == [
        ("c2s", "http", "request", "initialize", "1"),
        ("s2c", "http", "response", None, "1"),
        ("c2s", "http", "request", "tools/call", "2"),
        ("s2c", "sse", "notification", "notifications/progress", None),
        ("s2c", "sse", "response", None, "2"),
    ]
    assert [f["seq"] for f in s.frames] == [1, 2, 3, 4, 5]
    assert s.frames[1]["raw"] == json.dumps(INIT_RESULT).encode()  # base64 body decoded
    assert s.frames[4]["sse_id"] == "7" and s.frames[4]["sse_event"] == "message"


def test_har_written_by_mcptape_reads_back_into_the_same_conversation() -> None:
    original = read_recording(GOLDEN / "v2-http.jsonl")
    back = loads_har(dumps_har(original), "x.har")
    a, b = original.one(), back.one()
    assert b.id == a.id  # _mcptape.session keeps the id
    assert len(b.exchanges) == len(a.exchanges)
    assert [f["raw"] for f in b.frames if f["channel"] != "stderr"] == [
        f["raw"] for f in a.frames if f["channel"] != "stderr"
    ]
    assert diff_sessions(a, b).equal


def test_detection_and_clear_errors() -> None:
    assert detect("x.bin", b'{\n  "log": {\n    "version": "1.2"').name == "har"  # type: ignore[union-attr]
    assert detect("x.bin", b'{"format":"mcptape-recording","version":2}').name == "jsonl"  # type: ignore[union-attr]
    assert detect("capture.har", b"garbage") is not None
    for data, msg in [
        (b"not json", "not valid JSON"),
        (b'{"log": 1}', 'no "log" with "entries"'),
        (b'{"log": {"entries": []}}', "holds no MCP traffic"),
        (b"[" * 100_000, "nested too deeply"),
    ]:
        with pytest.raises(RecordingFormatError, match=msg):
            loads_har(data, "x.har")


def test_the_har_builder_is_linear_in_the_exchanges() -> None:
    """10,000 exchanges of 2 frames: grouping frames once keeps this well under a second on an
    idle machine; searching every frame per exchange (the old builder) took minutes."""
    n = 10_000
    exchanges = []
    frames = []
    for i in range(1, n + 1):
        exchanges.append(
            {"id": i, "method": "POST", "url": "http://h/mcp", "status": 200, "started_at": 1.0 + i}
        )
        for d in ("c2s", "s2c"):
            frames.append(
                {
                    "seq": len(frames) + 1,
                    "ts": 1.0 + i,
                    "direction": d,
                    "channel": "http",
                    "raw": b'{"jsonrpc":"2.0","id":%d}' % i,
                    "http_exchange_id": i,
                }
            )
    rec = Recording([SessionRecording({"id": "a" * 32, "transport": "http"}, exchanges, frames)])
    t0 = time.perf_counter()
    har = to_har(rec)
    elapsed = time.perf_counter() - t0
    assert len(har["log"]["entries"]) == n
    assert elapsed < 15, f"{elapsed:.1f} s for {n} exchanges"
