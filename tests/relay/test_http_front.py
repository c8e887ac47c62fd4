"""The host-facing HTTP/1.1 server (relay/http/front.py) on the wire: raw sockets, one relay.

Keep-alive and pipelining, chunked request bodies, ``Expect: 100-continue``, HTTP/1.0,
oversized heads and malformed requests — each answered the way an HTTP server must, and the
relay keeps serving afterwards.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.relay.conftest import FakeUpstream, Proxy, run_proxy


@pytest.fixture(scope="module")
def px(tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream) -> Iterator[Proxy]:
    db: Path = tmp_path_factory.mktemp("front") / "rec.db"
    with run_proxy(fake_upstream.origin + "/mcp", db) as proxy:
        yield proxy


def connect(px: Proxy) -> socket.socket:
    u = urlsplit(px.url)
    assert u.hostname is not None and u.port is not None
    return socket.create_connection((u.hostname, u.port), timeout=15)


def host(px: Proxy) -> str:
    return urlsplit(px.url).netloc


def read_response(s: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response off the socket (Content-Length or chunked); leftovers stay in ``buf``."""

    def fill() -> None:
        got = s.recv(65536)
        if not got:
            raise ConnectionError("closed")
        buf.extend(got)

    while b"\r\n\r\n" not in buf:
        fill()
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if status == 100:
        return status, headers, b""
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            fill()
        body = bytes(buf[:n])
        buf[:] = buf[n:]
        return status, headers, body
    assert headers.get("transfer-encoding") == "chunked", headers
    body = b""
    while True:
        while b"\r\n" not in buf:
            fill()
        size_line, _, _ = bytes(buf).partition(b"\r\n")
        size = int(size_line, 16)
        while len(buf) < len(size_line) + 2 + size + 2:
            fill()
        start = len(size_line) + 2
        body += bytes(buf[start : start + size])
        buf[:] = buf[start + size + 2 :]
        if size == 0:
            return status, headers, body


def echo_post(px: Proxy, path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host(px)}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def reflected_body(data: bytes) -> bytes:
    return base64.b64decode(json.loads(data)["body"])


def test_keep_alive_and_pipelined_requests_answered_in_order(px: Proxy) -> None:
    """Three requests in one write on one connection: three answers, in order, same socket."""
    s = connect(px)
    buf = bytearray()
    bodies = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i for i in range(3)]
    s.sendall(b"".join(echo_post(px, f"/echo/p{i}", b) for i, b in enumerate(bodies)))
    for i, b in enumerate(bodies):
        status, _, data = read_response(s, buf)
        assert status == 200 and json.loads(data)["raw_path"] == f"/echo/p{i}"
        assert reflected_body(data) == b
    # Still open: a fourth request on the same connection.
    s.sendall(echo_post(px, "/echo/again", b"{}"))
    status, _, data = read_response(s, buf)
    assert status == 200 and json.loads(data)["raw_path"] == "/echo/again"
    s.close()


def test_chunked_request_body_is_relayed_whole(px: Proxy) -> None:
    s = connect(px)
    buf = bytearray()
    parts = [b'{"jsonrpc":"2.0",', b'"id":7,', b'"method":"ping"}']
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    s.sendall(
        f"POST /echo/chunked HTTP/1.1\r\nHost: {host(px)}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
        + chunked
    )
    status, _, data = read_response(s, buf)
    assert status == 200 and reflected_body(data) == b"".join(parts)
    s.close()


def test_expect_100_continue(px: Proxy) -> None:
    """The host waits for ``100 Continue`` before its body; then gets the real answer."""
    s = connect(px)
    buf = bytearray()
    body = b'{"jsonrpc":"2.0","id":8,"method":"ping"}'
    s.sendall(
        f"POST /echo/expect HTTP/1.1\r\nHost: {host(px)}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    status, _, _ = read_response(s, buf)
    assert status == 100
    s.sendall(body)
    status, _, data = read_response(s, buf)
    assert status == 200 and reflected_body(data) == body
    s.close()


def test_http_10_request_gets_an_answer_and_a_close(px: Proxy) -> None:
    s = connect(px)
    s.sendall(f"GET /echo/old HTTP/1.0\r\nHost: {host(px)}\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["raw_path"] == "/echo/old"


@pytest.mark.parametrize(
    ("what", "status"),
    [("line", 414), ("field", 431), ("head", 431), ("garbage", 400)],
)
def test_oversized_or_malformed_head_gets_a_clean_4xx(px: Proxy, what: str, status: int) -> None:
    """One clear answer and a close — never a traceback — and the relay keeps serving."""
    s = connect(px)
    if what == "line":
        req = f"GET /echo/{'a' * 70_000} HTTP/1.1\r\nHost: {host(px)}\r\n\r\n"
    elif what == "field":
        req = f"GET /echo/x HTTP/1.1\r\nHost: {host(px)}\r\nX-Big: {'b' * 70_000}\r\n\r\n"
    elif what == "head":
        many = "".join(f"X-H{i}: {'c' * 1000}\r\n" for i in range(300))
        req = f"GET /echo/x HTTP/1.1\r\nHost: {host(px)}\r\n{many}\r\n"
    else:
        req = "NOT HTTP AT ALL\r\n\r\n"
    try:
        s.sendall(req.encode())
    except ConnectionError:
        pass  # the relay may answer and close before taking it all
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    assert data.split(b"\r\n", 1)[0].startswith(f"HTTP/1.1 {status} ".encode()), data[:200]
    assert b"connection: close" in data.lower()
    # Still serving.
    s = connect(px)
    buf = bytearray()
    s.sendall(echo_post(px, "/echo/after", b"{}"))
    assert read_response(s, buf)[0] == 200
    s.close()


def test_no_traceback_on_stderr(px: Proxy) -> None:
    """Runs last in this module: none of the above left a traceback in the relay's output."""
    lines: Any = px.stderr
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
