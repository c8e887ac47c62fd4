"""The upstream pool's connections on real sockets: reuse, and a close the upstream sees at once.

Each pooled connection keeps a duplicate descriptor of its socket for ``TCP_QUICKACK`` (cheaper
than uvloop's ``PseudoSocket`` per call). A duplicate left open would keep the TCP connection
alive after the relay closed it — the upstream would never see a cancelled request's stream
close — so these tests hold the pool to closing it with the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from mcp_proxy.relay.http.common import quickack, quickack_socket
from mcp_proxy.relay.http.upstream import UpstreamPool

pytestmark = pytest.mark.timeout(30)

REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _server() -> tuple[asyncio.Server, list[asyncio.Future[None]], int]:
    """An upstream that answers with an event stream it never ends; notes each EOF it sees."""
    closed: list[asyncio.Future[None]] = []
    loop = asyncio.get_running_loop()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        done: asyncio.Future[None] = loop.create_future()
        closed.append(done)
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            writer.write(REPLY + b"6\r\ndata: \r\n")
            await writer.drain()
            if not await reader.read(1):  # the relay's next request, or its close
                break
        done.set_result(None)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, closed, port


@contextlib.asynccontextmanager
async def _pool_on(serve: Any) -> AsyncIterator[UpstreamPool]:
    """A pool to an upstream on 127.0.0.1 served by ``serve``; both closed on the way out."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    pool = UpstreamPool("127.0.0.1", server.sockets[0].getsockname()[1], tls=False)
    try:
        yield pool
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


async def _asking(serve: Any, ask: Callable[[UpstreamPool], Awaitable[None]]) -> None:
    async with _pool_on(serve) as pool:
        await ask(pool)


def _run(coro: object) -> None:
    try:
        import uvloop
    except ImportError:  # the standard loop then
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    asyncio.run(coro, loop_factory=uvloop.new_event_loop)  # type: ignore[arg-type]


def test_closing_a_response_closes_the_upstream_connection_at_once() -> None:
    async def main() -> None:
        server, closed, port = await _server()
        pool = UpstreamPool("127.0.0.1", port, tls=False)
        head = b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        resp = await pool.request(head, None)
        assert resp.status == 200
        sock = quickack_socket(resp)
        if hasattr(socket, "TCP_QUICKACK"):
            assert sock is not None and sock.fileno() >= 0
            before = len(os.listdir("/proc/self/fd"))
            quickack(sock)  # a plain setsockopt on the connection's own socket
        resp.close()  # the host went away: the upstream must see the close now
        await asyncio.wait_for(closed[0], 5)
        if sock is not None:
            assert sock.fileno() == -1  # the duplicate descriptor went with the connection
            assert len(os.listdir("/proc/self/fd")) < before
        await pool.close()
        server.close()
        await server.wait_closed()

    _run(main())


def test_pool_closes_idle_connections_and_their_duplicates() -> None:
    async def main() -> None:
        server, closed, port = await _server()
        pool = UpstreamPool("127.0.0.1", port, tls=False)
        head = b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        resp = await pool.request(head, None)
        sock = quickack_socket(resp)
        resp.close()
        await asyncio.wait_for(closed[0], 5)
        resp2 = await pool.request(head, None)  # a new connection (the first is gone)
        assert len(closed) == 2
        sock2 = quickack_socket(resp2)
        resp2.close()
        await pool.close()
        await asyncio.wait_for(closed[1], 5)
        for s in (sock, sock2):
            assert s is None or s.fileno() == -1
        server.close()
        await server.wait_closed()

    _run(main())


def test_one_kept_connection_parses_responses_in_a_row_and_heads_between() -> None:
    """A kept connection's response parser serves one response after another; a HEAD's answer
    (a length, no body) and the GET after it are each framed by their own rules."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            heads.append(head)
            n = len(heads)
            body = b"body-%d" % n
            length = b"Content-Length: %d\r\n" % len(body)
            if head.startswith(b"HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\n" + length + b"\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\n" + length + b"\r\n" + body)
            await writer.drain()
        writer.close()

    async def ask(pool: UpstreamPool) -> None:
        got = []
        for method in ("GET", "GET", "HEAD", "GET", "HEAD", "HEAD", "GET"):
            head = b"%s / HTTP/1.1\r\nHost: x\r\n\r\n" % method.encode()
            resp = await asyncio.wait_for(
                pool.request(head, None, head_only=method == "HEAD"), timeout=5
            )
            got.append((method, await asyncio.wait_for(resp.read(), timeout=5)))
            resp.release()
            assert pool.idle_count == 1  # the one connection, kept
        assert got == [
            ("GET", b"body-1"),
            ("GET", b"body-2"),
            ("HEAD", b""),
            ("GET", b"body-4"),
            ("HEAD", b""),
            ("HEAD", b""),
            ("GET", b"body-7"),
        ]

    _run(_asking(serve, ask))


def test_a_kept_connection_notes_each_responses_type_encoding_and_length_afresh() -> None:
    """``content_type``, ``content_encoding`` and ``content_length`` are the response's first
    values whatever their case, "" / None when absent — taken anew for each response on a kept
    connection (the relay decides event stream, decoding and small body on them)."""
    replies = [
        b"HTTP/1.1 200 OK\r\ncontent-TYPE: text/event-stream\r\nContent-Type: application/json"
        b"\r\nCONTENT-ENCODING: gzip\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\ncd\r\n0\r\n\r\n",
    ]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(reply)
            await writer.drain()
        await reader.read()
        writer.close()

    async def ask(pool: UpstreamPool) -> None:
        got = []
        for _ in replies:
            resp = await asyncio.wait_for(
                pool.request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", None), 5
            )
            body = await asyncio.wait_for(resp.read(), timeout=5)
            got.append((resp.content_type, resp.content_encoding, resp.content_length, body))
            resp.release()
        assert got == [
            ("text/event-stream", "gzip", 2, b"ab"),
            ("", "", None, b"cd"),
        ]

    _run(_asking(serve, ask))
