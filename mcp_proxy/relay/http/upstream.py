"""A lean HTTP/1.1 client for the relay's upstream side.

Why not ``aiohttp.ClientSession``: a relay forwards a request that is already parsed and
validated; building a ``ClientRequest`` (URL normalisation, default headers, cookies, auth,
compression, proxy and redirect logic, then serialising the headers again) cost more than the
whole rest of the relay per request, and it can only send header values it can re-encode
(UTF-8), not the bytes the host sent. Here the request head is written from the host's raw
header bytes in one ``write``, and the response is parsed by aiohttp's own client protocol
(``ResponseHandler``: the llhttp C parser, flow control, payload errors on a broken
connection) — the parts of aiohttp worth keeping. A kept connection keeps its parser from one
response to the next (``set_response_params`` builds a new one: only when a HEAD follows a GET
or the reverse).

**The seam.** The relay talks to its upstream through :class:`Upstream` (``request`` → an
:class:`UpstreamReply`, ``close``), as httpx's code talks to its transport: :class:`UpstreamPool`
is the real one, and unit tests hand the relay a scripted fake (``tests/relay/unit/fakes.py``)
that answers with chosen statuses, headers, chunks, delays, errors and resets, without sockets.

**aiohttp API relied on** (aiohttp is pinned to a minor release in ``pyproject.toml``;
``tests/relay/test_http_upstream_conn.py`` and ``tests/relay/unit/test_upstream_seam.py``
exercise each): ``aiohttp.client_proto.ResponseHandler`` (subclassed: ``connection_made``,
``connection_lost``, ``pause_writing``/``resume_writing``, ``set_response_params``, ``read``,
``is_connected``, ``should_close``, ``writing_paused``) and the public methods of
``aiohttp.streams.StreamReader`` (``iter_any``, ``readany``, ``at_eof``, ``is_eof``, ``read_nowait``,
``exception``, ``total_bytes``). No underscore name of aiohttp is used.

Connections are pooled per upstream origin and kept at most ``keepalive`` seconds idle: less
than the 5 s of uvicorn and Node servers, so a pooled connection is dropped by us before the
server closes it under a request (which would then fail: requests are never re-sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader
from multidict import CIMultiDictProxy

__all__ = [
    "Upstream",
    "UpstreamBody",
    "UpstreamConnectError",
    "UpstreamConnectTimeout",
    "UpstreamConnection",
    "UpstreamPool",
    "UpstreamReply",
    "UpstreamResponse",
]

_INTERIM = range(100, 200)
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


class UpstreamBody(Protocol):
    """A response body as it arrives from the upstream."""

    def iter_any(self) -> AsyncIterator[bytes]:
        """Each chunk as it arrives, until the body ends; raises if the upstream broke it."""
        ...

    async def readany(self) -> bytes:
        """The next chunk as it arrives (``b""``: the body ended); raises as ``iter_any``."""
        ...

    def at_eof(self) -> bool:
        """The body ended and every byte of it was read."""
        ...

    def is_eof(self) -> bool:
        """The body's end arrived (bytes may still wait to be read)."""
        ...


class UpstreamReply(Protocol):
    """One upstream response: its head at once, its body as it arrives, then released or
    closed exactly once (released: read to its end, the connection may serve again)."""

    status: int
    reason: str
    headers: Any  # case-insensitive ``get(name, default)``: a multidict
    raw_headers: tuple[tuple[bytes, bytes], ...]
    sock: socket.socket | None  # for TCP_QUICKACK, or None

    @property
    def content(self) -> UpstreamBody: ...

    @property
    def content_length(self) -> int | None: ...

    def has_buffered_body(self) -> bool: ...

    async def read(self) -> bytes: ...

    def release(self) -> None: ...

    def close(self) -> None: ...


