"""The host-facing HTTP/1.1 server: an ``asyncio.Protocol`` over httptools (llhttp), as uvicorn.

Why not ``aiohttp.web.Server``: it costs ~240 µs of CPU per keep-alive request on this path
(request object, multidict headers, payload writer, access-log plumbing) against ~60–80 µs for
a bare protocol. The relay needs little of it: the request line and the raw header bytes
(forwarded as they are), a body stream, and a response writer that adds nothing of its own.

What it does, per connection:

- parses with ``httptools.HttpRequestParser`` (llhttp, strict: a CR inside a header value is a
  parse error → ``400`` and the connection closes); an oversized request line (> 64 KiB) gets
  ``414``, an oversized header field or head (> 64 KiB / 256 KiB) ``431`` — never a traceback;
- runs one handler task per request, in order (pipelined requests wait their turn; reading
  pauses while more than a few are queued or a body buffers past 1 MiB);
- cancels the running handler when the host closes the connection — in the 2026-07-28 era
  that *is* how a request is cancelled (the same contract as aiohttp's
  ``handler_cancellation=True``);
- keeps the connection alive when both sides allow it (HTTP/1.1, the handler's response
  framed, the request body read to its end), closes idle ones after ``KEEPALIVE_IDLE``.

httptools API relied on (pinned in ``pyproject.toml``): ``HttpRequestParser`` callbacks
``on_message_begin/on_url/on_header/on_headers_complete/on_body/on_message_complete``,
``get_method``, ``get_http_version``, ``should_keep_alive``, ``HttpParserError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import Any, NamedTuple

import httptools
from multidict import CIMultiDict

from mcp_proxy.limits import (
    BODY_HIGH,
    KEEPALIVE_IDLE,
    LINGER,
    MAX_FIELD,
    MAX_HEAD,
    MAX_LINE,
    MAX_QUEUED,
    REFUSED_LINGER,
)
from mcp_proxy.relay.http.admission import FULL_RESPONSE, Admission
from mcp_proxy.relay.http.chunks import Chunks
from mcp_proxy.relay.http.host_request import Headers

__all__ = [
    "FrontRequest",
    "FrontServer",
    "RelayResponse",
    "plain_response",
]


_NO_BODY_STATUS = frozenset((204, 304))


class HttpVersion(NamedTuple):
    major: int
    minor: int


HTTP_11 = HttpVersion(1, 1)
_V10 = HttpVersion(1, 0)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class FrontRequest:
    """One request from the host: what the relay forwards and records, nothing parsed twice."""

    __slots__ = (
        "_headers",
        "body_exists",
        "conn",
        "content",
        "content_encoding",
        "content_length",
        "content_type",
        "host",
        "keep_alive",
        "method",
        "raw_headers",
        "raw_path",
        "transport",
        "version",
    )

    def __init__(
        self,
        conn: FrontProtocol,
        method: str,
        raw_path: str,
        raw_headers: list[tuple[bytes, bytes]],
        version: HttpVersion,
        content_length: int | None,
        chunked: bool,
        keep_alive: bool,
        host: str | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
    ) -> None:
        """``host``, ``content_type``, ``content_encoding``: those headers' first values, picked
        out by the parser's one pass over the head (what the relay asks of every request)."""
        self.conn = conn
        self.transport: asyncio.Transport | None = conn.transport
        self.method = method
        self.raw_path = raw_path
        self.raw_headers = raw_headers
        self._headers: Headers | None = None
        self.version = version
        self.content_length = content_length
        self.host = host
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.body_exists = chunked or bool(content_length)
        self.content = Chunks(conn, BODY_HIGH)
        if not self.body_exists:
            self.content.feed_eof()
        self.keep_alive = keep_alive

    @property
    def headers(self) -> Headers:
        h = self._headers
        if h is None:
            h = self._headers = Headers(self.raw_headers)
        return h

    async def send_continue(self) -> None:
        """``Expect: 100-continue``: tell the host to send its body."""
        self.conn.write_raw(b"HTTP/1.1 100 Continue\r\n\r\n")


