"""The lean forward engine's own behaviours, through a real ``mcptape record --forward``.

What the other forward-proxy modules do not reach: plain-HTTP proxying (absolute-form requests
and their ``Host``, clear HTTP inside a CONNECT tunnel), the proxy request's own refusals
(400/431), hosts that do not trust the proxy's CA (with and without a TLS alert), names no
certificate can carry, SNI naming another host than the CONNECT line (the host's certificate
and the upstream's check), request framing (chunked bodies, ``Expect: 100-continue``), bodiless
answers (HEAD, 204, 304), pipelining and the upstream pool, a host or an upstream that goes
away mid-response, protocol upgrades, the ``--engine`` choice, a listener beyond loopback, and
a stop with a stream open.

One proxy for most cases (the session's ``shared_fw``: each case looks only at its own URL's
exchanges, tagged ``case=…``); the origins are the SDK's server over plain HTTP and a tiny raw
origin (:mod:`tests.forward.lean_helpers`) that counts connections and keeps every request as
it came. Three cases start a proxy of their own (a wide listener, a stop) or a CLI run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography import x509

from mcp_proxy.testing.process import start_http_server
from tests.forward.conftest import Forward, TLSFiles, frames_of, run_forward, wait_exchanges
from tests.forward.lean_helpers import (
    ANSWER,
    PROGRESS,
    RawOrigin,
    connect_tunnel,
    raw_origin,
    read_response,
    rpc_result,
)
from tests.helpers.watch import QUIET, until
from tests.relay.conftest import MCPTAPE

pytestmark = pytest.mark.timeout(120)

JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def rpc(method: str, params: dict[str, Any], rid: int = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, separators=(",", ":")
    ).encode()


@pytest.fixture(scope="module")
def fw(shared_fw: Forward) -> Forward:
    """The session's shared proxy (lean: the default engine)."""
    return shared_fw


def origin_context(tls: TLSFiles) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.chain, tls.key)
    return ctx


@pytest.fixture(scope="module")
def tls_origin(tls_files: TLSFiles) -> Iterator[RawOrigin]:
    with raw_origin(origin_context(tls_files)) as o:
        yield o


@pytest.fixture(scope="module")
def plain_origin() -> Iterator[RawOrigin]:
    with raw_origin() as o:
        yield o


@pytest.fixture(scope="module")
def sdk_plain() -> Iterator[str]:
    """The SDK's MCP server over plain HTTP (stateless, JSON answers): its /mcp URL."""
    with start_http_server("basic", "http", stateless=True, json_response=True) as (url, _):
        yield url


async def tls_tunnel(
    fw: Forward, authority: str, server_hostname: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """CONNECT, then TLS with the proxy (trusting its CA only)."""
    reader, writer, head = await connect_tunnel(fw.url, authority)
    assert head.startswith(b"HTTP/1.1 200"), head
    name = server_hostname or authority.rsplit(":", 1)[0]
    await asyncio.wait_for(writer.start_tls(fw.ssl_context(), server_hostname=name), 10)
    return reader, writer


async def read_to_eof(reader: asyncio.StreamReader, within: float = 10.0) -> bytes:
    return await asyncio.wait_for(reader.read(), within)


# --------------------------------------------------------------------------- plain HTTP
async def test_absolute_form_post_is_proxied_and_recorded(fw: Forward, sdk_plain: str) -> None:
    """``HTTP_PROXY`` for an http:// server: the SDK server answers, the exchange is MCP."""
    init = rpc(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "lean-test", "version": "1"},
        },
    )
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "plain-http"}}, rid=2)
    url = f"{sdk_plain}?case=absolute-form"
    async with httpx2.AsyncClient(proxy=fw.url, trust_env=False, timeout=30) as client:
        r1 = await client.post(url, content=init, headers=JSON_HEADERS)
        r2 = await client.post(
            url,
            content=call,
            headers={**JSON_HEADERS, "MCP-Protocol-Version": "2025-11-25"},
        )
    assert r1.status_code == 200 and json.loads(r1.content)["result"]["serverInfo"]
    assert r2.status_code == 200 and b"plain-http" in r2.content
    rows = wait_exchanges(fw, "case=absolute-form", 2)
    assert len(rows) == 2, rows
    by_method = {bytes(frames_of(fw, e["id"])[0]["raw"]): (e, frames_of(fw, e["id"])) for e in rows}
    for sent, got in ((init, r1.content), (call, r2.content)):
        ex, frames = by_method[sent]
        assert ex["url"] == url and ex["outcome"] == "complete" and ex["status"] == 200
        assert [bytes(f["raw"]) for f in frames] == [sent, got]
        assert ex["meta"]["forward"] is True


