"""Bad input and faults through the forward proxy: what the host sees and what is recorded.

One real proxy shared with the other modules that filter by URL (``shared_fw``); each case
looks only at its own exchanges once the recorder has written them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.forward.conftest import Forward, TLSServer, frames_of, wait_exchanges
from tests.helpers.watch import QUIET
from tests.relay.conftest import MCPTAPE

pytestmark = pytest.mark.timeout(120)

RPC = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}'
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def fw(shared_fw: Forward) -> Forward:
    """The session's shared proxy: each case looks only at its own exchanges (by URL)."""
    return shared_fw


async def test_large_response_passes_whole(fw: Forward, tls_stateful: TLSServer) -> None:
    origin = tls_stateful.url.rsplit("/", 1)[0]
    client, _ = fw.tee_client()
    async with client:
        r = await client.post(f"{origin}/big?mib=12", content=RPC, headers=HEADERS)
    assert r.status_code == 200 and len(r.content) == 12 << 20
    (ex,) = wait_exchanges(fw, "/big?mib=12")
    assert ex["outcome"] == "complete" and ex["response_size"] == 12 << 20
    (req, resp) = frames_of(fw, ex["id"])
    assert bytes(req["raw"]) == RPC
    assert resp["size"] == 12 << 20


async def test_non_utf8_body_recorded_byte_exact(fw: Forward, tls_stateful: TLSServer) -> None:
    origin = tls_stateful.url.rsplit("/", 1)[0]
    client, _ = fw.tee_client()
    async with client:
        r = await client.post(f"{origin}/badutf8", content=RPC, headers=HEADERS)
    assert b"\xff\xfe" in r.content
    (ex,) = wait_exchanges(fw, "/badutf8")
    frames = frames_of(fw, ex["id"])
    assert bytes(frames[-1]["raw"]) == r.content


async def test_reset_mid_stream(fw: Forward, tls_stateful: TLSServer) -> None:
    """The upstream dies mid-event: the host sees a broken stream; what came is recorded."""
    origin = tls_stateful.url.rsplit("/", 1)[0]
    client, _ = fw.tee_client()
    got = b""
    async with client:
        with pytest.raises(Exception):  # noqa: B017 - httpx2's read error, whatever its class
            async with client.stream(
                "POST", f"{origin}/reset", content=RPC, headers=HEADERS
            ) as resp:
                async for chunk in resp.aiter_raw():
                    got += chunk
    assert b"notifications/progress" in got
    (ex,) = wait_exchanges(fw, "/reset")
    assert ex["outcome"] == "upstream_error", ex
    frames = frames_of(fw, ex["id"])
    progress = [f for f in frames if f["method"] == "notifications/progress"]
    assert len(progress) == 1 and progress[0]["complete"]
    cut = [f for f in frames if f["direction"] == "s2c" and not f["complete"]]
    assert cut and bytes(cut[0]["raw"]).startswith(b'{"jsonrpc":"2.0","id":1,')


async def test_upstream_down(fw: Forward) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client, _ = fw.tee_client()
    async with client:
        r = await client.post(f"https://127.0.0.1:{port}/mcp", content=RPC, headers=HEADERS)
    assert r.status_code == 502
    (ex,) = wait_exchanges(fw, f":{port}/mcp")
    assert ex["outcome"] == "upstream_error" and ex["status"] == 502
    assert ex["meta"]["synthesized"]["by"] == "mcptape"  # the lean engine answered


@pytest.fixture(scope="module")
def untrusted_server() -> Iterator[int]:
    """A TLS server whose certificate no one here trusts."""
    other = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    other.issue_cert("127.0.0.1").configure_cert(ctx)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(2)
                with ctx.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()
    t.join(2)


async def test_upstream_tls_failure_is_a_finding(fw: Forward, untrusted_server: int) -> None:
    client, _ = fw.tee_client()
    url = f"https://127.0.0.1:{untrusted_server}/mcp"
    async with client:
        r = await client.post(url, content=RPC, headers=HEADERS)
    assert r.status_code == 502
    (ex,) = wait_exchanges(fw, f":{untrusted_server}/mcp")
    assert ex["outcome"] == "upstream_error"
    assert "certificate" in (ex["error"] or "").lower(), ex["error"]
    deadline = time.monotonic() + 10
    rows: list[Any] = []
    while time.monotonic() < deadline and not rows:
        rows = fw.query(
            "SELECT * FROM findings WHERE session_id = ? AND code = 'forward.upstream_tls'",
            ex["session_id"],
        )
        await asyncio.sleep(0.1)
    assert rows and "certificate" in rows[0]["detail"].lower()


