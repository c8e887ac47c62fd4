"""Hardening of the HTTP relay (issue 10): hostile bodies, DNS rebinding, header fidelity, ends.

Every test drives the real ``mcptape record --upstream`` subprocess with raw clients (plain
sockets, ``http.client``), because what matters is the exact bytes and statuses on the wire.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.helpers.db import wait_until
from tests.helpers.rawhttp import read_answer
from tests.relay.conftest import FakeUpstream, Upstream
from tests.relay.test_http_wire import H_JSON, http_raw, rpc

pytestmark = pytest.mark.timeout(90)

#: Deeper than CPython's recursion limit: ``json.loads`` on it raises ``RecursionError``.
DEPTH = 1500


def deep_request(depth: int = DEPTH, id_: int = 1) -> bytes:
    inner = b"[" * depth + b"]" * depth
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
        b'"arguments":{"x":%b}}}' % (id_, inner)
    )


def raw_head(origin: str, request: bytes) -> tuple[bytes, bytes]:
    """Send one raw request; return the response head exactly as received, and the body."""
    u = urlsplit(origin)
    with socket.create_connection((u.hostname, u.port), timeout=20) as s:
        s.sendall(request)
        return read_answer(s)


def header_names(head: bytes) -> list[bytes]:
    return [line.split(b":", 1)[0] for line in head.split(b"\r\n")[1:]]


# --------------------------------------------------------------------------- defect 6
@pytest.fixture(scope="module")
def deep_request_run(tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream) -> Any:
    """One relay run: a request nested 1,500 levels deep, then an ordinary one."""
    from tests.relay.conftest import run_proxy

    body = deep_request()
    db = tmp_path_factory.mktemp("deep") / "rec.db"
    with run_proxy(fake_upstream.origin + "/rpc", db) as px:
        first = http_raw(px.url, "POST", "/rpc", H_JSON, body)
        upstream_got = fake_upstream.seen[-1]["body"]
        second = http_raw(px.url, "POST", "/rpc", H_JSON, rpc("ping", id_=2))
        assert px.stop() == 0
    return px, body, first, upstream_got, second


def test_deep_request_body_is_relayed_without_a_traceback(deep_request_run: Any) -> None:
    """The relay forwards the deep body unchanged and never recurses into it unguarded."""
    px, body, first, upstream_got, second = deep_request_run
    status, _, data = first
    assert status == 200 and json.loads(data)["result"] == {"ok": True}
    assert upstream_got == body
    assert second[0] == 200
    relay_lines = "\n".join(px.stderr)
    assert "mcp_proxy/relay/" not in relay_lines and "_describe" not in relay_lines, relay_lines


def test_deep_request_body_frame_is_recorded(deep_request_run: Any) -> None:
    """The deep request's frame is stored as its bytes (or counted lost), no traceback at all.

    Needs the recorder's classifier to survive the frame (issue 10, defect 1: "rec").
    """
    px, body, *_ = deep_request_run
    assert not any("Traceback" in line for line in px.stderr), "\n".join(px.stderr)
    assert len(px.exchanges()) == 2
    frames = px.frames()
    sent = [bytes(f["raw"]) for f in frames if f["direction"] == "c2s"]
    assert body in sent and len(frames) == 4


# --------------------------------------------------------------------------- defect 1 (HTTP)
def test_deep_response_does_not_stop_the_recording(proxy: Any, fake_upstream: FakeUpstream) -> None:
    """After one deep upstream response every later frame is recorded, and the stop line is true.

    Needs the recorder to survive a frame it cannot classify (issue 10, defect 1, recorder
    half); the relay's own half is that its last line never claims what was not recorded.
    """
    with proxy(fake_upstream.origin + "/rpc") as px:
        status, _, data = http_raw(px.url, "POST", "/deep", H_JSON, rpc("tools/call", id_=1))
        assert status == 200 and data.startswith(b'{"jsonrpc":"2.0","id":1,"result":[[[[')
        assert wait_until(lambda: len(px.frames()) >= 2)  # the recorder has the deep frame
        for i in range(2, 44):
            status, _, _ = http_raw(px.url, "POST", "/rpc", H_JSON, rpc("ping", id_=i))
            assert status == 200
        assert px.stop() == 0
    last = px.stderr[-1]
    frames = px.frames()
    recorded = len(px.exchanges())
    if recorded < 43 or len(frames) < 86:
        # Whatever was lost, the stop line must not claim it was recorded.
        assert "NOT recorded" in last and "in 1 session(s) recorded" not in last, px.stderr
    assert recorded == 43 and len(frames) == 86, px.stderr[-5:]


def test_stop_line_tells_the_truth_when_the_recorder_dies(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    """The recorder process killed mid-run: said at once, relaying goes on, the last line is true.

    (The recorder client replaces a dead worker and counts the loss as a gap; the relay's part
    is to keep relaying and never print "recorded" for a recording that is not whole.)
    """
    import os
    import signal

    with proxy(fake_upstream.origin + "/rpc") as px:
        status, _, _ = http_raw(px.url, "POST", "/rpc", H_JSON, rpc("ping", id_=1))
        assert status == 200
        time.sleep(0.3)
        worker = _recorder_pid(px.proc.pid)
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any("recorder process" in x for x in px.stderr):
            time.sleep(0.05)
        assert any("recorder process died" in x for x in px.stderr), px.stderr
        for i in range(2, 5):  # the relay keeps relaying
            status, _, _ = http_raw(px.url, "POST", "/rpc", H_JSON, rpc("ping", id_=i))
            assert status == 200
        assert px.stop() == 0
    last = px.stderr[-1]
    assert "4 exchange(s) relayed" in last and "recording is incomplete" in last, px.stderr
    assert "session(s) recorded" not in last


def _recorder_pid(relay_pid: int) -> int:
    """The recorder worker (``python -m mcp_proxy.recorder…``) started by the relay."""
    import pathlib

    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == relay_pid and b"mcp_proxy.recorder" in cmd:
            return int(p.name)
    raise AssertionError("no recorder worker found")


# --------------------------------------------------------------------------- defect 9
def _ping_status(origin: str, host: str, path: str = "/mcp") -> tuple[int, bytes]:
    status, _, data = http_raw(origin, "POST", path, H_JSON, rpc("ping"), host=host)
    return status, data


def test_foreign_host_is_refused_like_the_upstream_does(proxy: Any, up_stateful: Upstream) -> None:
    """DNS rebinding: ``Host: evil.example`` gets 421 through mcptape, as it does directly."""
    up = urlsplit(up_stateful.url)
    assert _ping_status(up_stateful.url, "evil.example")[0] == 421  # the upstream's own rule
    with proxy(up_stateful.url) as px:
        port = urlsplit(px.url).port
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.2.nip.io:{port}"):
            status, data = _ping_status(px.url, host)
            assert status == 421, (host, status, data)
        # Loopback names of a loopback listener are its own.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            status, data = _ping_status(px.url, host)
            assert status == 400 and b"session" in data.lower(), (host, status, data)
        assert px.stop() == 0
    ex = px.exchanges()
    refused = [e for e in ex if e["status"] == 421]
    assert len(refused) == 3 and all(e["outcome"] == "refused" for e in refused)
    assert all(e["meta"]["synthesized"]["kind"] == "host-not-allowed" for e in refused)
    assert up.port  # (the upstream never saw the refused ones: nothing to count there)


def test_allow_host_lets_a_named_host_through(proxy: Any, up_stateful: Upstream) -> None:
    with proxy(up_stateful.url, "--allow-host", "mcp.internal.example") as px:
        port = urlsplit(px.url).port
        status, data = _ping_status(px.url, f"mcp.internal.example:{port}")
        assert status == 400 and b"session" in data.lower()
        assert _ping_status(px.url, "evil.example")[0] == 421
        assert px.stop() == 0


# --------------------------------------------------------------------------- defect 10
def test_response_header_names_and_order_kept(proxy: Any, up_stateful: Upstream) -> None:
    """uvicorn sends ``content-length`` last and in lower case: the host gets exactly that."""
    body = rpc("ping")

    def request(origin: str) -> bytes:
        netloc = urlsplit(origin).netloc
        return (
            b"POST /mcp HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%b"
            % (netloc.encode(), len(body), body)
        )

    direct, _ = raw_head(up_stateful.url, request(up_stateful.url))
    with proxy(up_stateful.url) as px:
        relayed, data = raw_head(px.url, request(px.url))
        assert px.stop() == 0
    assert header_names(direct) == [
        b"date",
        b"server",
        b"content-type",
        b"mcp-session-id",
        b"content-length",
    ]
    assert header_names(relayed) == header_names(direct), relayed
    assert b"session" in data.lower()


# --------------------------------------------------------------------------- defect 19
def test_session_without_delete_ends_at_its_last_exchange(
    proxy: Any, up_stateful: Upstream
) -> None:
    """A client that never sends DELETE: the session ends at its last frame, marked open-ended."""
    init = rpc(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "no-delete", "version": "1"},
        },
    )
    with proxy(up_stateful.url) as px:
        status, headers, _ = http_raw(px.url, "POST", "/mcp", H_JSON, init)
        assert status == 200
        sid = dict(headers)["mcp-session-id"]
        h = [*H_JSON, ("Mcp-Session-Id", sid), ("MCP-Protocol-Version", "2025-06-18")]
        status, _, _ = http_raw(
            px.url, "POST", "/mcp", h, rpc("notifications/initialized", id_=None)
        )
        assert status == 202
        status, _, _ = http_raw(px.url, "POST", "/mcp", h, rpc("tools/list", id_=2))
        assert status == 200
        time.sleep(0.4)  # scenario: the client goes quiet, and never says goodbye
        stopped_at = time.time()
        assert px.stop() == 0
    (session,) = [s for s in px.sessions() if s["meta"]["grouping"].get("mcp_session_id") == sid]
    last_end = max(e["ended_at"] for e in px.exchanges())
    assert session["status"] == "ended"
    assert session["ended_at"] == pytest.approx(last_end, abs=0.2)
    assert stopped_at - session["ended_at"] > 0.3  # the quiet time, beyond the 0.2 above
    grouping = session["meta"]["grouping"]
    assert grouping["ended_by"] == "relay stopped" and grouping["open_ended"] is True


# --------------------------------------------------------------------------- issue 22, defect 18
class _RawUpstream(socketserver.ThreadingTCPServer):
    """An upstream that takes any head (aiohttp's server would refuse two Hosts itself) and
    keeps the raw heads it got; it answers every request with one small JSON-RPC result."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RawHandler)
        self.heads: list[bytes] = []


class _RawHandler(socketserver.StreamRequestHandler):
    server: _RawUpstream

    def handle(self) -> None:
        while True:
            lines = []
            length = 0
            while (line := self.rfile.readline(65536)) not in (b"\r\n", b""):
                lines.append(line)
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if not lines:
                return
            self.server.heads.append(b"".join(lines))
            self.rfile.read(length)
            body = b'{"jsonrpc":"2.0","id":1,"result":{}}'
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
            )


