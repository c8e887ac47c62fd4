"""The upstream client's own protocol (llhttp through httptools): flow control both ways,
``has_buffered_body``, and every way a response can end or break, each raising the aiohttp
public error the response paths catch."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from mcp_proxy.limits import UPSTREAM_BODY_HIGH, UPSTREAM_MAX_HEAD
from mcp_proxy.relay.http.upstream import (
    UpstreamConnection,
    UpstreamProtocolError,
    UpstreamResponse,
)
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


GET = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"


def _pieces(*pieces: bytes) -> list[tuple[float, bytes]]:
    return [(0.0, p) for p in pieces]


async def _request(pool: FakeUpstreamPool) -> UpstreamResponse:
    resp = await asyncio.wait_for(pool.request(GET, None), 2)
    assert isinstance(resp, UpstreamResponse)
    return resp


def _drop(pool: FakeUpstreamPool) -> None:
    """The upstream closes the connection (as a peer would: connection_lost follows)."""
    for proto in pool.live:
        assert proto.transport is not None
        proto.transport.close()


def test_interim_answers_are_skipped_and_headers_read_case_insensitively() -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Made It\r\ncontent-TYPE: a/b\r\n"
            b"Content-Type: c/d\r\nContent-Length: 3\r\n\r\nabc"
        )
        resp = await _request(pool)
        assert (resp.status, resp.reason) == (201, "Made It")
        assert resp.headers.get("Content-Type") == "a/b"  # the first value wins
        assert resp.headers.get("X-None", "d") == "d"
        assert resp.content_length == 3
        assert await resp.read() == b"abc"
        resp.release()
        assert pool.idle_count == 1

    asyncio.run(go())


def test_a_body_without_length_ends_with_the_connection_and_is_not_kept() -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(_pieces(b"HTTP/1.1 200 OK\r\n\r\nsome", b" more"))
        resp = await _request(pool)
        assert await resp.content.readany() == b"some"
        assert await resp.content.readany() == b" more"
        _drop(pool)
        assert await resp.content.readany() == b""
        assert resp.content.at_eof()
        resp.release()
        assert pool.idle_count == 0

    asyncio.run(go())


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    ],
)
def test_a_framed_body_cut_by_the_connection_is_a_payload_error(head: bytes) -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(
            _pieces(head + (b"4\r\nabcd\r\n" if b"chunked" in head else b"abcd"))
        )
        resp = await _request(pool)
        assert await resp.content.readany() == b"abcd"
        _drop(pool)
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
        resp.close()

    asyncio.run(go())


def test_a_connection_lost_before_the_head_is_server_disconnected() -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(_pieces(b"HTTP/1.1 200"))
        pending = asyncio.ensure_future(pool.request(GET, None))
        await asyncio.sleep(0.01)
        _drop(pool)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await asyncio.wait_for(pending, 2)

    asyncio.run(go())


@pytest.mark.parametrize(
    "answer",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * (UPSTREAM_MAX_HEAD + 10),
    ],
)
def test_a_response_llhttp_refuses_or_a_head_too_large_is_a_protocol_error(answer: bytes) -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(answer)
        with pytest.raises(UpstreamProtocolError):
            await asyncio.wait_for(pool.request(GET, None), 2)
        assert pool.idle_count == 0

    asyncio.run(go())


def test_a_large_body_pauses_reading_until_half_of_it_is_taken() -> None:
    async def go() -> None:
        chunk = b"x" * (UPSTREAM_BODY_HIGH // 4)
        n = 8
        pool = FakeUpstreamPool(
            _pieces(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(chunk) * n))
            + [(0.01, chunk)] * n
        )
        resp = await _request(pool)
        await asyncio.sleep(0.05)  # every piece arrived (the fake transport does not pause)
        transport = pool.live[0].transport
        assert isinstance(transport, ScriptedTransport)
        assert transport.pauses == 1 and transport.resumes == 0
        got = 0
        while chunk_in := await resp.content.readany():
            got += len(chunk_in)
        assert got == len(chunk) * n
        assert transport.resumes == 1
        resp.release()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),
        (b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", False),
    ],
)
def test_a_connection_the_upstream_closes_after_its_answer_is_not_kept(
    answer: bytes, kept: bool
) -> None:
    async def go() -> None:
        pool = FakeUpstreamPool(answer)
        resp = await _request(pool)
        await resp.read()
        resp.release()
        assert pool.idle_count == (1 if kept else 0)

    asyncio.run(go())