class Upstream(Protocol):
    """What the relay needs of its upstream: send one request, get its response head.

    ``request`` sends the head (raw bytes, the host's header bytes rewritten by
    ``forward.build_request_head``) and the body (whole bytes, or an async iterator streamed
    alongside the response) exactly once and returns when the response head is in. It raises
    :class:`UpstreamConnectError` / :class:`UpstreamConnectTimeout` when it cannot connect,
    ``aiohttp.ServerDisconnectedError`` (or another ``aiohttp.ClientError``/``OSError``) when
    the upstream went away before its head; it never retries.
    """

    async def request(
        self,
        head: bytes,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        head_only: bool = False,
        chunked: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> UpstreamReply: ...

    async def close(self) -> None: ...


class UpstreamConnection(ResponseHandler):
    """aiohttp's client protocol, plus a socket object of its own for ``TCP_QUICKACK``.

    The relay sets ``TCP_QUICKACK`` after every read from the upstream (see
    ``common.quickack``). Through the transport's socket (uvloop's ``PseudoSocket``) each
    ``setsockopt`` builds a ``socket.socket`` first — about three times the cost of the call
    itself, twice per proxied call. A duplicate descriptor made once per connection costs one
    ``dup`` and is closed when the connection is lost.
    """

    qsock: socket.socket | None = None
    #: Wakes the body writer when the upstream's socket takes writes again (see drain).
    drain_waiter: asyncio.Future[None] | None = None
    #: The ``head_only`` its response parser was made for (None: no parser yet). llhttp
    #: parses one response after another on a kept connection, as aiohttp's own connections
    #: reuse theirs; a new parser per request (a C object and its settings) is made only when
    #: a HEAD follows a GET or the reverse.
    parser_head_only: bool | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.drain_waiter = None
        self.parser_head_only = None
        if _QUICKACK is None:
            return
        raw = transport.get_extra_info("socket")
        if raw is not None and raw.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                self.qsock = socket.socket(fileno=os.dup(raw.fileno()))

    def connection_lost(self, exc: BaseException | None) -> None:
        qsock, self.qsock = self.qsock, None
        if qsock is not None:
            qsock.close()
        self._wake_writer(ConnectionResetError("the upstream connection was lost"))
        super().connection_lost(exc)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._wake_writer(None)

    def _wake_writer(self, exc: BaseException | None) -> None:
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    async def drain(self) -> None:
        """Wait until the socket takes writes again (flow control of a streamed body)."""
        if self.transport is None:
            raise ConnectionResetError("the upstream connection was lost")
        if not self.writing_paused:
            return
        waiter = self.drain_waiter
        if waiter is None:
            waiter = self.drain_waiter = asyncio.get_running_loop().create_future()
        await waiter


class UpstreamConnectError(OSError):
    """The upstream could not be connected to (refused, unreachable, DNS, TLS)."""


class UpstreamConnectTimeout(TimeoutError):
    """Connecting to the upstream took longer than the connect timeout."""


class UpstreamResponse:
    """One upstream response: status line, raw headers, and the body as a stream."""

    __slots__ = (
        "_done",
        "_pool",
        "_proto",
        "_writer",
        "content",
        "headers",
        "raw_headers",
        "reason",
        "sock",
        "status",
    )

    def __init__(
        self,
        pool: UpstreamPool,
        proto: UpstreamConnection,
        msg: Any,
        payload: StreamReader,
        writer: asyncio.Task[None] | None,
    ) -> None:
        self._pool = pool
        self._proto = proto
        self._writer = writer
        self._done = False
        self.status: int = msg.code
        self.reason: str = msg.reason
        self.headers: CIMultiDictProxy[str] = msg.headers
        self.raw_headers: tuple[tuple[bytes, bytes], ...] = msg.raw_headers
        self.content = payload
        self.sock: socket.socket | None = proto.qsock

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("Content-Length")
        if value is None or not value.isdigit():
            return None
        return int(value)

    def has_buffered_body(self) -> bool:
        """Body bytes (or its end) already received and waiting to be read."""
        # Asked before any of the body is read: bytes received are bytes waiting.
        content = self.content
        return content.total_bytes > 0 or content.is_eof()

    @property
    def closed(self) -> bool:
        return self._done

    async def read(self) -> bytes:
        content = self.content
        if content.is_eof() and not content.exception():
            return content.read_nowait()  # all of it is here: no async iteration
        parts = []
        async for chunk in self.content.iter_any():
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """The body was read to its end: the connection may serve another request."""
        if self._done:
            return
        self._done = True
        writer_busy = self._writer is not None and not self._writer.done()
        if self.content.is_eof() and not writer_busy:
            self._pool.put_back(self._proto)
        else:
            self._abandon()

    def close(self) -> None:
        """Drop the connection now (the host went away, or the body was not read whole)."""
        if self._done:
            return
        self._done = True
        self._abandon()

    def _abandon(self) -> None:
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        self._proto.close()


class UpstreamPool:
    """Keep-alive connections to one upstream origin."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: bool,
        connect_timeout: float = 10.0,
        keepalive: float = 4.0,
        max_field_size: int = 64 * 1024,
        max_idle: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        """``ssl_context``: the TLS context when ``tls`` (default: the system's trust);
        ``server_hostname``: the name sent (SNI) and verified, when not ``host``;
        ``max_idle``: idle connections kept at most (the oldest closed first; None: no cap)."""
        self.host = host
        self.port = port
        self.server_hostname = server_hostname or host
        self.ssl: ssl.SSLContext | None = None
        if tls:
            self.ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.max_field_size = max_field_size
        self.max_idle = max_idle
        #: Idle connections, oldest first, with the monotonic time each went idle.
        self._idle: list[tuple[UpstreamConnection, float]] = []
        self._closed = False

    async def _connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, proto = await loop.create_connection(
                    lambda: UpstreamConnection(loop),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname if self.ssl is not None else None,
                )
        except TimeoutError as exc:
            raise UpstreamConnectTimeout(
                f"connecting to {self.host}:{self.port} took over {self.connect_timeout} s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
                if isinstance(exc, OSError)
                else f"TLS with {self.host}:{self.port} failed: {exc}"
            ) from exc
        return proto

    def _take_idle(self) -> UpstreamConnection | None:
        now = time.monotonic()
        while self._idle:
            proto, since = self._idle.pop()
            if proto.is_connected() and not proto.should_close and now - since < self.keepalive:
                return proto
            proto.close()
        return None

    def put_back(self, proto: UpstreamConnection) -> None:
        if self._closed or not proto.is_connected() or proto.should_close:
            proto.close()
            return
        idle = self._idle
        idle.append((proto, time.monotonic()))
        if self.max_idle is not None and len(idle) > self.max_idle:
            oldest, _ = idle.pop(0)
            oldest.close()

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    def sweep(self) -> int:
        """Close the connections idle for ``keepalive`` seconds or more (the oldest are first:
        only the stale ones are looked at); how many were closed. A timer calls this (the forward
        proxy's pools): otherwise the idle limit is only checked when the pool is used again."""
        limit = time.monotonic() - self.keepalive
        idle = self._idle
        n = 0
        while idle and (idle[0][1] <= limit or not idle[0][0].is_connected()):
            proto, _ = idle.pop(0)
            proto.close()
            n += 1
        return n

    async def request(
        self,
        head: bytes,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        head_only: bool = False,
        chunked: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> UpstreamResponse:
        """Send one request (head + body) and return once the response headers are in.

        A streamed body is written by a task alongside, so an upstream that answers early
        (413) is heard at once; the task ends with the response. ``on_sent`` is called once the
        request (or its head, for a streamed body) was handed to the connection: work that
        must not delay the request (the forward proxy's recording) goes there.
        """
        proto = self._take_idle()
        if proto is None:  # (a ResponseHandler is a queue: an idle one is falsy)
            proto = await self._connect()
        if proto.parser_head_only is not head_only:
            proto.set_response_params(
                skip_payload=head_only,
                read_until_eof=True,
                auto_decompress=False,
                read_bufsize=1 << 16,
                max_line_size=self.max_field_size,
                max_field_size=self.max_field_size,
            )
            proto.parser_head_only = head_only
        transport = proto.transport
        if transport is None:
            raise UpstreamConnectError("the upstream connection closed before the request")
        writer: asyncio.Task[None] | None = None
        if body is None or isinstance(body, bytes):
            transport.write(head + body if body else head)
        else:
            transport.write(head)
            writer = asyncio.ensure_future(self._write_body(proto, body, chunked))
        if on_sent is not None:
            on_sent()
        try:
            msg, payload = await proto.read()
            while msg.code in _INTERIM and msg.code != 101:
                msg, payload = await proto.read()
        except BaseException:
            if writer is not None:
                writer.cancel()
            proto.close()
            raise
        return UpstreamResponse(self, proto, msg, payload, writer)

    @staticmethod
    async def _write_body(
        proto: UpstreamConnection, body: AsyncIterator[bytes], chunked: bool
    ) -> None:
        try:
            async for chunk in body:
                transport = proto.transport
                if transport is None or transport.is_closing():
                    return
                if chunked:
                    if chunk:
                        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                else:
                    transport.write(chunk)
                if proto.writing_paused:
                    await proto.drain()
            if chunked and proto.transport is not None:
                proto.transport.write(b"0\r\n\r\n")
        except (ConnectionError, OSError):
            return  # the upstream stopped reading (it answered early, or went away)

    async def close(self) -> None:
        self.close_idle()

    def close_idle(self) -> None:
        """No more requests: close the idle connections now; those in use close when released."""
        self._closed = True
        while self._idle:
            proto, _ = self._idle.pop()
            with contextlib.suppress(Exception):
                proto.close()