class RelayResponse:
    """A response for the host that adds no headers of its own (no Server, Date, Content-Type).

    Its head is held back and goes out with the first body bytes (one ``send``, one wake-up of
    the host instead of two) unless :meth:`flush_head` sends it at once (an event stream that
    stays quiet must still show its head). Without a ``Content-Length`` the body goes chunked
    (HTTP/1.1) or until the connection closes (HTTP/1.0).
    """

    __slots__ = (
        "_chunked",
        "_conn",
        "_eof",
        "_has_length",
        "_headers",
        "_no_body",
        "_pending",
        "_raw",
        "body",
        "prepared",
        "reason",
        "status",
    )

    def __init__(
        self,
        *,
        status: int,
        reason: str | None = None,
        headers: Iterable[tuple[str, str]] | None = None,
        body: bytes | None = None,
        raw: list[tuple[bytes, bytes]] | None = None,
        has_length: bool = False,
    ) -> None:
        """``raw``: header pairs as bytes, written as they are (a relayed upstream head: no
        decoding and re-encoding per header); ``has_length`` says one is ``Content-Length``.
        Otherwise ``headers`` as text (answers the relay writes itself)."""
        self.status = status
        self.reason = reason
        self._raw = raw
        self._has_length = has_length
        self._headers: CIMultiDict[str] | None = CIMultiDict(headers or ()) if raw is None else None
        self.body = body
        self._conn: FrontProtocol | None = None
        self._pending: bytes | None = None
        self._chunked = False
        self._no_body = False
        self._eof = False
        self.prepared = False

    @property
    def headers(self) -> CIMultiDict[str]:
        """The headers as text (a relayed head is decoded into them on first use)."""
        if self._headers is None:
            raw = self._raw or []
            self._headers = CIMultiDict(
                (k.decode("latin-1"), v.decode("utf-8", "surrogateescape")) for k, v in raw
            )
            self._raw = None
        return self._headers

    def set_header(self, name: str, value: str) -> None:
        """Set one header (replacing any of that name), whichever form the head is in."""
        if self._raw is None:
            self.headers[name] = value
            return
        low = name.lower().encode("latin-1")
        kept = [p for p in self._raw if p[0].lower() != low]
        kept.append((name.encode("latin-1"), value.encode("utf-8", "surrogateescape")))
        self._raw = kept
        if low == b"content-length":
            self._has_length = True

    async def prepare(self, request: FrontRequest) -> None:
        """Fix the framing and build the head (sent with the first bytes or by flush_head)."""
        if self.prepared:
            return
        self.prepared = True
        conn = request.conn
        self._conn = conn
        status = self.status
        self._no_body = request.method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200
        reason = self.reason if self.reason is not None else _reason(status)
        raw = self._raw
        if raw is not None:
            # A relayed head: the upstream's pairs as bytes (hop-by-hop ones already dropped).
            lines = [b"HTTP/1.1 %d %b\r\n" % (status, reason.encode("latin-1"))]
            lines += [b"%b: %b\r\n" % p for p in raw]
            if not self._no_body and not self._has_length:
                if request.version >= HTTP_11:
                    self._chunked = True
                    lines.append(b"Transfer-Encoding: chunked\r\n")
                else:
                    conn.close_after = True
            if not request.keep_alive or conn.close_after:
                conn.close_after = True
                lines.append(b"Connection: close\r\n")
            lines.append(b"\r\n")
            self._pending = b"".join(lines)
            return
        headers = self.headers
        if not self._no_body and "Content-Length" not in headers:
            if request.version >= HTTP_11:
                self._chunked = True
                headers["Transfer-Encoding"] = "chunked"
            else:
                conn.close_after = True
        if not request.keep_alive or conn.close_after:
            conn.close_after = True
            if "Connection" not in headers:
                headers["Connection"] = "close"
        lines = [f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")]
        for k, v in headers.items():
            lines.append(
                b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("utf-8", "surrogateescape"))
            )
        lines.append(b"\r\n")
        self._pending = b"".join(lines)

    def flush_head(self) -> None:
        """Send the held-back head now; a host already gone is the handler's to notice."""
        head = self._pending
        if head is not None and self._conn is not None:
            self._pending = None
            with contextlib.suppress(ConnectionError):
                self._conn.write_raw(head)

    def _frame(self, data: bytes, last: bool) -> bytes:
        if self._no_body:
            data = b""
        elif self._chunked:
            body = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
            data = body + b"0\r\n\r\n" if last else body
        head = self._pending
        if head is not None:
            self._pending = None
            return head + data
        return data

    async def write(self, data: bytes) -> None:
        conn = self._conn
        assert conn is not None, "prepare() first"
        if self._eof:
            raise RuntimeError("write after write_eof")
        if not data:
            return
        out = self._frame(data, False)
        if out:
            conn.write_raw(out)
            if conn.write_paused:
                await conn.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        if self._eof:
            return
        conn = self._conn
        assert conn is not None, "prepare() first"
        self._eof = True
        out = self._frame(data, True)
        if out:
            conn.write_raw(out)
            if conn.write_paused:
                await conn.drain()

    async def send(self, request: FrontRequest) -> None:
        """A whole response (``body`` set): head and body in one write."""
        body = self.body or b""
        if not (self.status in _NO_BODY_STATUS or 100 <= self.status < 200):
            if self._raw is not None:
                if not self._has_length:
                    self.set_header("Content-Length", str(len(body)))
            elif "Content-Length" not in self.headers:
                self.headers["Content-Length"] = str(len(body))
        await self.prepare(request)
        await self.write_eof(body)


