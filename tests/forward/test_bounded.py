"""Issue #22, "Bounded": the lean forward engine's memory, its upstream pools and its headers,
through a real ``mcptape record --forward``.

- hop-by-hop response headers (those a ``Connection`` names too) never reach the host;
- idle upstream connections are closed, and idle per-origin pools evicted, by a timer
  (``MCPTAPE_FORWARD_UPSTREAM_IDLE`` shortens the idle limit for the test);
- large request and response bodies stream: the proxy's peak RSS stays flat, the bytes arrive
  exact, and what the recording keeps is capped;
- both engines trust the same CA store.

Peak memory is read from ``/proc/<pid>/status`` (``VmHWM``) of a proxy started for the test
(a high-water mark: a shared proxy would carry other tests' peaks).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
import trustme

from mcp_proxy.relay.http.upstream import UpstreamPool
from tests.conftest import matrix
from tests.forward.conftest import Forward, TLSFiles, frames_of, run_forward, wait_exchanges
from tests.forward.lean_helpers import (
    RawOrigin,
    big_json,
    connect_tunnel,
    raw_origin,
    read_response,
)
from tests.helpers.db import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def fw(shared_fw: Forward) -> Forward:
    return shared_fw


@pytest.fixture(scope="module")
def tls_origin(tls_files: TLSFiles) -> Iterator[RawOrigin]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls_files.chain, tls_files.key)
    with raw_origin(ctx) as o:
        yield o


async def test_headers_a_response_connection_names_do_not_reach_the_host(
    fw: Forward, tls_origin: RawOrigin
) -> None:
    """``Connection: close, X-Secret-Hop`` makes ``X-Secret-Hop`` hop-by-hop (RFC 9110
    §7.6.1): the lean engine dropped only the fixed set and forwarded it."""
    reader, writer, head = await connect_tunnel(fw.url, f"127.0.0.1:{tls_origin.port}")
    assert head.startswith(b"HTTP/1.1 200")
    await asyncio.wait_for(writer.start_tls(fw.ssl_context(), server_hostname="127.0.0.1"), 10)
    writer.write(
        b"POST /secret-hop?case=hop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )
    resp_head, body = await read_response(reader)
    writer.close()
    lower = resp_head.lower()
    assert resp_head.startswith(b"HTTP/1.1 200"), resp_head
    assert b"x-kept: 2" in lower
    assert b"x-secret-hop" not in lower, resp_head
    assert b"\r\nconnection:" not in lower
    assert body.startswith(b'{"jsonrpc"')


# --------------------------------------------------------------------------- idle upstreams
def upstream_sockets(pid: int, ports: set[int]) -> int:
    """Established TCP sockets of process ``pid`` whose remote port is one of ``ports``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    n = 0
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            if cols[3] == "01" and remote_port in ports and cols[9] in inodes:
                n += 1
    return n


async def _keepalive_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A keep-alive origin: every request answered with a small JSON body, connection kept."""
    with contextlib.suppress(Exception):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
            )
            await writer.drain()


async def test_idle_upstream_connections_are_closed_by_a_timer(
    tmp_path: Path, confdir: Path
) -> None:
    """20 origins, one call each, then nothing: every upstream socket is closed once the idle
    limit (0.5 s here) has passed. Before, the limit was checked only when a pool was used
    again, so all 20 stayed open for the proxy's life."""
    servers = [await asyncio.start_server(_keepalive_echo, "127.0.0.1", 0) for _ in range(20)]
    ports = {s.sockets[0].getsockname()[1] for s in servers}
    env = {"MCPTAPE_FORWARD_UPSTREAM_IDLE": "0.5"}
    try:
        with run_forward(tmp_path / "idle.db", confdir, env=env) as proxy:
            pid = proxy.proc.pid
            async with httpx2.AsyncClient(proxy=proxy.url, trust_env=False) as client:
                for port in sorted(ports):
                    r = await client.post(f"http://127.0.0.1:{port}/x?case=idle", content=b"{}")
                    assert r.status_code == 200 and r.content == b"{}"
                # Still open right after (each pool kept its connection for reuse)…
                assert upstream_sockets(pid, ports) > 0
                # …and all closed once idle past the limit, with no further request.
                closed = await asyncio.to_thread(
                    wait_until, lambda: upstream_sockets(pid, ports) == 0, 15.0
                )
                assert closed, f"{upstream_sockets(pid, ports)} upstream sockets still open"
                # A pool dropped for idleness is made again on the next call.
                r = await client.post(f"http://127.0.0.1:{min(ports)}/x?case=idle", content=b"{}")
                assert r.status_code == 200
    finally:
        for s in servers:
            s.close()


