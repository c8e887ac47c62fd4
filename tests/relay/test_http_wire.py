"""What crosses the relay, byte for byte, and how failures and bad input are relayed and recorded.

Raw clients (``http.client``, plain sockets) talk to the real ``mcptape record`` subprocess; the
upstream is either the SDK test server (to compare with a direct request) or ``FakeUpstream``
for what the SDK never does (resets, absolute legacy endpoints, gzip, slow headers).
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.relay.conftest import FakeUpstream, Proxy, Upstream, start_upstream

pytestmark = pytest.mark.timeout(60)

H_JSON = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]


def http_raw(
    base: str,
    method: str,
    path: str,
    headers: list[tuple[str, str | bytes]] = (),  # type: ignore[assignment]
    body: bytes = b"",
    host: str | None = None,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request with exactly these headers (bytes values go out as they are)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", host or u.netloc)
    for k, v in headers:
        conn.putheader(k, v)
    if body or method in ("POST", "PUT", "PATCH"):
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body or None)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheaders(), data


def rpc(method: str, params: dict[str, Any] | None = None, id_: int | None = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        msg["id"] = id_
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode()


MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
H_MODERN = [*H_JSON, ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call")]


# --------------------------------------------------------------------------- transparency
def test_request_relayed_byte_exact(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        headers: list[tuple[str, str | bytes]] = [
            ("X-Order-1", "one"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "dropped"),
            ("Keep-Alive", "timeout=5"),
            ("TE", "trailers"),
            ("X-Dup", "a"),
            ("X-Dup", "b"),
            ("X-Utf8", "café ✓".encode()),
            ("Mcp-Name", "=?base64?" + base64.b64encode("naïve".encode()).decode() + "?="),
            ("X-Order-2", "two"),
        ]
        body = b'{"not":"json-rpc","bytes":"\\u00e9"}\n'
        path = "/echo/a%2Fb?x=%20y&z=1"
        status, resp_headers, data = http_raw(px.url, "POST", path, headers, body)
        assert status == 200
        seen = json.loads(data)
        assert seen["raw_path"] == path
        assert base64.b64decode(seen["body"]) == body
        got = [(k, base64.b64decode(v)) for k, v in seen["raw_headers"]]
        names = [k.lower() for k, _ in got]
        assert ("Host", fake_upstream.origin.split("//")[1].encode()) in got
        for hop in ("connection", "keep-alive", "te", "x-hop"):
            assert hop not in names
        sent = [(k, v if isinstance(v, bytes) else v.encode()) for k, v in headers]
        end_to_end = [
            (k, v) for k, v in sent if k.lower() not in ("connection", "keep-alive", "te", "x-hop")
        ]
        assert [(k, v) for k, v in got if k.lower() not in ("host", "content-length")] == end_to_end
        # Response headers: repeats and order kept.
        cookies = [v for k, v in resp_headers if k.lower() == "set-cookie"]
        assert cookies == ["a=1; Path=/", "b=2; HttpOnly"]
        assert ("X-Custom-Reply", "yes") in resp_headers
        for method in ("GET", "PUT", "PATCH", "DELETE", "OPTIONS"):
            status, _, data = http_raw(
                px.url, method, "/echo/m", [], b"x" if method in ("PUT", "PATCH") else b""
            )
            assert status == 200 and json.loads(data)["method"] == method
        status, _, data = http_raw(px.url, "HEAD", "/echo/h")
        assert status == 200 and data == b""
        assert px.stop() == 0
    ex = px.exchanges()
    first = ex[0]
    assert first["method"] == "POST" and first["status"] == 200
    assert first["url"] == fake_upstream.origin + path
    rec = first["request_headers"]
    assert ["X-Utf8", "café ✓"] in rec
    assert first["meta"]["mcp_headers"]["Mcp-Name"] == {
        "raw": headers[8][1],
        "decoded": "naïve",
    }
    assert first["meta"]["request_body"]["text"] == body.decode()  # not JSON-RPC: not a frame
    assert [h for h in first["response_headers"] if h[0] == "Set-Cookie"] == [
        ["Set-Cookie", "a=[REDACTED]; Path=/"],
        ["Set-Cookie", "b=[REDACTED]; HttpOnly"],
    ]
    assert [e["method"] for e in ex] == ["POST", "GET", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
    assert all(e["outcome"] == "complete" for e in ex)
    assert not px.frames()


def test_oauth_challenge_and_discovery_pass_through(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        status, headers, _ = http_raw(
            px.url, "POST", "/echo?status=401", H_JSON, rpc("initialize", {})
        )
        assert status == 401
        challenge = dict(headers)["WWW-Authenticate"]
        assert (
            'resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"' in challenge
        )
        status, _, data = http_raw(px.url, "GET", "/.well-known/oauth-protected-resource/mcp")
        assert (
            status == 200
            and json.loads(data)["raw_path"] == "/.well-known/oauth-protected-resource/mcp"
        )
        assert px.stop() == 0
    ex = px.exchanges()
    assert ex[0]["status"] == 401
    assert ["WWW-Authenticate", challenge] in ex[0]["response_headers"]
    assert ex[1]["url"].endswith("/.well-known/oauth-protected-resource/mcp")
    assert ex[1]["meta"]["response_body"]["size"] > 0


def test_gzip_body_relayed_compressed_recorded_decoded(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        status, headers, data = http_raw(px.url, "GET", "/gzip", [("Accept-Encoding", "gzip")])
        assert status == 200 and dict(headers)["Content-Encoding"] == "gzip"
        assert gzip.decompress(data) == b'{"jsonrpc":"2.0","id":1,"result":{"gz":true}}'
        assert px.stop() == 0
    (frame,) = px.frames()
    assert frame["raw"] == b'{"jsonrpc":"2.0","id":1,"result":{"gz":true}}'
    assert frame["complete"] == 1
    assert px.exchanges()[0]["meta"]["content_encoding"] == "gzip"
    # The near miss of recorder.body_cut (tests/relay/test_bombs.py): a whole body, no finding.
    assert not px.query("SELECT 1 FROM findings WHERE code = 'recorder.body_cut'")


def test_gzip_request_body_relayed_compressed_recorded_decoded(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """A compressed request body goes upstream as sent; its frame is the decoded message."""
    body = rpc("ping", id_=7)
    packed = gzip.compress(body)
    with proxy(fake_upstream.origin + "/rpc") as px:
        headers = [*H_JSON, ("Content-Encoding", "gzip")]
        status, _, _ = http_raw(px.url, "POST", "/rpc", headers, packed)
        # (aiohttp's server inflates what it got: the compressed bytes arrived whole and valid;
        # tests/relay/test_bombs.py compares the exact bytes with a raw origin.)
        seen = fake_upstream.seen[-1]
        assert status == 200 and seen["body"] == body
        assert ["Content-Encoding", "gzip"] in seen["raw_headers"]
        assert px.stop() == 0
    c2s = [f for f in px.frames() if f["direction"] == "c2s"]
    assert [(bytes(f["raw"]), f["complete"], f["kind"]) for f in c2s] == [(body, 1, "request")]


def read_sse_raw(base: str, path: str, method: str = "GET") -> tuple[bytes, list[float]]:
    """The raw response bytes and the arrival delay of each event after it was written (ms)."""
    u = urlsplit(base)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: {u.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    buf = b""
    delays: list[float] = []
    seen = 0
    while True:
        chunk = s.recv(65536)
        now = time.monotonic_ns()
        if not chunk:
            break
        buf += chunk
        while True:
            i = buf.find(b'"t": ', seen)
            if i < 0:
                break
            j = buf.index(b"}", i)
            delays.append((now - int(buf[i + 5 : j])) / 1e6)
            seen = j
        if buf.endswith(b"0\r\n\r\n"):
            break
    s.close()
    return buf, delays


def dechunk(raw: bytes) -> bytes:
    _head, _, body = raw.partition(b"\r\n\r\n")
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


def strip_times(data: bytes) -> bytes:
    import re

    return re.sub(rb'"t": \d+', b'"t": 0', data)


def test_sse_forwarded_event_by_event(proxy: Any, fake_upstream: FakeUpstream) -> None:
    direct, _ = read_sse_raw(fake_upstream.origin, "/sse-timed?n=5&gap=0.2")
    with proxy(fake_upstream.origin + "/mcp") as px:
        relayed, delays = read_sse_raw(px.url, "/sse-timed?n=5&gap=0.2")
        assert px.stop() == 0
    assert strip_times(dechunk(relayed)) == strip_times(dechunk(direct))
    # Each event reached the host long before the next one was even written (0.2 s later).
    assert len(delays) == 5 and max(delays) < 100, delays
    frames = px.frames()
    assert [f["sse_id"] for f in frames] == ["0", "1", "2", "3", "4", None]
    assert all(f["channel"] == "sse" and f["sse_event"] == "message" for f in frames)
    assert [f["kind"] for f in frames] == ["notification"] * 5 + ["response"]
    (ex,) = px.exchanges()
    assert ex["meta"]["sse_comments"] == 1
    assert ex["outcome"] == "complete"


def test_quiet_event_stream_head_reaches_the_host_alone(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """The head of an event stream waits a moment for the first event to go out with it, but
    never longer: a stream that stays quiet still shows its head at once."""
    with proxy(fake_upstream.origin + "/mcp") as px:
        u = urlsplit(px.url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(
            f"GET /sse-quiet?after=3 HTTP/1.1\r\nHost: {u.netloc}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        t0 = time.monotonic()
        s.settimeout(2.5)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        waited = time.monotonic() - t0
        assert got.startswith(b"HTTP/1.1 200 ") and b"data:" not in got, got
        assert waited < 2.0, waited  # the event comes at 3 s; the head did not wait for it
        s.settimeout(10)
        while not got.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        s.close()
        assert px.stop() == 0
    assert b'"result":{}' in dechunk(got)
    (ex,) = px.exchanges()
    assert ex["outcome"] == "complete" and ex["status"] == 200


def test_invalid_sse_relayed_and_recorded(proxy: Any, fake_upstream: FakeUpstream) -> None:
    direct, _ = read_sse_raw(fake_upstream.origin, "/sse-invalid")
    with proxy(fake_upstream.origin + "/mcp") as px:
        relayed, _ = read_sse_raw(px.url, "/sse-invalid")
        assert px.stop() == 0
    assert dechunk(relayed) == dechunk(direct)
    kinds = [(f["kind"], f["raw"]) for f in px.frames()]
    assert kinds[0] == ("empty", b"")  # "this is not sse": a field named so, no data
    assert kinds[1] == ("noise", b"{broken json")
    assert kinds[2] == ("noise", b"line1\nline2")


def test_legacy_endpoint_rewritten_to_the_relay(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/legacy/sse") as px:
        u = urlsplit(px.url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(
            f"GET /legacy/sse HTTP/1.1\r\nHost: {u.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        buf = b""
        while b"\r\n\r\n" not in buf.partition(b"\r\n\r\n")[2]:
            buf += s.recv(65536)
        expected = f"data: {px.origin}/legacy/messages?session_id=abc123\r\n".encode()
        assert expected in buf
        status, _, _ = http_raw(
            px.url, "POST", "/legacy/messages?session_id=abc123", H_JSON, rpc("ping")
        )
        assert status == 202
        s.close()
        time.sleep(0.3)
        assert px.stop() == 0
    assert "/legacy/sse" in fake_upstream.closed_early  # the host's close reached upstream
    (session,) = px.sessions()
    assert (
        session["transport"] == "sse" and session["meta"]["grouping"]["sse_session_id"] == "abc123"
    )
    get, post = px.exchanges()
    note = get["meta"]["endpoint"]
    assert note["rewritten"] is True
    assert note["upstream_sent"] == f"{fake_upstream.origin}/legacy/messages?session_id=abc123"
    assert note["host_got"] == f"{px.origin}/legacy/messages?session_id=abc123"
    frames = px.frames()
    # The frame is what the upstream sent.
    assert (
        frames[0]["raw"] == note["upstream_sent"].encode() and frames[0]["sse_event"] == "endpoint"
    )
    assert frames[1]["method"] == "ping" and frames[1]["http_exchange_id"] == post["id"]


# --------------------------------------------------------------------------- failures
def test_upstream_down_gets_502_and_is_recorded(proxy: Any) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with proxy(f"http://127.0.0.1:{port}/mcp") as px:
        for i in range(2):  # and the proxy keeps serving
            status, headers, data = http_raw(
                px.url,
                "POST",
                "/mcp",
                H_MODERN,
                rpc("tools/call", {"name": "echo", "_meta": MODERN}, i),
            )
            assert status == 502
            assert dict(headers)["X-Mcptape-Error"] == "upstream-unreachable"
            err = json.loads(data)
            assert err["jsonrpc"] == "2.0" and err["id"] is None
            assert "cannot connect to the upstream" in err["error"]["message"]
        assert px.stop() == 0
    ex = px.exchanges()
    assert [e["status"] for e in ex] == [502, 502]
    assert all(e["outcome"] == "upstream_error" and "cannot connect" in e["error"] for e in ex)
    frames = px.frames()
    # The host's requests are recorded; no response frame is invented for the server.
    assert [f["kind"] for f in frames] == ["request", "request"]


def test_response_timeout_gets_504_and_cancels_upstream(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    with proxy(fake_upstream.origin + "/mcp", "--response-timeout", "0.5") as px:
        t0 = time.monotonic()
        status, headers, _data = http_raw(px.url, "GET", "/slow-headers")
        assert status == 504 and time.monotonic() - t0 < 5
        assert dict(headers)["X-Mcptape-Error"] == "upstream-timeout"
        time.sleep(0.2)
        assert px.stop() == 0
    assert "/slow-headers" in fake_upstream.closed_early
    (ex,) = px.exchanges()
    assert ex["status"] == 504 and ex["outcome"] == "timeout"


def test_upstream_reset_mid_stream(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        u = urlsplit(px.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request(
            "POST", "/sse-reset", body=rpc("tools/call", {"name": "x"}), headers=dict(H_JSON)
        )
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead):
            resp.read()  # the host sees a broken stream, never a clean end
        conn.close()
        status, _, _ = http_raw(px.url, "GET", "/echo/after")  # still serving
        assert status == 200
        assert px.stop() == 0
    ex = px.exchanges()[0]
    assert ex["outcome"] == "upstream_error" and "mid-response" in ex["error"]
    frames = [f for f in px.frames() if f["http_exchange_id"] == ex["id"]]
    assert [f["kind"] for f in frames] == ["request", "notification", "noise"]
    assert frames[1]["complete"] == 1 and frames[2]["complete"] == 0  # the cut-off event


def test_server_crash_mid_call(proxy: Any) -> None:
    """The SDK server dies during a call: progress recorded, the stream error relayed, 502 after."""
    with (
        start_upstream("--transport", "http", "--preset", "basic,crash") as up,
        proxy(up.url) as px,
    ):
        init = rpc(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
            0,
        )
        status, headers, _ = http_raw(px.url, "POST", "/mcp", H_JSON, init)
        assert status == 200
        sid = dict(headers)["mcp-session-id"]
        h = [*H_JSON, ("Mcp-Session-Id", sid), ("MCP-Protocol-Version", "2025-11-25")]
        http_raw(px.url, "POST", "/mcp", h, rpc("notifications/initialized", id_=None))
        u = urlsplit(px.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        call = rpc(
            "tools/call",
            {"name": "crash", "arguments": {"code": 3}, "_meta": {"progressToken": "p"}},
            2,
        )
        conn.request("POST", "/mcp", body=call, headers=dict(h))
        resp = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
        conn.close()
        up.proc.wait(10)
        status, headers, _ = http_raw(px.url, "POST", "/mcp", h, rpc("tools/list", {}, 3))
        assert status == 502
        assert px.stop() == 0
    ex = px.exchanges()
    crash = ex[2]
    assert crash["outcome"] == "upstream_error"
    frames = [f for f in px.frames() if f["http_exchange_id"] == crash["id"]]
    methods = [f["method"] for f in frames]
    assert methods[0] == "tools/call" and "notifications/progress" in methods
    assert ex[3]["status"] == 502


def test_host_disconnects_mid_request(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        u = urlsplit(px.url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(
            f'POST /mcp HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"jsonrpc"'.encode()
        )
        time.sleep(0.2)
        s.close()
        time.sleep(0.2)
        status, _, _ = http_raw(px.url, "GET", "/echo/alive")
        assert status == 200
        assert px.stop() == 0
    ex = px.exchanges()
    assert ex[0]["outcome"] == "host_aborted" and ex[0]["status"] is None
    assert ex[1]["status"] == 200
    (frame,) = px.frames()
    assert frame["raw"] == b'{"jsonrpc"' and frame["complete"] == 0


# --------------------------------------------------------------------------- bad input
def compare(
    up: Upstream, px: Proxy, headers: list[tuple[str, str | bytes]], body: bytes
) -> tuple[int, bytes]:
    d_status, _, d_body = http_raw(up.url, "POST", "/mcp", headers, body)
    p_status, _, p_body = http_raw(px.url, "POST", "/mcp", headers, body)
    assert (p_status, p_body) == (d_status, d_body)
    return p_status, p_body


def test_bad_bodies_relayed_as_the_server_answers(proxy: Any, up_stateful: Upstream) -> None:
    with proxy(up_stateful.url) as px:
        status, body = compare(up_stateful, px, H_MODERN, b'{"jsonrpc": "2.0", "id": 1, "method": ')
        assert status == 400 and b"-32700" in body
        status, _ = compare(up_stateful, px, H_MODERN, b'{"hello": 1}')
        assert status == 400
        batch = b"[" + rpc("ping", id_=1) + b"," + rpc("ping", id_=2) + b"]"
        status, _ = compare(up_stateful, px, H_JSON, batch)
        assert status == 400
        status, _ = compare(up_stateful, px, [("Content-Type", "text/plain")], b"hello")
        assert status in (400, 415)
        assert px.stop() == 0
    kinds = [f["kind"] for f in px.frames() if f["direction"] == "c2s"]
    assert kinds == ["noise", "invalid", "batch", "noise"]
    frames = px.frames()
    assert frames[0]["raw"] == b'{"jsonrpc": "2.0", "id": 1, "method": '
    replies = [f for f in frames if f["direction"] == "s2c"]
    assert replies and all(f["kind"] == "error" for f in replies[:3])


def test_oversized_body_streams_through(proxy: Any, up_stateful: Upstream) -> None:
    big = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
        + b"a" * (12 << 20)
        + b'"}}}'
    )
    with proxy(up_stateful.url) as px:
        d_status, _, d_body = http_raw(up_stateful.url, "POST", "/mcp", H_JSON, big)
        p_status, _, p_body = http_raw(px.url, "POST", "/mcp", H_JSON, big)
        assert (p_status, p_body) == (d_status, d_body) == (413, d_body)
        assert px.stop() == 0
    # The upstream refused after its first MiBs: the frame holds what it was given, marked
    # incomplete (the rest never reached it). On a loaded machine the refusal can come before
    # the relay handed the upstream any of the body: then there is nothing to record as sent,
    # and the exchange below still says the body was not taken.
    c2s = [f for f in px.frames() if f["direction"] == "c2s"]
    assert len(c2s) <= 1
    for frame in c2s:
        assert 0 < frame["size"] < len(big) and frame["complete"] == 0
        assert frame["raw"] == big[: frame["size"]]
    ex = px.exchanges()[0]
    assert ex["status"] == 413 and ex["outcome"] == "complete"
    assert ex["meta"]["request_body_not_taken"] is True


def test_large_body_recorded_whole(proxy: Any, fake_upstream: FakeUpstream) -> None:
    big = rpc("tools/call", {"name": "echo", "arguments": {"text": "b" * (12 << 20)}}, 5)
    with proxy(fake_upstream.origin + "/mcp") as px:
        status, _, data = http_raw(px.url, "POST", "/echo/big", H_JSON, big)
        assert status == 200 and len(base64.b64decode(json.loads(data)["body"])) == len(big)
        assert px.stop() == 0
    frame = px.frames()[0]
    assert frame["direction"] == "c2s"
    assert frame["size"] == len(big) and frame["complete"] == 1 and frame["raw"] == big
    assert frame["kind"] == "request" and frame["method"] == "tools/call"
    assert frame["partial_parse"] == 1  # classified from head and tail, not parsed whole
    (ex,) = px.exchanges()
    assert ex["request_size"] == len(big) and ex["meta"]["request_body_streamed"] is True


def test_header_values_non_ascii_and_invalid(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        status, _, data = http_raw(px.url, "GET", "/echo/u", [("X-Name", "Zoë ✓".encode())])
        assert status == 200
        got = {k: base64.b64decode(v) for k, v in json.loads(data)["raw_headers"]}
        assert got["X-Name"] == "Zoë ✓".encode()
        # Latin-1 bytes (not UTF-8) are relayed as they are too: the head is the host's bytes.
        status, _headers, data = http_raw(
            px.url, "GET", "/echo/l", [("X-Name", "Zoë".encode("latin-1"))]
        )
        assert status == 200
        got = {k: base64.b64decode(v) for k, v in json.loads(data)["raw_headers"]}
        assert got["X-Name"] == "Zoë".encode("latin-1")
        # CR inside a value: the request is malformed; refused, and the relay keeps serving.
        u = urlsplit(px.url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(f"GET /echo/cr HTTP/1.1\r\nHost: {u.netloc}\r\nX-Bad: a\rb\r\n\r\n".encode())
        reply = s.recv(65536)
        s.close()
        assert reply.split(b"\r\n", 1)[0] in (
            b"HTTP/1.0 400 Bad Request",
            b"HTTP/1.1 400 Bad Request",
        )
        status, _, _ = http_raw(px.url, "GET", "/echo/ok")
        assert status == 200
        assert px.stop() == 0
    ex = px.exchanges()
    assert ["X-Name", "Zoë ✓"] in ex[0]["request_headers"]
    assert ex[1]["status"] == 200 and ex[1]["outcome"] == "complete"
    assert ["X-Name", "Zo\\xeb"] in ex[1]["request_headers"]  # recorded escaped
    assert len(ex) == 3  # the malformed request never became an exchange


def test_large_response_streams_through(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp") as px:
        status, headers, data = http_raw(px.url, "GET", "/big?mib=30")
        assert status == 200 and len(data) == 30 << 20 and data.count(b"x") == len(data)
        assert dict(headers)["Content-Length"] == str(30 << 20)
        assert px.stop() == 0
    (ex,) = px.exchanges()
    assert ex["response_size"] == 30 << 20 and ex["outcome"] == "complete"
    body = ex["meta"]["response_body"]  # not MCP: kept capped in meta, not as a frame
    assert body["size"] == 30 << 20 and body["truncated"] is True


def test_stop_with_an_open_stream(proxy: Any, fake_upstream: FakeUpstream) -> None:
    """Ctrl-C with an event stream open: a short grace, then the stream is cut and recorded."""
    with proxy(fake_upstream.origin + "/mcp") as px:
        u = urlsplit(px.url)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(
            f"GET /sse-timed?n=1000&gap=0.05 HTTP/1.1\r\nHost: {u.netloc}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        got = b""
        while got.count(b"\r\n\r\n") < 6:  # the stream is open, has carried a few events
            got += s.recv(65536)
        t0 = time.monotonic()
        assert px.stop() == 0
        assert time.monotonic() - t0 < 15
        s.close()
    (ex,) = px.exchanges()
    assert ex["outcome"] == "relay_shutdown" and ex["error"] == "the relay was stopped"
    frames = px.frames()
    assert len(frames) >= 5 and [int(f["sse_id"]) for f in frames] == list(range(len(frames)))
    (session,) = px.sessions()
    assert (
        session["status"] == "ended" and session["meta"]["grouping"]["ended_by"] == "relay stopped"
    )
