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
import ssl
from collections.abc import Iterator

import pytest

from tests.forward.conftest import Forward, TLSFiles
from tests.forward.lean_helpers import RawOrigin, connect_tunnel, raw_origin, read_response

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