async def test_plain_http_inside_a_connect_tunnel(fw: Forward, plain_origin: RawOrigin) -> None:
    """CONNECT, then HTTP/1.1 in clear: relayed to the tunnel's origin and recorded."""
    body = rpc("tools/call", {"name": "x", "arguments": {"tunnel": "clear"}})
    reader, writer, head = await connect_tunnel(fw.url, f"127.0.0.1:{plain_origin.port}")
    try:
        assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(
            b"POST /echo?case=clear-tunnel HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (plain_origin.port, len(body), body)
        )
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(body)
    (seen,) = [s for s in plain_origin.requests if b"case=clear-tunnel" in s.head]
    assert seen.body == body
    (ex,) = wait_exchanges(fw, "case=clear-tunnel")
    assert ex["url"] == f"http://127.0.0.1:{plain_origin.port}/echo?case=clear-tunnel"
    assert [bytes(f["raw"]) for f in frames_of(fw, ex["id"])] == [body, rbody]


async def test_absolute_form_host_header_is_the_targets(
    fw: Forward, plain_origin: RawOrigin
) -> None:
    """RFC 9112 §3.2.2: a proxy given an absolute-form target replaces the host's ``Host``
    with the target's authority (the origin must not be told another host than it serves);
    what was meant for the proxy (``Proxy-Authorization``) does not go on."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    body = rpc("tools/call", {"name": "x", "arguments": {}})
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST http://127.0.0.1:%d/echo?case=host-header HTTP/1.1\r\nHost: other.example\r\n"
            b"Proxy-Authorization: Basic dXNlcjpzZWNyZXQ=\r\nProxy-Connection: keep-alive\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (plain_origin.port, len(body), body)
        )
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(body)
    (seen,) = [s for s in plain_origin.requests if b"case=host-header" in s.head]
    # The proxy's own credentials and connection headers stop here.
    assert seen.header("proxy-authorization") is None and seen.header("proxy-connection") is None
    assert seen.header("host") == f"127.0.0.1:{plain_origin.port}", seen.head


# --------------------------------------------------------------------------- the proxy request
async def test_malformed_connect_gets_400_and_one_body(fw: Forward) -> None:
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    for line in (b"CONNECT http://127.0.0.1/ HTTP/1.1", b"CONNECT 127.0.0.1:99999 HTTP/1.1"):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(line + b"\r\nHost: x\r\n\r\n")
        got = await read_to_eof(reader)
        writer.close()
        text = b"mcptape forward proxy: malformed CONNECT request\n"
        assert got == (
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(text), text)
        ), got


async def test_overlong_proxy_head_gets_431(fw: Forward) -> None:
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nX-Pad: " + b"a" * (70 * 1024))
    got = await read_to_eof(reader)
    writer.close()
    assert got.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), got[:200]
    assert got.endswith(b"\r\n\r\nmcptape forward proxy: proxy request head too large\n")


async def test_overlong_proxy_head_in_one_piece_gets_431(fw: Forward) -> None:
    """The limit holds however the head arrives: here whole, terminator included."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nX-Pad: " + b"a" * (100 * 1024) + b"\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    assert head.startswith(b"HTTP/1.1 431 "), head


