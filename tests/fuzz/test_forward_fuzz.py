"""The standing fuzz suite, forward proxy: hostile input at both doors of ``record --forward``.

One real ``mcptape record --forward`` (its default lean engine) for the module, in front of a
raw standard-library upstream on 127.0.0.1 (plain HTTP, reached by absolute-form requests, so no
TLS set-up per example):

- **hostile bodies** — each POST carries one hostile line as its body (an ``MCP-Protocol-Version``
  header marks it MCP, so every one is recorded), the upstream answers each with one: both sides
  get exactly the bytes sent, and every request body is in the recording as a frame (or a gap
  is counted);
- **hostile proxy requests** — bytes that are not, or are broken, proxy requests: garbage,
  ``CONNECT`` lines with mangled authorities, a tunnel whose first bytes are TLS-looking garbage
  or anything else, absolute-form requests with mangled targets, all cut into arbitrary pieces.
  The proxy must answer or close each, never print a traceback, and serve the next host.

Seeded (``derandomize=True``); the first body example is every hostile kind. Only 127.0.0.1 is
ever dialled: every authority drawn names it (a random name would be a DNS lookup).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcp_proxy.forward.tunnel import parse_authority
from tests.conftest import corpus_phases
from tests.forward.conftest import Forward, run_forward
from tests.fuzz import hostile
from tests.fuzz.test_http_fuzz import _Upstream, upstream
from tests.helpers import db as rdb

pytestmark = [pytest.mark.timeout(300), pytest.mark.corpus]

MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


@pytest.fixture(scope="module")
def origin() -> Iterator[_Upstream]:
    with upstream([b'{"jsonrpc":"2.0","id":1,"result":{}}']) as up:
        yield up


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forward]:
    d = tmp_path_factory.mktemp("fwd-fuzz")
    conf = d / "mitm"
    conf.mkdir()
    with run_forward(d / "fuzz.db", conf) as fw:
        yield fw
    assert not [ln for ln in fw.stderr if "Traceback" in ln], "\n".join(fw.stderr)


def _post_via(proxy_url: str, target: str, bodies: list[bytes]) -> list[bytes]:
    host, port = proxy_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    got = []
    try:
        for body in bodies:
            conn.request("POST", target, body=body, headers=MCP_HEADERS)
            got.append(conn.getresponse().read())
    finally:
        conn.close()
    return got


bodies = st.lists(hostile.lines, min_size=1, max_size=12)


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    phases=corpus_phases(),  # the default run: the @example alone; --full: the corpus
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(requests=hostile.EVERY_KIND, answers=hostile.EVERY_KIND[::-1])
@given(requests=bodies, answers=bodies)
def test_hostile_bodies_through_the_forward_proxy(
    proxy: Forward, origin: _Upstream, requests: list[bytes], answers: list[bytes]
) -> None:
    tag = f"b{time.monotonic_ns()}"
    with origin.lock:
        origin.answers = answers
        origin.heard = []
    target = f"http://127.0.0.1:{origin.server_address[1]}/mcp?{tag}"
    got = _post_via(proxy.url, target, requests)
    with origin.lock:
        heard = list(origin.heard)
    assert heard == requests
    assert got == [answers[i % len(answers)] for i in range(len(requests))]
    deadline = time.monotonic() + 30
    rows: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        rows = rdb.rows(
            proxy.db,
            "SELECT f.raw FROM frames f JOIN http_exchanges e ON e.id = f.http_exchange_id "
            "WHERE f.direction = 'c2s' AND e.url LIKE ?",
            f"%{tag}",
        )
        if len(rows) >= len([b for b in requests if b]):
            break
        time.sleep(0.1)
    recorded = sorted(bytes(r["raw"] or b"") for r in rows if r["raw"])  # type: ignore[arg-type]
    gaps = sum(s.get("gap_count") or 0 for s in rdb.sessions(proxy.db))
    assert recorded == sorted(b for b in requests if b) or gaps, (len(recorded), len(requests))


# ---------------------------------------------------------------------------- proxy requests
_ports = st.integers(0, 70000).map(str)
_authorities = st.one_of(
    st.builds(lambda p: f"127.0.0.1:{p}", _ports),
    st.builds(lambda p: f"[::1]:{p}", _ports),
    st.sampled_from(["127.0.0.1", "127.0.0.1:", ":443", "[::1", "127.0.0.1:x", "a b:1", ""]),
    st.text(alphabet="127.0:[]@/\\ %\x00", max_size=24),
).map(lambda s: s.encode("utf-8", "surrogateescape"))
_junk = st.binary(max_size=300)
_tls_junk = st.builds(lambda b: b"\x16\x03\x01" + b, st.binary(max_size=300))
_proxy_requests = st.one_of(
    _junk,
    st.builds(
        lambda a, first: b"CONNECT %b HTTP/1.1\r\nHost: %b\r\n\r\n%b" % (a, a, first),
        _authorities,
        st.one_of(_junk, _tls_junk, st.just(b"GET / HTTP/1.1\r\n\r\n")),
    ),
    st.builds(
        lambda a, path, rest: b"POST http://%b%b HTTP/1.1\r\n%b\r\n\r\n" % (a, path, rest),
        _authorities,
        st.binary(max_size=40),
        st.binary(max_size=80),
    ),
    st.builds(lambda line: line + b"\r\n\r\n", st.binary(max_size=200)),
)


def _exchange(proxy_url: str, data: bytes, cuts: list[int]) -> None:
    """Send ``data`` in pieces, read whatever comes back until the proxy closes or 1 s."""
    host, port = proxy_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.settimeout(1.0)
        start = 0
        for cut in [*sorted({c % (len(data) + 1) for c in cuts}), len(data)]:
            if cut > start:
                try:
                    s.sendall(data[start:cut])
                except OSError:
                    return  # the proxy already closed: an answer too
                start = cut
        try:
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass  # reset, or closed already: the proxy is done with it


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    phases=corpus_phases(),  # the default run: the @example alone; --full: the corpus
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# Found by a longer run: a raw tunnel to a name no resolver takes ("a..b") raised in the pipe's
# connect task ("Task exception was never retrieved", a traceback on the user's terminal).
@example(data=b"CONNECT a..b:1 HTTP/1.1\r\n\r\n\x00raw", cuts=[])
# …and one whose host made the addon's URL unparsable (a traceback in the addon's hook).
@example(data=b"POST http://1.[][:5/x HTTP/1.1\r\nMCP-Protocol-Version: 1\r\n\r\n", cuts=[])
@given(data=_proxy_requests, cuts=st.lists(st.integers(0, 400), max_size=4))
def test_hostile_proxy_requests_leave_the_proxy_serving(
    proxy: Forward, origin: _Upstream, data: bytes, cuts: list[int]
) -> None:
    _exchange(proxy.url, data, cuts)
    # The next host is served as if nothing happened.
    body = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
    with origin.lock:
        origin.answers = [b'{"jsonrpc":"2.0","id":2,"result":{}}']
    got = _post_via(proxy.url, f"http://127.0.0.1:{origin.server_address[1]}/mcp", [body])
    assert got == [b'{"jsonrpc":"2.0","id":2,"result":{}}']
    assert proxy.proc.poll() is None


@given(raw=st.binary(max_size=80), default=st.sampled_from([80, 443]))
def test_parse_authority_never_raises_and_names_a_port(raw: bytes, default: int) -> None:
    parsed = parse_authority(raw, default)
    if parsed is not None:
        host, port = parsed
        assert host and 0 < port < 65536
        assert not any(c in host for c in "/ @\\[]")
        if ":" in host:
            ipaddress.IPv6Address(host)  # only a bracketed IPv6 address has colons
