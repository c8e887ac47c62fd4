"""A lean HTTP/1.1 client for the relay's upstream side.

Why not ``aiohttp.ClientSession``: a relay forwards a request that is already parsed and
validated; building a ``ClientRequest`` (URL normalisation, default headers, cookies, auth,
compression, proxy and redirect logic, then serialising the headers again) cost more than the
whole rest of the relay per request, and it can only send header values it can re-encode
(UTF-8), not the bytes the host sent. Here the request head is written from the host's raw
header bytes in one ``write``, and the response is parsed by llhttp (``httptools``, as the
host side in ``front.py``) in an ``asyncio.Protocol`` of its own: the status, the header pairs
as bytes (what the relay forwards and records), and the body as a stream of the chunks as they
arrive — no message object, header multidict, ``StreamReader`` or ``DataQueue`` per response
(aiohttp's ``ResponseHandler`` made those: ~13% of the relay's time per quick exchange). A kept
connection keeps its parser from one response to the next (llhttp parses responses in a row); a
``HEAD``'s answer, whose length announces a body that never comes, ends its parser.

**The seam.** The relay talks to its upstream through :class:`Upstream` (``request`` → an
:class:`UpstreamReply`, ``close``), as httpx's code talks to its transport: :class:`UpstreamPool`
is the real one, and unit tests hand the relay a scripted fake (``tests/relay/unit/fakes.py``)
that answers with chosen statuses, headers, chunks, delays, errors and resets, without sockets.

**Errors** are aiohttp's public exception classes, which the response paths catch:
``aiohttp.ServerDisconnectedError`` (the connection closed before the response head),
``aiohttp.ClientPayloadError`` (closed in the middle of a body with a length or chunks), and
:class:`UpstreamProtocolError` (an ``aiohttp.ClientError``: a response llhttp refuses, or a
head over :data:`~mcp_proxy.limits.UPSTREAM_MAX_HEAD`). httptools API relied on (pinned in
``pyproject.toml``): ``HttpResponseParser`` callbacks ``on_message_begin/on_status/on_header/
on_headers_complete/on_body/on_message_complete``, ``get_status_code``, ``should_keep_alive``,
``HttpParserError``, ``HttpParserUpgrade``.

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
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import aiohttp
import httptools

from mcp_proxy.limits import UPSTREAM_BODY_HIGH, UPSTREAM_MAX_HEAD
from mcp_proxy.relay.http.chunks import Chunks

__all__ = [
    "Upstream",
    "UpstreamBody",
    "UpstreamConnectError",
    "UpstreamConnectTimeout",
    "UpstreamConnection",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamReply",
    "UpstreamResponse",
]

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)

#: The response header names the connection notes while parsing, by lower-case name: the index
#: in ``UpstreamConnection._facts`` (3: Transfer-Encoding, which only says the body has an end).
_FACTS = {b"content-type": 0, b"content-encoding": 1, b"content-length": 2, b"transfer-encoding": 3}


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
    sock: socket.socket | None  # for TCP_QUICKACK, or None

    @property
    def headers(self) -> Any:
        """Case-insensitive ``get(name, default)``, first value wins."""
        ...

    @property
    def raw_headers(self) -> Sequence[tuple[bytes, bytes]]:
        """The header pairs as received, in order."""
        ...

    @property
    def content(self) -> UpstreamBody: ...

    #: The first ``Content-Type`` and ``Content-Encoding`` values ("" when absent) and the first
    #: ``Content-Length`` (None when absent or not digits): what the relay acts on.
    content_type: str
    content_encoding: str
    content_length: int | None

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


class UpstreamConnectError(OSError):
    """The upstream could not be connected to (refused, unreachable, DNS, TLS)."""


class UpstreamConnectTimeout(TimeoutError):
    """Connecting to the upstream took longer than the connect timeout."""


class UpstreamProtocolError(aiohttp.ClientError):
    """The upstream's response is not HTTP/1.1 as llhttp reads it, or its head is too large."""