# --------------------------------------------------------------------------- large bodies
BIG_MIB = 256


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def warm_up(client: httpx2.AsyncClient, origin: RawOrigin) -> None:
    """One small MCP call first: the proxy's imports and pools are in place before measuring."""
    body = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
    r = await client.post(f"{origin.origin}/echo?case=warm", content=body)
    assert r.status_code == 200


# --full only (both framings): the default run keeps one bounded-memory test per door, and the
# forward door's is the 512 MiB answer below (stdio's: test_record_stdio's 64 MiB message; the
# reverse relay's: tests/relay/test_bombs.py). A large upload's memory is checked under --full.
@pytest.mark.parametrize("framing", matrix(["chunked", "length"], keep=set()))
async def test_a_large_upload_streams_through_with_flat_memory(
    tmp_path: Path, confdir: Path, framing: str
) -> None:
    """A 256 MiB MCP request body (streamed from a generator by the host) reaches the upstream
    byte-exact while the proxy's peak RSS stays flat; the recording keeps its first
    MAX_RECORDED_BODY bytes, marked cut. Before, the lean engine read the whole body (and a
    chunked one was copied again to re-frame it): a 2 GiB upload went past 3 GiB."""
    piece = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":"' + b"x" * (1 << 20))[
        : 1 << 20
    ]
    h = hashlib.sha256()
    for _ in range(BIG_MIB):
        h.update(piece)
    want = {"size": BIG_MIB << 20, "sha256": h.hexdigest()}

    async def body() -> AsyncIterator[bytes]:
        for _ in range(BIG_MIB):
            yield piece

    headers = {"Content-Type": "application/json"}
    if framing == "length":
        headers["Content-Length"] = str(BIG_MIB << 20)
    with raw_origin() as origin, run_forward(tmp_path / "up.db", confdir) as proxy:
        async with httpx2.AsyncClient(proxy=proxy.url, trust_env=False, timeout=120) as client:
            await warm_up(client, origin)
            before = peak_rss_mib(proxy.proc.pid)
            r = await client.post(
                f"{origin.origin}/sink?case=upload-{framing}", content=body(), headers=headers
            )
            assert r.status_code == 200
            assert r.json() == want
            grew = peak_rss_mib(proxy.proc.pid) - before
        assert grew < 200, f"the proxy's peak RSS grew {grew:.0f} MiB for a {BIG_MIB} MiB upload"
        rows = wait_exchanges(proxy, f"upload-{framing}")
        assert rows[0]["request_size"] == BIG_MIB << 20


async def test_a_large_chunked_json_response_streams_with_flat_memory(
    tmp_path: Path, confdir: Path
) -> None:
    """A 512 MiB ``application/json`` MCP answer without a Content-Length reaches the host
    byte-exact while the proxy's peak RSS stays flat; the recording keeps its first
    MAX_RECORDED_BODY bytes, marked cut. Before, the lean engine held the whole body for the
    addon (a 1 GiB answer took it past 3 GiB; this one: +530 MiB). What is left is the
    recording of the 64 MiB it keeps: measured +128 to +257 MiB (the kept bytes, joined once
    for the addon, joined and sliced again by the recorder client when its pipe is full)."""
    h = hashlib.sha256()
    size = 0
    for part in big_json(2 * BIG_MIB):
        h.update(part)
        size += len(part)
    want = h.hexdigest()
    with raw_origin() as origin, run_forward(tmp_path / "down.db", confdir) as proxy:
        async with httpx2.AsyncClient(proxy=proxy.url, trust_env=False, timeout=120) as client:
            await warm_up(client, origin)
            before = peak_rss_mib(proxy.proc.pid)
            got = hashlib.sha256()
            n = 0
            call = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}'
            url = f"{origin.origin}/big-json?mib={2 * BIG_MIB}&case=down"
            async with client.stream("POST", url, content=call) as resp:
                assert resp.status_code == 200
                assert "content-length" not in resp.headers
                async for chunk in resp.aiter_raw():
                    got.update(chunk)
                    n += len(chunk)
            grew = peak_rss_mib(proxy.proc.pid) - before
        assert (n, got.hexdigest()) == (size, want)
        assert grew < 320, f"the proxy's peak RSS grew {grew:.0f} MiB for {2 * BIG_MIB} MiB"
        rows = wait_exchanges(proxy, "case=down")
        assert rows[0]["response_size"] == size