# --------------------------------------------------------------------------- TLS with the host
def refuse_once(fw: Forward, name: str, tls: TLSFiles) -> None:
    """CONNECT to ``name`` and a TLS handshake that does not trust the proxy's CA, from a
    blocking socket: OpenSSL sends its ``unknown_ca`` alert before closing, as Node, curl and
    browsers do."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"CONNECT %b:443 HTTP/1.1\r\nHost: %b:443\r\n\r\n" % (name.encode(), name.encode())
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200")
        untrusting = ssl.create_default_context(cafile=str(tls.ca_pem))  # not the proxy's CA
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusting.wrap_socket(sock, server_hostname=name)


async def wait_lines(fw: Forward, needle: str, n: int, within: float = 10.0) -> list[str]:
    deadline = time.monotonic() + within
    found: list[str] = []
    while time.monotonic() < deadline:
        found = [ln for ln in list(fw.stderr) if needle in ln]
        if len(found) >= n:
            break
        await asyncio.sleep(0.05)
    return found


async def test_host_that_distrusts_the_ca_gets_one_line_per_name(
    fw: Forward, tls_files: TLSFiles, tls_origin: RawOrigin
) -> None:
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    first, second = f"refuses-a-{tag}.test", f"refuses-b-{tag}.test"
    for name in (first, first, second):
        await asyncio.to_thread(refuse_once, fw, name, tls_files)
    assert await wait_lines(fw, second, 1)
    await asyncio.sleep(0.3)  # a second line for `first` would be out by now
    (line,) = await wait_lines(fw, first, 1)
    # One line: the name, OpenSSL's reason (the host's alert), the CA file to trust.
    assert line.startswith(f"mcptape: a host refused the proxy's certificate for {first} ("), line
    assert "UNKNOWN_CA" in line and line.endswith(f"); it must trust {fw.ca_cert}"), line
    assert len(await wait_lines(fw, second, 1)) == 1
    # …and the proxy serves the next host as before.
    async with fw.http_client() as client:
        r = await client.post(f"{tls_origin.origin}/echo?case=after-refusal", content=b"{}")
    assert r.status_code == 200 and r.content == rpc_result(b"{}")


async def test_python_host_that_distrusts_the_ca_gets_a_line(
    fw: Forward, tls_files: TLSFiles
) -> None:
    """The Python SDK's client (httpx over asyncio/anyio TLS) refuses a certificate by closing
    the connection without sending its alert: the proxy must still say which CA to trust —
    that host is the one this line is most needed for (mitmproxy says "the client disconnected
    during the handshake … may not trust the proxy's certificate")."""
    name = f"py-refuses-{os.getpid()}-{time.monotonic_ns()}.test"
    untrusting = ssl.create_default_context(cafile=str(tls_files.ca_pem))
    async with httpx2.AsyncClient(proxy=fw.url, verify=untrusting, trust_env=False) as client:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.post(f"https://{name}/mcp", content=b"{}")
    lines = await wait_lines(fw, name, 1, within=5)
    assert len(lines) == 1 and str(fw.ca_cert) in lines[0], fw.stderr[-5:]


def test_connect_to_a_name_no_certificate_can_carry_is_no_traceback(fw: Forward) -> None:
    """``CONNECT a..b:443`` (an empty label: no certificate can name it) then a ClientHello:
    one clear refusal, no traceback in the user's terminal, and the proxy serves on."""
    before = len(fw.stderr)
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    for name in ("a..b", "a" * 64 + ".test"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"CONNECT %b:443 HTTP/1.1\r\nHost: %b:443\r\n\r\n" % ((name.encode(),) * 2)
            )
            head = sock.recv(200)
            if head.startswith(b"HTTP/1.1 200"):
                with pytest.raises((ssl.SSLError, OSError)):
                    ssl.create_default_context().wrap_socket(sock, server_hostname="ok.test")
            else:
                assert head.startswith(b"HTTP/1.1 400 "), head
    time.sleep(QUIET)  # a negative check: a traceback would have been printed by now
    said = fw.stderr[before:]
    assert not [ln for ln in said if "Traceback" in ln or "Fatal error" in ln], "\n".join(said)


async def test_sni_naming_another_host_gets_that_hosts_certificate(
    fw: Forward, tls_origin: RawOrigin
) -> None:
    """CONNECT 127.0.0.1:port with SNI ``localhost``: the certificate names localhost (what
    the host checks), and the request still goes to the CONNECT line's origin."""
    reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}", "localhost")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        cert = x509.load_der_x509_certificate(der)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == ["localhost"]
        assert san.get_values_for_type(x509.IPAddress) == []
        writer.write(
            b"POST /echo?case=sni HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}"
        )
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(b"{}")
    assert [s for s in tls_origin.requests if b"case=sni" in s.head]


async def test_connect_by_address_with_sni_reaches_a_server_named_by_the_sni(
    fw: Forward, tls_files: TLSFiles
) -> None:
    """A host that CONNECTs to an address and names the server in its SNI (one that resolved
    the name itself): the server's certificate names the host name only, so the upstream TLS
    must be checked against the SNI, as mitmproxy does (its upstream SNI is the host's)."""
    cert = tls_files.ca.issue_cert("localhost")  # no IP address in it
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    with raw_origin(ctx) as origin:
        reader, writer = await tls_tunnel(fw, f"127.0.0.1:{origin.port}", "localhost")
        try:
            writer.write(
                b"POST /echo?case=sni-upstream HTTP/1.1\r\nHost: localhost:%d\r\n"
                b"Content-Length: 2\r\n\r\n{}" % origin.port
            )
            rhead, rbody = await read_response(reader)
        finally:
            writer.close()
        assert rhead.startswith(b"HTTP/1.1 200"), rhead + rbody
        assert rbody == rpc_result(b"{}") and len(origin.requests) == 1


