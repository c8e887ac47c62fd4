"""Upstream TLS session resumption (``mcp_proxy/forward/resume.py``) through the real proxy.

The server here is a small real TLS server (Python's ``ssl``, which issues TLS 1.3 tickets and
accepts them) that notes, per connection, whether the handshake resumed a session: the one
thing the SDK's server cannot tell us. Each request comes on a new host connection, as the
2025-11-25-era SDK client makes them.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.forward.conftest import Forward, TLSFiles, wait_exchanges

BODY = b'{"jsonrpc":"2.0","id":1,"result":{}}'


@dataclass
class ResumeServer:
    url: str
    reused: list[bool] = field(default_factory=list)


@pytest.fixture(scope="module")
def resume_server(tls_files: TLSFiles) -> Iterator[ResumeServer]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(tls_files.chain), str(tls_files.key))
    loop = asyncio.new_event_loop()
    box: dict[str, ResumeServer] = {}
    ready = threading.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = box["server"]
        server.reused.append(bool(writer.get_extra_info("ssl_object").session_reused))
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
            )
            await writer.drain()
            await reader.read()  # until the proxy closes: its close ends the connection
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        port = srv.sockets[0].getsockname()[1]
        box["server"] = ResumeServer(f"https://127.0.0.1:{port}/mcp")
        ready.set()
        async with srv:
            await srv.serve_forever()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    assert ready.wait(30)
    yield box["server"]
    loop.call_soon_threadsafe(loop.stop)


async def test_upstream_tls_sessions_are_resumed_across_host_connections(
    shared_fw: Forward, resume_server: ResumeServer
) -> None:
    statuses = []
    for i in range(3):
        async with shared_fw.http_client() as c:  # a new host connection per request
            r = await c.post(
                resume_server.url,
                content=b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i,
                headers={"Content-Type": "application/json"},
            )
            statuses.append(r.status_code)
            assert r.content == BODY
    assert statuses == [200, 200, 200]
    # The first upstream handshake is full; the next ones resume its (ticketed) session.
    assert resume_server.reused == [False, True, True]
    rows = await asyncio.to_thread(wait_exchanges, shared_fw, resume_server.url, 3)
    assert [r["status"] for r in rows] == [200, 200, 200]
