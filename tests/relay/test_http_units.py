"""Unit tests of the HTTP relay's pure parts and of one exchange's recording, without sockets
to an upstream: the head rewrite, the Host rules, and an in-process relay on a fake pool."""

from __future__ import annotations

import asyncio
import http.client
from typing import Any

import pytest

from mcp_proxy.relay.http.common import HostCheck, RelayConfig
from mcp_proxy.relay.http.forward import build_request_head
from mcp_proxy.relay.http.server import HTTPRelay
from tests.relay.fake_pool import FakeUpstreamPool
from tests.relay.unit.fakes import Recorder

pytestmark = pytest.mark.timeout(30)

UP = b"upstream.example:8443"


def test_head_keeps_the_host_bytes_and_order() -> None:
    raw = [
        (b"X-First", b"1"),
        (b"host", b"127.0.0.1:8765"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"dropped"),
        (b"TE", b"trailers"),
        (b"Expect", b"100-continue"),
        (b"x-utf8", "café".encode()),
        (b"Mcp-Session-Id", b"abc"),
        (b"Authorization", b"Bearer t"),
        (b"Content-Length", b"2"),
    ]
    rh = build_request_head("POST", "/mcp?a=1", raw, UP, body_exists=True)
    assert rh.head == (
        b"POST /mcp?a=1 HTTP/1.1\r\nX-First: 1\r\nHost: upstream.example:8443\r\n"
        b"x-utf8: caf\xc3\xa9\r\nMcp-Session-Id: abc\r\nAuthorization: Bearer t\r\n"
        b"Content-Length: 2\r\n\r\n"
    )
    assert rh.session_id == "abc" and rh.authorization == "Bearer t" and rh.has_mcp
    assert rh.expect_continue and not rh.chunked
    assert rh.rec_headers[0] == (b"X-First", b"1") and len(rh.rec_headers) == len(raw)


def test_head_framing_of_bodies() -> None:
    chunked = build_request_head("POST", "/", [(b"Host", b"h")], UP, body_exists=True)
    assert chunked.chunked and chunked.head.endswith(b"Transfer-Encoding: chunked\r\n\r\n")
    empty = build_request_head("POST", "/", [(b"Host", b"h")], UP, body_exists=False)
    assert empty.head.endswith(b"Content-Length: 0\r\n\r\n")
    no_host = build_request_head("GET", "/", [], UP, body_exists=False)
    assert no_host.head == b"GET / HTTP/1.1\r\nHost: upstream.example:8443\r\n\r\n"


def test_host_rules() -> None:
    loop = HostCheck("127.0.0.1")
    for ok in ("127.0.0.1:8765", "localhost", "LOCALHOST:1", "[::1]:8765", "127.0.0.2", None):
        assert loop.allows(ok), ok
    for bad in ("evil.example", "evil.example:8765", "127.0.0.1.nip.io", "10.0.0.1", ""):
        assert not loop.allows(bad), bad
    allow = HostCheck("127.0.0.1", ("mcp.internal", "other.example:9000"))
    assert allow.allows("mcp.internal:1") and allow.allows("other.example:9000")
    assert not allow.allows("other.example:9001") and not allow.allows("evil.example")
    assert HostCheck("127.0.0.1", ("*",)).allows("evil.example")
    wild = HostCheck("0.0.0.0")
    assert wild.allows("192.168.1.5:8765") and wild.allows("localhost")
    assert not wild.allows("evil.example")
    lan = HostCheck("192.168.1.5")
    assert lan.allows("192.168.1.5:8765") and not lan.allows("localhost")


RESULT = b'{"jsonrpc":"2.0","id":1,"result":{}}'
JSON_REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nX-Up: 1\r\n"
    b"content-length: %d\r\n\r\n%b" % (len(RESULT), RESULT)
)
SSE_REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"%x\r\n%b\r\n0\r\n\r\n"
) % (
    len(b"event: message\r\ndata: " + RESULT + b"\r\n\r\n"),
    b"event: message\r\ndata: " + RESULT + b"\r\n\r\n",
)


def _post(port: int, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/mcp", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = resp.status, resp.getheaders(), resp.read()
    conn.close()
    return out


async def _run_relay(pool: FakeUpstreamPool, *bodies: bytes) -> tuple[list[Any], Recorder]:
    rec = Recorder()
    relay = HTTPRelay(RelayConfig("http://upstream.test/mcp", port=0), rec, pool=pool)
    url = await relay.start()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        answers = [await asyncio.to_thread(_post, port, b) for b in bodies]
    finally:
        await relay.close()
    return answers, rec


def test_quick_exchanges_are_one_record_each_on_one_connection() -> None:
    """A quick exchange goes to the recorder once, complete; the upstream connection is reused."""
    pool = FakeUpstreamPool(JSON_REPLY, SSE_REPLY)
    req = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    answers, rec = asyncio.run(_run_relay(pool, req, req))
    (s1, h1, b1), (s2, _h2, b2) = answers
    assert (s1, b1) == (200, RESULT) and s2 == 200 and RESULT in b2
    # Upstream header names, casing and order — content-length included.
    assert [k for k, _ in h1] == ["content-type", "X-Up", "content-length"]
    assert pool.connections == 1 and len(pool.written) == 2
    assert pool.written[0].startswith(b"POST /mcp HTTP/1.1\r\nHost: upstream.test\r\n")
    assert pool.written[0].endswith(b"\r\n\r\n" + req)
    kinds = [c[0] for c in rec.calls]
    assert kinds == ["new_session", "record_exchange", "record_exchange", "end_session"]
    frames, fields = rec.calls[1][1]
    assert [f.raw for f in frames] == [req, RESULT] and fields["outcome"] == "complete"
    assert rec.calls[-1][1]["meta"]["grouping"]["open_ended"] is True