# --------------------------------------------------------------------------- request framing
async def test_chunked_request_body_goes_through_and_is_recorded(
    fw: Forward, tls_origin: RawOrigin
) -> None:
    body = rpc("tools/call", {"name": "x", "arguments": {"chunked": "y" * 3000}})
    pieces = [body[:10], body[10:2000], body[2000:]]
    reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}")
    try:
        writer.write(
            b"POST /echo?case=chunked HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            % tls_origin.port
        )
        for p in pieces:
            writer.write(b"%x\r\n%b\r\n" % (len(p), p))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(body)
    (seen,) = [s for s in tls_origin.requests if b"case=chunked" in s.head]
    assert seen.body == body and seen.header("transfer-encoding") == "chunked"
    assert seen.header("content-length") is None
    (ex,) = wait_exchanges(fw, "case=chunked")
    assert ex["request_size"] == len(body)
    assert [bytes(f["raw"]) for f in frames_of(fw, ex["id"])] == [body, rbody]


async def test_expect_100_continue_is_answered_and_the_body_recorded(
    fw: Forward, tls_origin: RawOrigin
) -> None:
    body = rpc("tools/call", {"name": "x", "arguments": {"expect": True}})
    reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}")
    try:
        writer.write(
            b"POST /echo?case=expect HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
            % (tls_origin.port, len(body))
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(body)
    (seen,) = [s for s in tls_origin.requests if b"case=expect" in s.head]
    assert seen.body == body and seen.header("expect") is None  # the proxy answered it
    (ex,) = wait_exchanges(fw, "case=expect")
    assert [bytes(f["raw"]) for f in frames_of(fw, ex["id"])] == [body, rbody]


async def test_bodiless_responses_pass(fw: Forward, tls_origin: RawOrigin) -> None:
    """HEAD, 204 and 304 answers have no body (the upstream client hands the engine an empty
    payload of another class): each reaches the host, head as sent, and a JSON-RPC POST
    answered 204 is recorded complete."""
    note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    async with fw.http_client() as client:
        head = await client.head(f"{tls_origin.origin}/head-length?case=head")
        r204 = await client.post(
            f"{tls_origin.origin}/no-content?case=204", content=note, headers=JSON_HEADERS
        )
        r304 = await client.get(
            f"{tls_origin.origin}/not-modified?case=304", headers={"If-None-Match": '"v1"'}
        )
    assert head.status_code == 200 and head.headers["content-length"] == "42"
    assert r204.status_code == 204 and r204.content == b""
    assert r304.status_code == 304 and r304.headers["etag"] == '"v1"'
    (ex,) = wait_exchanges(fw, "case=204")
    assert ex["outcome"] == "complete" and ex["status"] == 204, ex
    assert [bytes(f["raw"]) for f in frames_of(fw, ex["id"])] == [note]


async def test_head_response_without_a_length_is_not_given_one(
    fw: Forward, plain_origin: RawOrigin
) -> None:
    """A HEAD answer carries the GET's head: with no Content-Length upstream, the proxy must
    not invent ``Content-Length: 0`` (it would tell the host the resource is empty)."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"HEAD http://127.0.0.1:%d/streamed-head HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
            % (plain_origin.port, plain_origin.port)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"content-length" not in head.lower(), head


# --------------------------------------------------------------------------- connections
async def test_pipelined_requests_on_one_tunnel_answer_in_order(
    fw: Forward, tls_origin: RawOrigin
) -> None:
    bodies = [rpc("tools/call", {"name": "x", "arguments": {"n": i}}, rid=i) for i in range(4)]
    reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}")
    try:
        writer.write(
            b"".join(
                b"POST /echo?case=pipe-%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                % (i, tls_origin.port, len(b), b)
                for i, b in enumerate(bodies)
            )
        )
        got = [await read_response(reader) for _ in bodies]
    finally:
        writer.close()
    assert [b for _, b in got] == [rpc_result(b) for b in bodies]
    for i, b in enumerate(bodies):
        (ex,) = wait_exchanges(fw, f"case=pipe-{i}")
        assert bytes(frames_of(fw, ex["id"])[0]["raw"]) == b


async def test_host_reconnecting_per_call_reuses_one_upstream_connection(
    fw: Forward, tls_files: TLSFiles
) -> None:
    """A host that opens a tunnel per call (the Python SDK of the 2025-11-25 era does) costs
    the upstream one connection: the proxy's pool is shared by the host's connections."""
    with raw_origin(origin_context(tls_files)) as origin:
        for i in range(5):
            async with fw.http_client() as client:  # a new client: a new tunnel, a new TLS
                r = await client.post(f"{origin.origin}/echo?case=reuse-{i}", content=b"{}")
            assert r.status_code == 200 and r.content == rpc_result(b"{}")
        assert len(origin.requests) == 5
        assert origin.connections <= 2, origin.connections


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_finished_raw_tunnels_leave_no_descriptors(fw: Forward) -> None:
    """A CONNECT tunnel that carries neither TLS nor HTTP is piped; once both ends have
    closed, the proxy holds nothing of it (each left-over tunnel would be two descriptors,
    for the proxy's whole life)."""

    async def echo_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    before = open_descriptors(fw.proc.pid)
    try:
        for i in range(10):
            reader, writer, head = await connect_tunnel(fw.url, f"127.0.0.1:{port}")
            assert head.startswith(b"HTTP/1.1 200")
            writer.write(b"\x00raw-%d" % i)
            assert await asyncio.wait_for(reader.read(100), 10) == b"\x00raw-%d" % i
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
    # The tunnels' descriptors are closed once the proxy saw both ends go.
    assert await until(lambda: open_descriptors(fw.proc.pid) - before < 10, 10), (
        before,
        open_descriptors(fw.proc.pid),
    )


async def test_closed_host_connections_leave_no_descriptors(
    fw: Forward, tls_origin: RawOrigin, tls_files: TLSFiles
) -> None:
    """Every other way a host connection ends — an intercepted tunnel after its request, a
    refused handshake, a malformed CONNECT, a tunnel closed before its first byte — leaves
    nothing open in the proxy but its pooled upstream connection."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    # Once first: the upstream pool's connection to this origin exists before counting.
    reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}")
    writer.write(b"POST /echo?case=fd HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    await read_response(reader)
    writer.close()
    await asyncio.sleep(0.3)
    before = open_descriptors(fw.proc.pid)
    for i in range(5):
        reader, writer = await tls_tunnel(fw, f"127.0.0.1:{tls_origin.port}")
        writer.write(
            b"POST /echo?case=fd-%d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" % i
        )
        assert (await read_response(reader))[1] == rpc_result(b"{}")
        writer.close()
        await asyncio.to_thread(refuse_once, fw, f"fd-{i}.test", tls_files)
        r, w = await asyncio.open_connection(host, int(port))
        w.write(b"CONNECT a/b HTTP/1.1\r\n\r\n")
        assert (await read_to_eof(r)).startswith(b"HTTP/1.1 400")
        w.close()
        _, w, _ = await connect_tunnel(fw.url, f"127.0.0.1:{tls_origin.port}")
        w.close()
    assert await until(lambda: open_descriptors(fw.proc.pid) - before < 5, 10), (
        before,
        open_descriptors(fw.proc.pid),
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_other_traffic_is_streamed_without_a_copy(fw: Forward, tls_origin: RawOrigin) -> None:
    """A large download that is not MCP (a package manager through HTTPS_PROXY) passes
    chunk by chunk; the proxy keeps no copy of it (the addon records nothing of it), so its
    peak memory does not grow by the body's size."""
    before = peak_rss_mib(fw.proc.pid)
    size = 0
    async with fw.http_client() as client:
        async with client.stream("GET", f"{tls_origin.origin}/blob?mib=64&case=blob") as resp:
            assert resp.status_code == 200
            async for chunk in resp.aiter_raw():
                size += len(chunk)
    assert size == 64 << 20
    grew = peak_rss_mib(fw.proc.pid) - before
    assert grew < 32, f"the proxy's peak RSS grew {grew:.0f} MiB for a 64 MiB download"


# --------------------------------------------------------------------------- going away
@pytest.mark.parametrize("respond", [0, 1])
async def test_host_closing_mid_event_stream(
    fw: Forward, tls_files: TLSFiles, respond: int
) -> None:
    """Without the response event: host_aborted. With it: complete, and the host's leaving
    noted (the reverse proxy's rule). Either way the upstream connection is let go."""
    body = rpc("tools/call", {"name": "slow", "arguments": {}})
    want = PROGRESS + (ANSWER if respond else b"")
    with raw_origin(origin_context(tls_files)) as origin:
        url = f"{origin.origin}/hold?respond={respond}&case=hold-{respond}"
        got = b""
        async with fw.http_client() as client:
            async with client.stream("POST", url, content=body, headers=JSON_HEADERS) as resp:
                assert resp.status_code == 200
                async for chunk in resp.aiter_raw():
                    got += chunk
                    if len(got) >= len(want):
                        break
        assert got == want
        (ex,) = wait_exchanges(fw, f"case=hold-{respond}")
        assert await asyncio.to_thread(origin.gone.wait, 10), "the upstream was not let go"
    frames = frames_of(fw, ex["id"])
    s2c = [bytes(f["raw"]) for f in frames if f["direction"] == "s2c"]
    if respond:
        assert ex["outcome"] == "complete", ex
        assert ex["meta"].get("host_closed_after_response") is True, ex["meta"]
        assert len(s2c) == 2 and b'"result"' in s2c[1]
    else:
        assert ex["outcome"] == "host_aborted", ex
        assert len(s2c) == 1 and b"notifications/progress" in s2c[0]


async def test_upstream_reset_mid_body(fw: Forward, plain_origin: RawOrigin) -> None:
    """Content-Length 1000, 100 bytes, then a TCP reset: the host's connection closes short of
    the body (never a complete-looking response), and the outcome is upstream_error."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    body = rpc("tools/call", {"name": "x", "arguments": {}})
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST http://127.0.0.1:%d/cut HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
        % (plain_origin.port, plain_origin.port, len(body), body)
    )
    try:
        got = await read_to_eof(reader)
    except ConnectionResetError:
        got = b""
    writer.close()
    head, _, rest = got.partition(b"\r\n\r\n")
    if head:  # the head may have gone out before the reset
        assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 1000" in head
        assert 0 < len(rest) < 1000
    (ex,) = wait_exchanges(fw, f":{plain_origin.port}/cut")
    assert ex["outcome"] == "upstream_error", ex
    assert ex["error"], ex


async def test_websocket_upgrade_in_a_tunnel_gets_501(fw: Forward, plain_origin: RawOrigin) -> None:
    reader, writer, head = await connect_tunnel(fw.url, f"127.0.0.1:{plain_origin.port}")
    assert head.startswith(b"HTTP/1.1 200")
    writer.write(
        b"GET /echo?case=websocket HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n" % plain_origin.port
    )
    got = await read_to_eof(reader)
    writer.close()
    assert got.startswith(b"HTTP/1.1 501 "), got
    assert b"not relayed" in got.partition(b"\r\n\r\n")[2], got  # one clear body
    await asyncio.sleep(0.2)
    assert not [s for s in plain_origin.requests if b"case=websocket" in s.head]


async def test_an_h2c_upgrade_offer_is_dropped_not_refused(
    fw: Forward, plain_origin: RawOrigin
) -> None:
    """``Upgrade: h2c`` (``curl --http2 http://…``) is an offer a server may ignore: the proxy
    drops it with the other hop-by-hop headers and relays HTTP/1.1, as the mitmproxy engine
    does (its DisableH2C) — it is no WebSocket to refuse."""
    host, port = fw.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"GET http://127.0.0.1:%d/echo?case=h2c HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
            % (plain_origin.port, plain_origin.port)
        )
        rhead, rbody = await read_response(reader)
    finally:
        writer.close()
    assert rhead.startswith(b"HTTP/1.1 200") and rbody == rpc_result(b""), rhead + rbody
    (seen,) = [s for s in plain_origin.requests if b"case=h2c" in s.head]
    assert seen.header("upgrade") is None and seen.header("http2-settings") is None, seen.head


# --------------------------------------------------------------------------- --engine
def run_record(*args: str, conf: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPTAPE_MITMPROXY_CONFDIR": str(conf)}
    env.pop("MCPTAPE_FORWARD_ENGINE", None)
    return subprocess.run(
        [str(MCPTAPE), "record", *args], capture_output=True, text=True, env=env, timeout=60
    )


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_engine_lean_with_an_option_only_mitmproxy_has(tmp_path: Path) -> None:
    conf = tmp_path / "mitm"
    conf.mkdir()
    for option, value in (("proxyauth", "user:secret"), ("connection_strategy", "eager")):
        (conf / "config.yaml").write_text(f"{option}: {value}\n")
        r = run_record(
            "--forward",
            "--engine",
            "lean",
            "--port",
            "0",
            "--db",
            str(tmp_path / "x.db"),
            conf=conf,
        )
        line = one_line(r)
        assert r.returncode == 2, (r.returncode, line)
        assert option in line and "--engine mitmproxy" in line, line
        assert "secret" not in line


def test_engine_bogus_and_engine_without_forward(tmp_path: Path) -> None:
    r = run_record(
        "--forward",
        "--engine",
        "bogus",
        "--port",
        "0",
        "--db",
        str(tmp_path / "x.db"),
        conf=tmp_path / "mitm",
    )
    line = one_line(r)
    assert r.returncode == 2 and "bogus" in line and "lean or mitmproxy" in line, line
    r = run_record("--engine", "lean", "--db", str(tmp_path / "x.db"), conf=tmp_path / "mitm")
    line = one_line(r)
    assert r.returncode == 2 and "--forward" in line, line


def test_listening_beyond_loopback_says_so(tmp_path: Path, confdir: Path) -> None:
    """``--host 0.0.0.0``: other machines can use the proxy (and have their traffic recorded):
    one warning line, as ``record --upstream`` prints (mitmproxy's engine goes further and
    refuses public clients, its ``block_global``)."""
    with run_forward(tmp_path / "wide.db", confdir, "--host", "0.0.0.0") as wide:
        assert wide.url.startswith("http://0.0.0.0:")
        time.sleep(0.3)
        said = list(wide.stderr)
    assert [ln for ln in said if "warning" in ln and "other machines" in ln], "\n".join(said)


async def test_stopping_with_streams_open_finishes_the_recording(
    tmp_path: Path, confdir: Path, tls_files: TLSFiles
) -> None:
    """SIGINT with two event streams through the proxy: one whose host still reads (the proxy
    gives it its grace, then closes it) and one whose host has just left. The proxy exits 0 and
    both exchanges are in the database, ended, with the event that had passed — the addon's
    last work (scheduled by its error hook) is not cut off by the addon's and recorder's close."""
    body = rpc("tools/call", {"name": "slow", "arguments": {}})
    event = PROGRESS.split(b"data: ")[1].strip()

    async def first_event(resp: httpx2.Response) -> AsyncIterator[bytes]:
        chunks = resp.aiter_raw()
        got = b""
        while len(got) < len(PROGRESS):
            got += await chunks.__anext__()
        assert got == PROGRESS
        return chunks

    with (
        raw_origin(origin_context(tls_files)) as origin,
        run_forward(tmp_path / "stop.db", confdir) as own,
    ):
        async with own.http_client() as reading, own.http_client() as leaving:
            url = f"{origin.origin}/hold?respond=0"
            async with reading.stream(
                "POST", f"{url}&case=stop-reading", content=body, headers=JSON_HEADERS
            ) as held:
                chunks = await first_event(held)
                async with leaving.stream(
                    "POST", f"{url}&case=stop-left", content=body, headers=JSON_HEADERS
                ) as left:
                    await first_event(left)
                # `left` is closed unread: its host left. Now Ctrl-C.
                began = time.monotonic()
                code = await asyncio.to_thread(own.stop)
                took = time.monotonic() - began
                rest = b""
                with contextlib.suppress(httpx2.HTTPError):
                    async for chunk in chunks:  # the proxy closed it: nothing more came
                        rest += chunk
                assert rest == b""
        assert code == 0, own.stderr[-5:]
        assert took < 15, took
    assert not [ln for ln in own.stderr if "recording gap" in ln], own.stderr[-5:]
    for case in ("stop-reading", "stop-left"):
        (ex,) = [e for e in own.exchanges() if f"case={case}" in e["url"]]
        assert ex["ended_at"] is not None and ex["outcome"] is not None, (case, ex)
        frames = frames_of(own, ex["id"])
        assert [bytes(f["raw"]) for f in frames] == [body, event], case


def test_stopping_just_after_a_host_left_finishes_its_exchange(
    tmp_path: Path, confdir: Path, tls_files: TLSFiles
) -> None:
    """A host leaves an event stream and Ctrl-C follows at once (a user closing the client,
    then the proxy): the exchange is ended in the database, not left open by a recorder that
    closed before the addon's last work (scheduled by its error hook) ran."""
    body = rpc("tools/call", {"name": "slow", "arguments": {}})
    with (
        raw_origin(origin_context(tls_files)) as origin,
        run_forward(tmp_path / "left.db", confdir) as own,
    ):
        host, port = own.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % origin.port)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        tls = own.ssl_context().wrap_socket(sock, server_hostname="127.0.0.1")
        tls.sendall(
            b"POST /hold?respond=0&case=left HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (origin.port, len(body), body)
        )
        got = b""
        while PROGRESS not in got:
            got += tls.recv(4096)
        tls.close()  # the host leaves…
        code = own.stop()  # …and the proxy is stopped at once
        assert code == 0
    assert not [ln for ln in own.stderr if "recording gap" in ln], own.stderr[-5:]
    (ex,) = [e for e in own.exchanges() if "case=left" in e["url"]]
    assert ex["ended_at"] is not None and ex["outcome"] == "host_aborted", ex


def test_the_cas_private_key_is_not_copied_out_of_the_confdir(
    tmp_path: Path, confdir: Path
) -> None:
    """Every host-facing certificate is signed with, and keyed by, the CA's private key: a
    copy written to the temporary directory outlives a crash (SIGKILL, OOM) of the proxy, in
    a place no one looks. The key stays in mitmproxy's confdir only."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with run_forward(tmp_path / "key.db", confdir, env={"TMPDIR": str(tmp)}) as own:
        own.proc.kill()  # a crash: no cleanup runs
        own.proc.wait(10)
        own.returncode = own.proc.returncode
    keys = [p for p in tmp.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    assert not keys, keys


async def test_an_ipv6_target_is_recorded_with_a_bracketed_url(fw: Forward) -> None:
    """Found by tests/fuzz/test_forward_fuzz.py: an absolute-form request to ``[::1]`` made the
    addon raise (mitmproxy joins an IPv6 host and its port without brackets: ``http://::1:1/``),
    and a traceback reached the user's terminal. Nothing listens on port 1: the proxy's 502.
    (httpx writes the target without brackets, ``http://::1:1/mcp``; the proxy takes it.)"""
    rpc_body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    tag = f"v6-{time.monotonic_ns()}"
    async with httpx2.AsyncClient(proxy=fw.url, trust_env=False, timeout=30) as client:
        r = await client.post(f"http://[::1]:1/mcp?{tag}", content=rpc_body, headers=JSON_HEADERS)
    assert r.status_code == 502
    (ex,) = wait_exchanges(fw, tag)
    assert ex["url"] == f"http://[::1]:1/mcp?{tag}" and ex["outcome"] == "upstream_error"
    assert [bytes(f["raw"]) for f in frames_of(fw, ex["id"])] == [rpc_body]
    assert not [ln for ln in fw.stderr if "Traceback" in ln]


async def test_past_the_host_connection_cap_connect_gets_503(
    tmp_path: Path, confdir: Path, plain_origin: RawOrigin
) -> None:
    """``MCPTAPE_MAX_HOST_CONNECTIONS=1`` (the start-up override of ``MAX_HOST_CONNECTIONS``):
    with one host connection being served, a new ``CONNECT`` is answered 503 (counted, one
    stderr line) and the connection served is untouched. Before the cap the engine took every
    connection a host opened."""
    env = {"MCPTAPE_MAX_HOST_CONNECTIONS": "1"}
    with run_forward(tmp_path / "cap.db", confdir, env=env) as capped:
        body = rpc("tools/call", {"name": "x", "arguments": {"cap": 1}})
        request = (
            b"POST /echo?case=cap HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (plain_origin.port, len(body), body)
        )
        authority = f"127.0.0.1:{plain_origin.port}"
        reader, writer, head = await connect_tunnel(capped.url, authority)
        try:
            assert head.startswith(b"HTTP/1.1 200"), head
            writer.write(request)
            rhead, _ = await read_response(reader)
            assert rhead.startswith(b"HTTP/1.1 200")
            r2, w2, head2 = await connect_tunnel(capped.url, authority)
            rest = await read_to_eof(r2)
            w2.close()
            assert head2.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), head2
            assert b"X-Mcptape-Error: too-many-connections\r\n" in head2
            assert b"too many host connections" in rest
            writer.write(request)  # the connection served is still served
            rhead, _ = await read_response(reader)
            assert rhead.startswith(b"HTTP/1.1 200")
        finally:
            writer.close()
        assert await until(lambda: any("host connections open" in ln for ln in capped.stderr))
        said = [ln for ln in capped.stderr if "host connections open" in ln]
        assert len(said) == 1 and "forward proxy: 1 host connections open" in said[0], said


async def test_a_connection_yet_to_send_its_proxy_request_counts_toward_the_cap(
    tmp_path: Path, confdir: Path
) -> None:
    """With ``MCPTAPE_MAX_HOST_CONNECTIONS=1``, a host connection that has not sent its
    ``CONNECT`` yet holds the one place: the next connection is answered 503 at once (before
    the cap counted only connections the HTTP server served, so connections that never spoke
    — each held up to ``ENTRY_IDLE`` — were taken without end)."""
    env = {"MCPTAPE_MAX_HOST_CONNECTIONS": "1"}
    with run_forward(tmp_path / "cap-idle.db", confdir, env=env) as capped:
        host, port = capped.url.removeprefix("http://").rsplit(":", 1)
        _, silent = await asyncio.open_connection(host, int(port))
        try:
            r2, w2, head2 = await connect_tunnel(capped.url, "127.0.0.1:9")
            rest = await read_to_eof(r2)
            w2.close()
        finally:
            silent.close()
        assert head2.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), head2
        assert b"too many host connections" in rest
        assert await until(lambda: any("host connections open" in ln for ln in capped.stderr))
