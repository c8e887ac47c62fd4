"""The host connection: its keep-alive timer (an idle connection closes after ``KEEPALIVE_IDLE``
counted from its last response, not from its first; one timer per connection, moved on lazily)
and the request fields its parser picks out of the head in one pass."""

from __future__ import annotations

import asyncio
import time

import pytest

from mcp_proxy.relay.http import front
from mcp_proxy.relay.http.front import FrontRequest, FrontServer, RelayResponse, ignore

pytestmark = pytest.mark.timeout(20)

IDLE = 0.4


async def _ok(req: FrontRequest) -> RelayResponse:
    await req.content.read()
    return RelayResponse(status=200, body=b"ok")


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert await reader.readexactly(2) == b"ok"


def test_an_idle_connection_closes_after_the_idle_time_from_its_last_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front, "KEEPALIVE_IDLE", IDLE)

    async def main() -> tuple[float, float]:
        server = FrontServer(_ok, ignore)
        port = await server.listen("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = time.monotonic()
        # Requests for longer than the idle time: the connection stays open throughout.
        last = t0
        while last - t0 < IDLE * 2:
            await _call(reader, writer)
            last = time.monotonic()
            await asyncio.sleep(IDLE / 8)
        assert await reader.read() == b""  # then it idles, and the relay closes it
        closed = time.monotonic()
        writer.close()
        await server.close(grace=1)
        return closed - t0, closed - last

    since_first, since_last = asyncio.run(main())
    assert since_first >= IDLE * 2.5
    assert since_last >= IDLE * 0.9


def test_the_head_pass_picks_out_host_content_type_and_encoding() -> None:
    """What the relay asks of every request comes from the parser's one pass over the head
    (first value wins, any case); a second ``Host`` is refused with 400."""
    seen: list[tuple[str | None, str | None, str | None]] = []

    async def handler(req: FrontRequest) -> RelayResponse:
        await req.content.read()
        seen.append((req.host, req.content_type, req.content_encoding))
        return RelayResponse(status=200, body=b"ok")

    async def main() -> bytes:
        server = FrontServer(handler, ignore)
        port = await server.listen("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /mcp HTTP/1.1\r\nhOsT: h.test\r\nCONTENT-TYPE: a/b\r\nContent-Type: c/d\r\n"
            b"content-encoding: gzip\r\nContent-Length: 0\r\n\r\n"
        )
        await reader.readuntil(b"ok")
        writer.write(b"GET /mcp HTTP/1.1\r\nHost: h.test\r\n\r\n")
        await reader.readuntil(b"ok")
        writer.write(b"GET /mcp HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        refused = await reader.read()
        writer.close()
        await server.close(grace=1)
        return refused

    refused = asyncio.run(main())
    assert seen == [("h.test", "a/b", "gzip"), ("h.test", None, None)]
    assert refused.startswith(b"HTTP/1.1 400")