def test_two_host_headers_are_refused(proxy: Any) -> None:
    """A loopback ``Host`` then ``Host: evil.example``: 400 from the relay, nothing upstream.

    The Host check read only the first value, so a second one passed it and went upstream
    with the request (RFC 9112 §3.2: a request with more than one Host gets a 400). The next
    request (a new connection: a refusal closes) is answered as usual.
    """
    up = _RawUpstream()
    threading.Thread(target=up.serve_forever, daemon=True).start()
    try:
        with proxy(f"http://127.0.0.1:{up.server_address[1]}/mcp") as px:
            netloc = urlsplit(px.url).netloc.encode()
            body = rpc("ping")
            for hosts in (
                b"Host: %b\r\nHost: evil.example\r\n" % netloc,
                b"Host: %b\r\nhost: %b\r\n" % (netloc, netloc),
            ):
                request = (
                    b"POST /mcp HTTP/1.1\r\n%bContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (hosts, len(body), body)
                )
                head, data = raw_head(px.url, request)
                assert head.startswith(b"HTTP/1.1 400 "), (head, data)
                assert b"Host" in data, data
            assert up.heads == []
            status, _, _ = http_raw(px.url, "POST", "/mcp", H_JSON, rpc("ping", id_=2))
            assert status == 200
            assert len(up.heads) == 1 and up.heads[0].lower().count(b"host:") == 1
            assert px.stop() == 0
    finally:
        up.shutdown()
        up.server_close()