class ReplyHeaders:
    """The upstream's headers, case-insensitive (first value wins), decoded on look-up.

    Built on first use: the three names the relay acts on are noted while parsing (the response's
    ``content_type``, ``content_encoding``, ``content_length``); the pairs go to the host and the
    recording as bytes, so nothing else is decoded."""

    __slots__ = ("_map", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._map: dict[bytes, bytes] | None = None

    def get(self, name: str, default: str | None = None) -> str | None:
        m = self._map
        if m is None:
            m = self._map = {}
            for k, v in self._raw:
                m.setdefault(k.lower(), v)
        value = m.get(name.lower().encode("latin-1"))
        if value is None:
            return default
        return value.decode("utf-8", "surrogateescape")


class UpstreamConnection(asyncio.Protocol):
    """One connection to the upstream: requests written by the pool, responses parsed here.

    It keeps a socket object of its own for ``TCP_QUICKACK``: the relay sets it after every read
    from the upstream (see ``common.quickack``), and through the transport's socket (uvloop's
    ``PseudoSocket``) each ``setsockopt`` builds a ``socket.socket`` first — about three times
    the cost of the call itself. A duplicate descriptor made once per connection costs one
    ``dup`` and is closed when the connection is lost.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.qsock: socket.socket | None = None
        #: Wakes the body writer when the upstream's socket takes writes again (see drain).
        self.drain_waiter: asyncio.Future[None] | None = None
        self.writing_paused = False
        #: The upstream said (or did) something after which this connection cannot serve again.
        self.should_close = False
        self._parser: httptools.HttpResponseParser | None = None
        #: The response head the pool waits for (None: none expected).
        self._waiter: asyncio.Future[UpstreamResponse] | None = None
        #: The body being received (None between responses).
        self._body: Chunks | None = None
        self._head_only = False
        self._until_eof = True
        self._reason = b""
        self._raw: list[tuple[bytes, bytes]] = []
        #: The first Content-Type, Content-Encoding and Content-Length of the response being
        #: parsed, taken as llhttp hands the fields over (the relay acts on these three).
        self._facts: list[bytes | None] = [None, None, None]
        self._head_size = 0

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        if _QUICKACK is None:
            return
        raw = transport.get_extra_info("socket")
        if raw is not None and raw.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                self.qsock = socket.socket(fileno=os.dup(raw.fileno()))

    def connection_lost(self, exc: BaseException | None) -> None:
        self.transport = None
        self.should_close = True
        qsock, self.qsock = self.qsock, None
        if qsock is not None:
            qsock.close()
        self._wake_writer(ConnectionResetError("the upstream connection was lost"))
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                aiohttp.ServerDisconnectedError("the upstream closed the connection")
            )
        body, self._body = self._body, None
        if body is not None:
            if self._until_eof:  # a body without a length or chunks ends with the connection
                body.feed_eof()
            else:
                body.set_exception(
                    aiohttp.ClientPayloadError(
                        "the upstream closed the connection before the body's end"
                    )
                )

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None or (self._waiter is None and self._body is None):
            # Bytes nobody asked for (after a HEAD's answer, or on an idle connection).
            self._fail(UpstreamProtocolError("the upstream sent bytes outside a response"))
            return
        try:
            parser.feed_data(data)
            if self._waiter is not None:  # the head is not complete yet: bounded
                self._head_size += len(data)
                if self._head_size > UPSTREAM_MAX_HEAD:
                    raise UpstreamProtocolError("the upstream's response head is over the limit")
        except httptools.HttpParserUpgrade:
            # A 101 (switching protocols): its head is delivered; what follows is not HTTP.
            body = self._body
            if body is not None:
                self._body = None
                body.feed_eof()
            self.should_close = True
        except Exception as exc:  # llhttp's refusal, a callback's, or a head too large
            cause = exc if isinstance(exc, UpstreamProtocolError) else exc.__context__
            self._fail(
                cause
                if isinstance(cause, UpstreamProtocolError)
                else UpstreamProtocolError(f"the upstream's response is not valid HTTP/1.1 ({exc})")
            )

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_writer(None)

    # --- llhttp's callbacks (httptools)

    def on_message_begin(self) -> None:
        self._reason = b""
        self._raw = []
        self._facts = [None, None, None]
        self._until_eof = True

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw.append((name, value))
        n = len(name)
        if 12 <= n <= 17:
            slot = _FACTS.get(name.lower())
            if slot is not None:
                if slot >= 2:  # Content-Length or Transfer-Encoding: the body has an end
                    self._until_eof = False
                if slot < 3 and self._facts[slot] is None:
                    self._facts[slot] = value

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            return  # an interim answer: the final one follows
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            raise UpstreamProtocolError("the upstream answered a request it was not sent")
        body = Chunks(self, UPSTREAM_BODY_HIGH)
        if self._head_only or status == 204 or status == 304:
            body.feed_eof()  # no body: the connection's fate is known now
            if not self._parser.should_keep_alive():
                self.should_close = True
            if self._head_only:
                # llhttp would wait for the body the length announces: a new parser next time.
                self._parser = None
        else:
            self._body = body
        reason = self._reason.decode("latin-1") if self._reason else ""
        ctype, coding, length = self._facts
        waiter.set_result(
            UpstreamResponse(
                self,
                status,
                reason,
                self._raw,
                body,
                "" if ctype is None else ctype.decode("utf-8", "surrogateescape"),
                "" if coding is None else coding.decode("utf-8", "surrogateescape"),
                int(length) if length is not None and length.isdigit() else None,
            )
        )

    def on_body(self, data: bytes) -> None:
        body = self._body
        if body is not None:
            body.feed(data)

    def on_message_complete(self) -> None:
        body = self._body
        if body is None:
            return  # an interim answer's end, or a HEAD's
        self._body = None
        assert self._parser is not None
        if not self._parser.should_keep_alive():
            self.should_close = True
        body.feed_eof()

    # --- the pool's side

    def expect(self, head_only: bool) -> asyncio.Future[UpstreamResponse]:
        """Wait for the response to the request about to be written."""
        if self._parser is None:
            self._parser = httptools.HttpResponseParser(self)
        self._head_only = head_only
        self._head_size = 0
        waiter = self._waiter = self.loop.create_future()
        return waiter

    def is_connected(self) -> bool:
        transport = self.transport
        return transport is not None and not transport.is_closing()

    def close(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.close()

    def pause_body(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_body(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def _fail(self, exc: UpstreamProtocolError) -> None:
        self.should_close = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        body, self._body = self._body, None
        if body is not None:
            body.set_exception(exc)
        self.close()

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
            waiter = self.drain_waiter = self.loop.create_future()
        await waiter


class UpstreamResponse:
    """One upstream response: status line, raw headers, and the body as a stream."""

    __slots__ = (
        "_done",
        "_headers",
        "_proto",
        "content",
        "content_encoding",
        "content_length",
        "content_type",
        "pool",
        "raw_headers",
        "reason",
        "sock",
        "status",
        "writer",
    )

    def __init__(
        self,
        proto: UpstreamConnection,
        status: int,
        reason: str,
        raw_headers: list[tuple[bytes, bytes]],
        body: Chunks,
        content_type: str,
        content_encoding: str,
        content_length: int | None,
    ) -> None:
        self._proto = proto
        self._done = False
        self._headers: ReplyHeaders | None = None
        self.status = status
        self.reason = reason
        self.raw_headers = raw_headers
        self.content = body
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.content_length = content_length
        self.sock: socket.socket | None = proto.qsock
        #: Set by the pool: where a released connection goes, and the task writing a streamed
        #: request body (ended with the response).
        self.pool: UpstreamPool | None = None
        self.writer: asyncio.Task[None] | None = None

    @property
    def headers(self) -> ReplyHeaders:
        h = self._headers
        if h is None:
            h = self._headers = ReplyHeaders(self.raw_headers)
        return h

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
        if content.is_eof() and content.exception() is None:
            return content.read_nowait()  # all of it is here: no async iteration
        parts = []
        async for chunk in content.iter_any():
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """The body was read to its end: the connection may serve another request."""
        if self._done:
            return
        self._done = True
        writer = self.writer
        if self.content.is_eof() and (writer is None or writer.done()) and self.pool is not None:
            self.pool.put_back(self._proto)
        else:
            self._abandon()

    def close(self) -> None:
        """Drop the connection now (the host went away, or the body was not read whole)."""
        if self._done:
            return
        self._done = True
        self._abandon()

    def _abandon(self) -> None:
        if self.writer is not None and not self.writer.done():
            self.writer.cancel()
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
        if proto is None:
            proto = await self._connect()
        transport = proto.transport
        if transport is None:
            raise UpstreamConnectError("the upstream connection closed before the request")
        answer = proto.expect(head_only)
        writer: asyncio.Task[None] | None = None
        if body is None or isinstance(body, bytes):
            transport.write(head + body if body else head)
        else:
            transport.write(head)
            writer = asyncio.ensure_future(self._write_body(proto, body, chunked))
        if on_sent is not None:
            on_sent()
        try:
            resp = await answer
        except BaseException:
            if writer is not None:
                writer.cancel()
            proto.close()
            raise
        resp.pool = self
        resp.writer = writer
        return resp

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