def plain_response(
    status: int,
    body: bytes | str = b"",
    headers: dict[str, str] | None = None,
    *,
    content_type: str | None = None,
) -> RelayResponse:
    """A whole response the relay writes itself (refusals, synthetic errors, fault answers)."""
    raw = body.encode() if isinstance(body, str) else body
    h = dict(headers or {})
    if content_type is None and isinstance(body, str) and "Content-Type" not in h:
        content_type = "text/plain; charset=utf-8"
    if content_type is not None:
        h["Content-Type"] = content_type
    return RelayResponse(status=status, headers=h.items(), body=raw)


Handler = Callable[[FrontRequest], Awaitable[RelayResponse]]


class FrontProtocol(asyncio.Protocol):
    """One host connection (see the module docstring)."""

    def __init__(self, server: FrontServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.close_after = False
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None
        # The request being parsed.
        self._url: list[bytes] = []
        self._hdrs: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._parsing: FrontRequest | None = None
        # The request being handled, and the ones waiting behind it.
        self._task: asyncio.Task[None] | None = None
        self._queue: deque[FrontRequest] = deque()
        self._reading_paused = False
        self._body_paused = False
        self._idle: asyncio.TimerHandle | None = None
        #: The keep-alive timer, armed once and moved on lazily: each request only notes when
        #: the connection went idle (``_idle_since``; None while busy), and a timer that fires
        #: early re-arms for the rest — no timer made and cancelled per request.
        self._keepalive: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None
        self._lost = False
        self._lingering: FrontRequest | None = None
        self._peer: str | None = None
        #: Past the server's connection cap: answered 503, then closed (nothing is parsed).
        self.refused = False

    @property
    def peer(self) -> str | None:
        """``host:port`` of the host's end (asked of the transport once per connection)."""
        if self._peer is None and self.transport is not None:
            info = self.transport.get_extra_info("peername")
            self._peer = f"{info[0]}:{info[1]}" if info else ""
        return self._peer or None

    # ------------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio class
        if not self.server.admit():
            self._refuse_full()
            return
        self.server.connections.add(self)
        self._arm_idle()

    def _refuse_full(self) -> None:
        """Past the cap: the 503 goes at once; the connection closes when the host's bytes
        arrive (read and dropped, so the close is a FIN, not a reset that would lose the
        answer) or after ``REFUSED_LINGER`` s."""
        self.refused = True
        t = self.transport
        assert t is not None
        t.write(FULL_RESPONSE)
        self._idle = self.loop.call_later(REFUSED_LINGER, t.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        reset = ConnectionResetError("the host closed the connection")
        if self._parsing is not None:
            self._parsing.content.set_exception(reset)
        for req in self._queue:
            req.content.set_exception(reset)
        self._queue.clear()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        d = self._drain
        if d is not None and not d.done():
            d.set_exception(reset)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        d = self._drain
        if d is not None:
            self._drain = None
            if not d.done():
                d.set_result(None)

    async def drain(self) -> None:
        if self._lost:
            raise ConnectionResetError("the host closed the connection")
        if not self.write_paused:
            return
        if self._drain is None:
            self._drain = self.loop.create_future()
        await asyncio.shield(self._drain)

    def write_raw(self, data: bytes) -> None:
        t = self.transport
        if t is None or self._lost or t.is_closing():
            raise ConnectionResetError("cannot write to a closing connection")
        t.write(data)

    def _arm_idle(self) -> None:
        self._idle_since = self.loop.time()
        if self._keepalive is None:
            self._keepalive = self.loop.call_later(KEEPALIVE_IDLE, self._keepalive_due)

    def _keepalive_due(self) -> None:
        self._keepalive = None
        since = self._idle_since
        if since is None or self._lost:
            return  # busy: the request's end arms it again
        left = since + KEEPALIVE_IDLE - self.loop.time()
        if left > 0:
            self._keepalive = self.loop.call_later(left, self._keepalive_due)
            return
        self._idle_close()

    def _idle_close(self) -> None:
        self._idle = None
        if self._task is None and self.transport is not None:
            self.transport.close()

    def pause_body(self) -> None:
        if not self._body_paused:
            self._body_paused = True
            self._update_reading()

    def resume_body(self) -> None:
        if self._body_paused:
            self._body_paused = False
            self._update_reading()

    def _update_reading(self) -> None:
        want_pause = self._body_paused or len(self._queue) >= MAX_QUEUED
        t = self.transport
        if t is None or self._lost or want_pause == self._reading_paused:
            return
        self._reading_paused = want_pause
        if want_pause:
            t.pause_reading()
        else:
            t.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            if self.transport is not None:
                self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(501, "protocol upgrades are not relayed")
        except _Refused as exc:
            self._refuse(exc.status, exc.text)
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _Refused):
                self._refuse(cause.status, cause.text)
            else:
                self._refuse(400, "malformed HTTP request")

    def eof_received(self) -> bool | None:
        # The host closed its side: as with aiohttp, the connection ends (connection_lost
        # follows and cancels the running handler — how a 2026-07-28 host cancels a request).
        return None

    def _refuse(self, status: int, text: str) -> None:
        """A request the parser cannot take: one clear answer, then the connection closes."""
        if self._parsing is not None:
            self._parsing.content.set_exception(ConnectionResetError(text))
            self._parsing = None
        self._queue.clear()
        self.close_after = True
        if self._task is not None:
            # A response is in progress on this connection: no interleaved answer, just close
            # once it is done.
            return
        body = (text + "\n").encode()
        head = (
            f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(head + body)
            t.close()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self._url = []
        self._hdrs = []
        self._head_size = 0
        self._idle_since = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        if self._head_size > MAX_LINE:
            raise _Refused(414, "request line too long")
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp may call back with a field in pieces; they are joined here.
        n = len(name) + len(value)
        self._head_size += n
        if self._head_size > MAX_HEAD:
            raise _Refused(431, "request head too large")
        if n > MAX_FIELD and (len(value) > MAX_FIELD or len(name) > MAX_FIELD):
            raise _Refused(431, "request header field too large")
        self._hdrs.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        raw_path = b"".join(self._url).decode("utf-8", "surrogateescape")
        length: int | None = None
        chunked = False
        host: bytes | None = None
        ctype: bytes | None = None
        coding: bytes | None = None
        for k, v in self._hdrs:
            n = len(k)
            if n == 4:
                if k.lower() == b"host":
                    if host is not None:
                        # The Host check reads one value; a second (``evil.example`` after a
                        # loopback name) would pass it and go upstream. RFC 9112 §3.2: a 400.
                        raise _Refused(400, "more than one Host header")
                    host = v
            elif n == 12:
                if ctype is None and k.lower() == b"content-type":
                    ctype = v
            elif n == 14:
                if k.lower() == b"content-length":
                    try:
                        length = int(v)
                    except ValueError:
                        length = None
            elif n == 16:
                if coding is None and k.lower() == b"content-encoding":
                    coding = v
            elif n == 17 and k.lower() == b"transfer-encoding":
                chunked = b"chunked" in v.lower()
        ver = parser.get_http_version()
        version = HTTP_11 if ver == "1.1" else _V10 if ver == "1.0" else HttpVersion(1, 1)
        req = FrontRequest(
            self,
            parser.get_method().decode("ascii", "replace"),
            raw_path,
            self._hdrs,
            version,
            length,
            chunked,
            parser.should_keep_alive(),
            None if host is None else host.decode("utf-8", "surrogateescape"),
            None if ctype is None else ctype.decode("utf-8", "surrogateescape"),
            None if coding is None else coding.decode("utf-8", "surrogateescape"),
        )
        self._parsing = req
        if self._task is None:
            self._start(req)
        else:
            self._queue.append(req)
            self._update_reading()

    def on_body(self, body: bytes) -> None:
        if self._parsing is not None:
            self._parsing.content.feed(body)

    def on_message_complete(self) -> None:
        req = self._parsing
        if req is not None:
            req.content.feed_eof()
            self._parsing = None
            if req is self._lingering and self.transport is not None:
                self.transport.close()

    # ------------------------------------------------------------------ handling
    def _start(self, req: FrontRequest) -> None:
        task = self._task = self.loop.create_task(self._run(req))
        tasks = self.server.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _run(self, req: FrontRequest) -> None:
        resp: RelayResponse | None = None
        try:
            resp = await self.server.handler(req)
            if not resp.prepared:
                await resp.send(req)
            elif not resp._eof:
                await resp.write_eof()
        except asyncio.CancelledError:
            self.close_after = True
        except ConnectionError:
            self.close_after = True
        except BadRequest as exc:
            self.close_after = True
            if resp is None or not resp.prepared:
                with contextlib.suppress(ConnectionError):
                    await plain_response(400, str(exc) or "bad request").send(req)
        except Exception:
            self.close_after = True
            self.server.log_error(req)
            with contextlib.suppress(Exception):
                if resp is None or not resp.prepared:
                    await plain_response(500, "mcptape: internal error").send(req)
        finally:
            self._task = None
            self._next(req)

    def _next(self, done: FrontRequest) -> None:
        """The response is out: the next pipelined request, keep-alive, or close."""
        t = self.transport
        if self._lost or t is None:
            return
        if not done.content.complete:
            # The upstream answered before taking the whole body (a 413): the host is still
            # sending. Closing now would reset the connection under the host's feet before it
            # reads the answer; the rest is read and dropped (up to LINGER s), then it closes.
            self.close_after = True
            self._lingering = done
            done.content.discard()
            self._idle = self.loop.call_later(LINGER, self._idle_close)
            return
        if self.close_after or not done.keep_alive:
            t.close()
            return
        if self.server.stopping:
            t.close()
            return
        if self._queue:
            req = self._queue.popleft()
            self._update_reading()
            self._start(req)
        else:
            self._arm_idle()


class _Refused(Exception):
    """A request head the relay will not take (too large, two Hosts): its status and text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class BadRequest(Exception):
    """Raised by a handler: answer 400 (if nothing was sent yet) and close the connection."""


class FrontServer:
    """The listener and its connections; :meth:`close` stops it with a grace for handlers."""

    def __init__(
        self,
        handler: Handler,
        log_error: Callable[[FrontRequest], None],
        *,
        max_connections: int | None = None,
        what: str = "relay",
    ) -> None:
        """``max_connections``, ``what``: the cap on host connections and how its stderr line
        names this listener (:class:`~mcp_proxy.relay.http.admission.Admission`)."""
        self.handler = handler
        self.log_error = log_error
        self.loop = asyncio.get_running_loop()
        #: The host connections being served: at most ``admission.cap``.
        self.connections: set[FrontProtocol] = set()
        self.admission = Admission(max_connections, what)
        #: Every running handler, also of a connection already lost (its handler, cancelled,
        #: is still finishing its recording): :meth:`close` waits for them all. At most one per
        #: connection.
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self._server: asyncio.Server | None = None

    def admit(self) -> bool:
        """May one more host connection be served? False: refuse it (counted, reported)."""
        return self.admission.admit(len(self.connections))

    async def listen(self, host: str, port: int) -> int:
        """Bind and start serving; returns the bound port."""
        self._server = await self.loop.create_server(
            lambda: FrontProtocol(self), host, port, reuse_address=True, backlog=1024
        )
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self, grace: float) -> None:
        """Stop accepting; close idle connections; give handlers ``grace`` s, then cancel."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn._task is None and conn.transport is not None:
                conn.transport.close()
        busy = [task for task in self.tasks if not task.done()]
        if busy:
            _done, pending = await asyncio.wait(busy, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=grace)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=1)
            self._server = None


def ignore(_: Any) -> None:
    """A no-op error logger."""