# --------------------------------------------------------------------------- upstream trust
@pytest.fixture(scope="module")
def own_confdir(private_dir: Path) -> Path:
    """A confdir of the module's own: its config.yaml is rewritten per case."""
    d = private_dir / "mitm-trust"
    d.mkdir()
    return d


async def _status_through(proxy: Forward, origin: RawOrigin, case: str) -> int:
    async with proxy.http_client() as client:
        r = await client.post(f"{origin.origin}/echo?case={case}", content=b"{}")
        return r.status_code


@pytest.mark.parametrize("engine", ["lean", "mitmproxy"])
async def test_both_engines_trust_certifi_or_the_configured_ca_only(
    tmp_path: Path, own_confdir: Path, tls_files: TLSFiles, tls_origin: RawOrigin, engine: str
) -> None:
    """One rule (mitmproxy's): certifi's bundle, replaced by ``ssl_verify_upstream_trusted_ca``
    when set. An upstream signed by a CA that only ``SSL_CERT_FILE`` (the system store's
    override) names is refused by both engines; before, the lean engine trusted the system
    store (plus the configured CA) and let it through while mitmproxy refused it."""
    env = {"SSL_CERT_FILE": str(tls_files.ca_pem), "SSL_CERT_DIR": str(tmp_path)}
    (own_confdir / "config.yaml").write_text("{}\n")
    with run_forward(tmp_path / "t.db", own_confdir, "--engine", engine, env=env) as proxy:
        assert await _status_through(proxy, tls_origin, f"trust-none-{engine}") == 502
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    # The configured CA replaces the default: SSL_CERT_FILE's CA is still not trusted.
    (own_confdir / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {other}\n")
    with run_forward(tmp_path / "t2.db", own_confdir, "--engine", engine, env=env) as proxy:
        assert await _status_through(proxy, tls_origin, f"trust-other-{engine}") == 502
    assert not [line for line in proxy.stderr if "NOT verified" in line]


@pytest.mark.parametrize("engine", ["lean", "mitmproxy"])
async def test_ssl_insecure_is_said_loudly_by_both_engines(
    tmp_path: Path, own_confdir: Path, tls_origin: RawOrigin, engine: str
) -> None:
    (own_confdir / "config.yaml").write_text("ssl_insecure: true\n")
    with run_forward(tmp_path / "i.db", own_confdir, "--engine", engine) as proxy:
        assert await _status_through(proxy, tls_origin, f"insecure-{engine}") == 200
        warned = [line for line in proxy.stderr if "NOT verified" in line]
    assert len(warned) == 1 and warned[0].startswith("mcptape: WARNING:"), proxy.stderr


async def test_a_pool_keeps_at_most_max_idle_connections_and_sweeps_them() -> None:
    """``UpstreamPool``: a burst of parallel calls leaves at most ``max_idle`` connections idle
    (the oldest closed first); ``sweep`` closes those idle past ``keepalive``."""
    accepted: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await _keepalive_echo(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool("127.0.0.1", port, tls=False, keepalive=3600, max_idle=2)
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
    try:
        resps = await asyncio.gather(*(pool.request(head, b"{}") for _ in range(4)))
        for r in resps:
            assert await r.read() == b"{}"
            r.release()
        assert len(accepted) == 4
        assert pool.idle_count == 2
        assert pool.sweep() == 0  # none idle past an hour
        pool.keepalive = 0.0
        assert pool.sweep() == 2 and pool.idle_count == 0
    finally:
        await pool.close()
        server.close()


async def test_a_streamed_request_to_a_down_upstream_is_recorded_with_its_body(
    fw: Forward,
) -> None:
    """A chunked MCP request whose upstream is down: the host gets the 502 and the exchange is
    recorded as MCP, with the body the host sent (read aside briefly, as the reverse relay
    does), although nothing of it went upstream."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    call = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}'

    async def body() -> AsyncIterator[bytes]:
        yield call[:20]
        yield call[20:]

    async with httpx2.AsyncClient(proxy=fw.url, trust_env=False, timeout=30) as client:
        r = await client.post(
            f"http://127.0.0.1:{port}/mcp?case=down-streamed",
            content=body(),
            headers={"Content-Type": "application/json"},
        )
    assert r.status_code == 502
    (ex,) = wait_exchanges(fw, "case=down-streamed")
    assert ex["outcome"] == "upstream_error"
    frames = frames_of(fw, ex["id"])
    assert [f["direction"] for f in frames] == ["c2s"]
    assert frames[0]["method"] == "tools/call"
