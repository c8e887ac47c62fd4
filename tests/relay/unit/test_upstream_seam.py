"""The upstream client's use of aiohttp, pinned and tested: flow control of a streamed body
through ``UpstreamConnection.drain`` (no private ``_drain_helper``) and
``UpstreamResponse.has_buffered_body`` (no private ``StreamReader._buffer``)."""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.relay.http.upstream import UpstreamConnection, UpstreamResponse
from tests.relay.fake_pool import FakeUpstreamPool, ScriptedTransport

pytestmark = pytest.mark.timeout(10)


def test_drain_waits_for_resume_and_fails_when_the_connection_is_lost() -> None:
    async def go() -> None:
        pool = FakeUpstreamPool()
        proto = UpstreamConnection(asyncio.get_running_loop())
        proto.connection_made(ScriptedTransport(pool, proto))
        await proto.drain()  # not paused: returns at once
        proto.pause_writing()
        waiting = asyncio.ensure_future(proto.drain())
        await asyncio.sleep(0)
        assert not waiting.done()
        proto.resume_writing()
        await asyncio.wait_for(waiting, 1)
        proto.pause_writing()
        lost = asyncio.ensure_future(proto.drain())
        await asyncio.sleep(0)
        proto.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(lost, 1)
        with pytest.raises(ConnectionResetError):
            await proto.drain()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("answer", "buffered"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", True),  # body came with the head
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),  # no body: its end is here
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False),  # body still to come
    ],
)
def test_has_buffered_body_reads_only_public_stream_state(answer: bytes, buffered: bool) -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(answer)
        resp = await pool.request(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", None)
        assert isinstance(resp, UpstreamResponse)
        assert resp.has_buffered_body() is buffered
        resp.close()

    asyncio.run(go())