async def test_other_traffic_untouched_and_unrecorded(
    fw: Forward, tls_stateless: TLSServer
) -> None:
    # The stateless server's origin: test_sdk.py's MCP calls to /timed on the stateful one make
    # that endpoint known to speak MCP to the shared proxy (a GET there is then recorded, by
    # design), and they run first when test_sdk.py is collected before this module.
    origin = tls_stateless.url.rsplit("/", 1)[0]
    client, _ = fw.tee_client()
    async with client:
        # No MCP marker at all (an event stream not asked for as one, a 404): not ours.
        r = await client.get(f"{origin}/timed?n=2&gap=0&probe=untouched")
        r404 = await client.get(f"{origin}/nothing-here")
    assert r.content.count(b"notifications/message") == 2 and r404.status_code == 404
    await asyncio.sleep(QUIET)  # a negative check: they would have been recorded by now
    mine = [e for e in fw.exchanges() if "probe=untouched" in e["url"] or "nothing" in e["url"]]
    assert not mine


async def test_connect_to_a_non_http_port_is_relayed_untouched(fw: Forward) -> None:
    """A CONNECT tunnel to a plain TCP echo service: bytes pass, nothing is recorded."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def echo() -> None:
        conn, _ = srv.accept()
        with conn:
            data = conn.recv(100)
            conn.sendall(b"220 " + data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    host, pport = fw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(pport))
    writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    # The client speaks first (the proxy dials upstream lazily, once it has seen the first
    # bytes: a server-speaks-first protocol needs connection_strategy=eager in config.yaml).
    writer.write(b"\x00\x01PING\r\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.readuntil(b"\r\n"), 10) == b"220 \x00\x01PING\r\n"
    writer.close()
    t.join(5)
    srv.close()
    assert not [e for e in fw.exchanges() if f":{port}" in e["url"]]


# --------------------------------------------------------------------------- start-up errors
def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    full = {**os.environ, **env}
    return subprocess.run(
        [str(MCPTAPE), "record", *args], capture_output=True, text=True, env=full, timeout=60
    )


def test_unusable_ca_is_one_clear_line(tmp_path: Path) -> None:
    conf = tmp_path / "mitm"
    conf.mkdir()
    (conf / "mitmproxy-ca.pem").write_text("not a certificate\n")
    r = run_cli(
        "--forward",
        "--port",
        "0",
        "--db",
        str(tmp_path / "x.db"),
        env={"MCPTAPE_MITMPROXY_CONFDIR": str(conf)},
    )
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "mitmproxy-ca.pem" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    notdir = tmp_path / "file"
    notdir.write_text("x")
    r = run_cli(
        "--forward",
        "--port",
        "0",
        "--db",
        str(tmp_path / "x.db"),
        env={"MCPTAPE_MITMPROXY_CONFDIR": str(notdir)},
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_option_of_an_addon_not_loaded_is_one_clear_line(tmp_path: Path) -> None:
    """record --forward loads no traffic-changing addon: their options in config.yaml are
    refused in one line (mitmproxy would otherwise defer and silently ignore them)."""
    conf = tmp_path / "mitm"
    conf.mkdir()
    (conf / "config.yaml").write_text("modify_headers: ['/~q/X-Added/1']\n")
    r = run_cli(
        "--forward",
        "--port",
        "0",
        "--db",
        str(tmp_path / "x.db"),
        env={"MCPTAPE_MITMPROXY_CONFDIR": str(conf)},
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "modify_headers" in lines[0], r.stderr
    assert "mitmdump -s addons/mcptape.py" in lines[0]


def test_mitmproxy_missing_is_one_clear_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['mitmproxy'] = None\n"
        "from mcp_proxy.entry import main\n"
        f"sys.argv = ['mcptape', 'record', '--forward', '--db', {str(tmp_path / 'x.db')!r}]\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "mitmproxy" in r.stderr, r.stderr
    assert "uv add mitmproxy" in r.stderr


def test_stdio_record_does_not_import_mitmproxy(tmp_path: Path) -> None:
    """``mcptape record -- CMD`` starts no slower: mitmproxy is never imported on that path."""
    r = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "mcp_proxy.entry",
            "record",
            "--db",
            str(tmp_path / "x.db"),
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    imported = [ln for ln in r.stderr.splitlines() if ln.startswith("import time:")]
    assert imported, r.stderr[-2000:]
    assert not [ln for ln in imported if "mitmproxy" in ln]
