"""The lean engine's HTTP side: each request a host sends through it, relayed and recorded.

:class:`TunnelFront` is the relay's host-facing HTTP server on one host connection (in a tunnel,
or plain absolute-form proxying); :class:`RequestHandler` takes each of its requests:

1. its body is read whole up to ``SMALL_BODY`` (larger or chunked: streamed upstream, the first
   ``MAX_RECORDED_BODY`` bytes kept for the tape), its head rewritten by
   :func:`~mcp_proxy.relay.http.forward.build_request_head` (hop-by-hop headers dropped, every
   other byte as the host sent it) and sent over a keep-alive connection of the origin's
   :class:`~mcp_proxy.relay.http.upstream.UpstreamPool`;
2. once it went, the tape (:class:`~mcp_proxy.forward.tape.ForwardTape`) is told, and answers
   with the exchange it records (or None);
3. the response is forwarded as it arrives, chunk by chunk (event streams included), a response
   that is whole at once in one write; the exchange is told of its head, gets a copy of each
   chunk it asked to copy (after the chunk went to the host), then its end — or the error.

Errors it answers itself: ``502`` (upstream unreachable, TLS with it failed, closed before its
response) with the reason in the body and ``X-Mcptape-Error``, ``400`` for a malformed proxy
request, ``501`` for protocol upgrades (WebSocket).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from mcp_proxy.forward.contexts import SNI_ATTR
from mcp_proxy.forward.exchange import (
    KIND_MAYBE,
    KIND_MCP,
    RequestHead,
    ResponseHead,
    TapeExchange,
)
from mcp_proxy.forward.recognize import is_event_stream
from mcp_proxy.forward.tape import ForwardTape, request_url
from mcp_proxy.forward.tunnel import Target, parse_authority
from mcp_proxy.framing import SSEParser
from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import SMALL_BODY, SMALL_RESPONSE, TAIL_READ
from mcp_proxy.relay.http.forward import RequestHead as WireHead
from mcp_proxy.relay.http.forward import build_request_head, with_content_length
from mcp_proxy.relay.http.front import (
    FrontProtocol,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.hooks import ENDS, Act, HookExchange, Hooks, Verdict, carried
from mcp_proxy.relay.http.kept import Kept, drain, streamed
from mcp_proxy.relay.http.upstream import Upstream, UpstreamPool

__all__ = ["Copy", "RequestHandler", "TunnelFront", "guarded"]

log = logging.getLogger("mcptape.forward")

#: How an event stream decided by hooks ended (:meth:`RequestHandler._events`).
ENDED, CUT, RESET = "ended", "cut", "reset"


class TunnelFront(FrontProtocol):
    """The HTTP side of one host connection: in a tunnel to ``target``, or (``target`` None)
    absolute-form requests to any origin."""

    def __init__(self, server: FrontServer, target: Target | None) -> None:
        super().__init__(server)
        self.target = target
        #: The host's connection is gone (a write error is then the host's going).
        self.gone = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        super().connection_lost(exc)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Called once the host's TLS handshake is done: the SNI it sent is known then.
        target = self.target
        if target is not None and target.scheme == "https":
            obj = transport.get_extra_info("ssl_object")
            sni = getattr(obj, SNI_ATTR, None)
            if sni and sni != target.host:
                self.target = target._replace(sni=sni)
        super().connection_made(transport)


class RequestHandler:
    """Relay and record the requests of every host connection (see the module doc)."""

    def __init__(
        self,
        tape: ForwardTape,
        pool: Callable[[Target], UpstreamPool],
        tails: set[asyncio.Task[None]],
    ) -> None:
        """``pool``: the upstream pool of an origin; ``tails``: where the tasks reading a
        stream's rest after its host left are kept (the engine waits for them when closing)."""
        self.tape = tape
        self.pool = pool
        self.tails = tails
        self.loop = asyncio.get_running_loop()
        #: Set when the engine closes: no stream's rest is read aside any more.
        self.stopping = False
        #: Called at message boundaries (fault rules, intercepts), as the reverse relay calls
        #: them; None — the default — costs one ``if`` per boundary.
        self.hooks: Hooks | None = None

    def upstream_of(self, ex: HookExchange) -> Upstream | None:
        """Where an exchange's request went (for hooks that send it again)."""
        target = ex.target if isinstance(ex, TapeExchange) else None
        return None if target is None else self.pool(target)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One call into the recording: a failure there is logged, never the host's problem."""
        try:
            return fn(*args)
        except Exception:
            log.exception("mcptape: the recording failed in %s", getattr(fn, "__name__", fn))
            return None

    def _begin(
        self,
        conn: TunnelFront,
        target: Target,
        req: FrontRequest,
        path: str,
        body: bytes,
        size: int | None,
        started: float,
    ) -> TapeExchange | None:
        """The request went upstream: the tape's exchange for it (None: not recorded)."""
        head = RequestHead(
            req.method,
            request_url(target.scheme, target.host, target.port, path),
            req.raw_headers,
            "HTTP/1.1" if req.version >= (1, 1) else "HTTP/1.0",
            started,
            conn.peer,
        )
        ex: TapeExchange | None = self._call(self.tape.request, head, body, size)
        if ex is not None:
            ex.target = target
        return ex

    async def handle_hooked(self, req: FrontRequest) -> RelayResponse:
        """:meth:`handle` with hooks installed: ``done`` is called once the exchange ended."""
        hooks = self.hooks
        assert hooks is not None
        box: list[TapeExchange] = []  # the exchange, once the tape made it
        try:
            return await self.handle(req, box)
        finally:
            for ex in box:
                hooks.done(ex)

    async def handle(
        self, req: FrontRequest, box: list[TapeExchange] | None = None
    ) -> RelayResponse:
        """Relay one request (``box``: with hooks, where the exchange is put once made)."""
        conn: TunnelFront = req.conn  # type: ignore[assignment]
        started = time.time()
        target = conn.target
        path = req.raw_path
        if target is None:
            absolute = self._absolute(path)
            if absolute is None:
                return plain_response(
                    400, "mcptape forward proxy: send CONNECT or an absolute http:// URL\n"
                )
            target, path = absolute
        if req.method == "CONNECT":
            return plain_response(400, "mcptape forward proxy: CONNECT inside a tunnel\n")
        upgrade = req.headers.get("upgrade")
        if upgrade is not None and upgrade.strip().lower() != "h2c":
            # Not forwarded at all: stripping the (hop-by-hop) Upgrade and relaying the request
            # would leave the host wondering why its WebSocket never opened. An h2c offer is
            # one a server may ignore: it is dropped with the hop-by-hop headers (mitmproxy's
            # DisableH2C does the same).
            return plain_response(
                501,
                "mcptape forward proxy: protocol upgrades (WebSocket) are not relayed by the "
                "lean engine; run record --forward --engine mitmproxy\n",
            )
        head_expect = req.headers.get("expect")
        if head_expect is not None and head_expect.strip().lower() == "100-continue":
            await req.send_continue()
        length = req.content_length
        # A body up to SMALL_BODY with a length is read whole (one write upstream); a larger or
        # chunked one streams through the pool's body writer (the reverse relay's path),
        # its first MAX_RECORDED_BODY bytes kept for the recording.
        stream_it = req.body_exists and (length is None or length > SMALL_BODY)
        body = await req.content.read() if req.body_exists and not stream_it else b""
        # An absolute-form target wins over the host's Host header (RFC 9112 §3.2.2).
        host_value = req.headers.get("host") if conn.target is not None else None
        host_header = (host_value or target.authority).encode("utf-8", "surrogateescape")
        head = build_request_head(
            req.method, path, req.raw_headers, host_header, body_exists=req.body_exists
        )
        ex: TapeExchange | None = None
        sent = False
        kept = Kept() if stream_it else None

        def on_sent() -> None:
            # The request went upstream (a streamed body: all of it, or the response came
            # first): now the tape is told (the bytes go first).
            nonlocal ex, sent
            if sent:
                return
            sent = True
            size = kept.size if kept is not None and kept.cut else None
            recorded = kept.take() if kept is not None else body
            ex = self._begin(conn, target, req, path, recorded, size, started)
            if box is not None and ex is not None:
                box.append(ex)

        told = on_sent  # called once the request went upstream
        went = False

        def on_went() -> None:  # with hooks the tape may be told first: when it really went
            nonlocal went
            went = True
            on_sent()

        if box is not None:
            told = on_went
        if box is not None and not stream_it:
            on_sent()  # with hooks: recorded as the host sent it, then decided
            if ex is not None and body and ex.kind == KIND_MCP:
                decided = await self._decide_request(req, ex, head, body)
                if isinstance(decided, RelayResponse):
                    return decided
                head, body = decided
        wire: bytes | AsyncIterator[bytes] | None = body or None
        if kept is not None:
            wire = streamed(req.content, kept, told)
        try:
            resp = await self.pool(target).request(
                head.head,
                wire,
                head_only=req.method == "HEAD",
                chunked=head.chunked,
                on_sent=None if stream_it else told,
            )
        except asyncio.CancelledError:
            on_sent()
            self._error(ex, "Client disconnected.")
            raise
        except Exception as exc:
            msg = str(exc) or type(exc).__name__
            if kept is not None and not sent and not kept.size:
                await drain(req.content, kept)  # never sent: read it for the recording, briefly
            if not sent:
                on_sent()
            elif (box is None or went) and "closed" not in msg.lower():
                msg = f"the upstream closed the connection before its response: {msg}"
            self._error(ex, msg, synthesized=True)
            out = plain_response(502, f"mcptape forward proxy: {msg}\n")
            out.headers["X-Mcptape-Error"] = "upstream-error"
            return out
        on_sent()  # a streamed body the upstream answered before taking it whole
        return await self._respond(req, ex, resp)

    def _host_left(self, resp: Any, ex: TapeExchange | None, copy: Copy | None) -> None:
        """The host went away while the response was coming.

        Closing the upstream connection is how a 2026-07-28 host's cancellation reaches the
        server, so that is what happens — unless the JSON-RPC response already went to the host
        (the tape saw it pass: nothing is left to cancel). The SDK closes every POST's event
        stream that way, just before the stream's end: the rest of the upstream's stream is then
        read aside (at most ``TAIL_READ`` s, recorded as the reverse proxy records it) and the
        connection goes back to the pool instead of costing the next call a TLS handshake.
        """
        if self.stopping or ex is None or not ex.responded:
            resp.close()
            self._error(ex, "Client disconnected.")
            return
        task = self.loop.create_task(self._read_tail(resp, ex, copy))
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)

    async def _read_tail(self, resp: Any, ex: TapeExchange, copy: Copy | None) -> None:
        try:
            async with asyncio.timeout(TAIL_READ):
                async for chunk in resp.content.iter_any():
                    if copy is not None:
                        copy(chunk)
            resp.release()
        except asyncio.CancelledError:
            resp.close()
            raise
        except Exception:  # timed out, or the upstream broke: the connection is not reused
            resp.close()
        finally:
            self._error(ex, "Client disconnected.")

    def _error(self, ex: TapeExchange | None, msg: str, *, synthesized: bool = False) -> None:
        """The exchange broke; ``synthesized``: the engine answers the host itself (502)."""
        if ex is not None:
            self._call(ex.error, msg, "mcptape" if synthesized else None)

    @staticmethod
    def _absolute(path: str) -> tuple[Target, str] | None:
        if not path.lower().startswith("http://"):
            return None
        rest = path[7:]
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        where = parse_authority(rest[:cut].rpartition("@")[2].encode("latin-1", "replace"), 80)
        if where is None:
            return None
        origin_path = rest[cut:] or "/"
        if origin_path.startswith("?"):
            origin_path = "/" + origin_path
        return Target("http", where[0], where[1]), origin_path

    async def _respond(
        self, req: FrontRequest, ex: TapeExchange | None, resp: Any
    ) -> RelayResponse:
        """Forward the response; the tape is told after the bytes it concerns went out."""
        arrived = time.time()
        out_raw = end_to_end(resp.raw_headers)
        rr = RelayResponse(
            status=resp.status,
            reason=resp.reason,
            raw=out_raw,
            has_length=any(k.lower() == b"content-length" for k, _ in out_raw),
        )
        if req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200:
            # No body (aiohttp hands an empty payload of its own): the head as it came — a
            # HEAD answer keeps the GET's framing headers, and none is invented.
            resp.release()
            await rr.prepare(req)
            await rr.write_eof()
            self._head(ex, resp, arrived)
            self._done(ex, b"")
            return rr
        if self.hooks is not None and ex is not None and self._small_message(ex, resp):
            # With hooks, a small MCP answer is read whole (as the reverse relay reads it) to
            # be decided as one message, even when its body comes after its head.
            try:
                body = await resp.read()
            except asyncio.CancelledError:
                resp.close()
                self._error(ex, "Client disconnected.")
                raise
            except Exception as exc:
                resp.close()
                self._ensure_head(ex, resp, arrived)
                msg = f"the upstream failed while sending the response body: {exc!r}"
                self._error(ex, msg, synthesized=True)
                return plain_response(502, f"mcptape forward proxy: {msg}\n")
            resp.release()
            return await self._decide_whole(req, ex, resp, rr, body, arrived)
        if resp.has_buffered_body() and resp.content.is_eof():
            # Whole already (a small JSON answer): head and body in one write, then the tape.
            body = await resp.read()
            resp.release()
            if self.hooks is not None and ex is not None and body and ex.kind == KIND_MCP:
                return await self._decide_whole(req, ex, resp, rr, body, arrived)
            rr.body = body
            await rr.send(req)
            if self._head(ex, resp, arrived) and ex is not None and body:
                guarded(ex.chunk)(body)
            self._done(ex, body)
            return rr
        copy: Copy | None = None
        kept: Kept | None = None
        host_write = True  # a ConnectionError while writing is the host's going
        try:
            await rr.prepare(req)
            content = resp.content
            if not resp.has_buffered_body():
                rr.flush_head()  # a quiet event stream must still show its head
            if ex is not None:
                # A copy of each chunk for the tape, if it asks for them; else the body for
                # its end, up to MAX_RECORDED_BODY (other traffic: never held in memory).
                if self._head(ex, resp, arrived):
                    copy = guarded(ex.chunk)
                else:
                    kept = Kept()
            if self.hooks is not None and copy is not None and self._events_hooked(ex):
                assert ex is not None and self.hooks is not None
                host_write = False  # the host's going shows as its connection gone
                how = await self._events(req, rr, ex, content.iter_any(), self.hooks)
                if how != RESET:
                    await rr.write_eof()
                    self._done(ex, b"")
                if how == ENDED:
                    resp.release()
                else:  # ended or reset by a hook: the upstream's rest is not read
                    resp.close()
                return rr
            last = False
            while not last:
                chunk = await content.readany()
                # The body's last bytes go out with its end (one write, one TLS record).
                last = not chunk or content.at_eof()
                host_write = True
                if last:
                    await rr.write_eof(chunk)
                else:
                    await rr.write(chunk)
                host_write = False
                if not chunk:
                    break
                if copy is not None:
                    copy(chunk)  # a copy, after it went
                elif kept is not None:
                    kept.add(chunk)
            resp.release()
        except asyncio.CancelledError:
            self._ensure_head(ex, resp, arrived)
            self._host_left(resp, ex, copy)
            raise
        except ConnectionError as exc:
            self._ensure_head(ex, resp, arrived)
            conn = req.conn
            if host_write or (isinstance(conn, TunnelFront) and conn.gone):
                self._host_left(resp, ex, copy)
            else:
                resp.close()
                self._error(ex, f"peer closed connection: {exc}")
            raise
        except Exception as exc:
            self._ensure_head(ex, resp, arrived)
            resp.close()
            self._error(ex, f"peer closed connection: {exc or type(exc).__name__}")
            raise ConnectionResetError(str(exc)) from exc
        if kept is not None:
            self._done(ex, kept.take(), kept.size if kept.cut else None)
        else:
            self._done(ex, b"")
        return rr

    def _head(self, ex: TapeExchange | None, resp: Any, arrived: float) -> bool:
        """The response's head to the tape; True: it copies the body chunk by chunk."""
        if ex is None:
            return False
        head = ResponseHead(resp.status, resp.reason or "", resp.raw_headers, arrived)
        copying = bool(self._call(ex.response_head, head))
        if self.hooks is not None:
            self.hooks.response_head(ex, resp.status)
        return copying

    def _ensure_head(self, ex: TapeExchange | None, resp: Any, arrived: float) -> None:
        if ex is not None and ex.response is None:
            self._head(ex, resp, arrived)

    def _done(self, ex: TapeExchange | None, body: bytes, size: int | None = None) -> None:
        """The response went out whole: its end (and body, unless it was copied) to the tape."""
        if ex is not None:
            self._call(ex.done, None if ex.streamed else body, size, time.time())

    # ------------------------------------------------------------------ hooks' verdicts
    @staticmethod
    def _small_message(ex: TapeExchange, resp: Any) -> bool:
        """An MCP answer with a body of at most ``SMALL_RESPONSE`` bytes that is no event
        stream: decided as one message."""
        length = resp.content_length
        if ex.kind != KIND_MCP or length is None or not 0 < length <= SMALL_RESPONSE:
            return False
        ctype = resp.headers.get("Content-Type", "")
        return not is_event_stream(ctype)

    def _events_hooked(self, ex: TapeExchange | None) -> bool:
        """The body is an event stream of MCP messages (or one that may be) and hooks decide
        each event."""
        return (
            self.hooks is not None
            and ex is not None
            and ex.parser is not None
            and ex.kind in (KIND_MCP, KIND_MAYBE)
        )

    async def _decide_request(
        self, req: FrontRequest, ex: TapeExchange, head: WireHead, body: bytes
    ) -> RelayResponse | tuple[WireHead, bytes]:
        """The hooks' verdict on a request body before it goes upstream, carried out."""
        assert self.hooks is not None
        try:
            v = await self.hooks.request_body(ex, head.head, body)
            if v.act is Act.ANSWER:
                return self._answer(ex, v)
            if v.act in ENDS:
                return self._reset(req, ex, v.why)
            out = await carried(v, body, withhold=True)  # a drop: until the host gives up
        except asyncio.CancelledError:
            self._error(ex, "Client disconnected.")
            raise
        assert out is not None
        if out is not body:
            head = with_content_length(head, len(body), len(out))
        return head, out

    async def _decide_whole(
        self,
        req: FrontRequest,
        ex: TapeExchange,
        resp: Any,
        rr: RelayResponse,
        body: bytes,
        arrived: float,
    ) -> RelayResponse:
        """A response whole at once, with hooks: recorded as the upstream sent it, decided
        (one JSON message, or each event of an event stream), then what was decided sent."""
        assert self.hooks is not None
        copying = self._head(ex, resp, arrived)
        try:
            if copying and self._events_hooked(ex):
                await rr.prepare(req)
                if await self._events(req, rr, ex, _once(body), self.hooks) != RESET:
                    await rr.write_eof()
                    self._done(ex, b"")
                return rr
            if copying:  # not an event stream: a large body goes as it came
                rr.body = body
                await rr.send(req)
                guarded(ex.chunk)(body)
                self._done(ex, body)
                return rr
            self._call(ex.message, body)
            v = await self.hooks.message(ex, body)
            if v.act is Act.ANSWER:
                return self._answer(ex, v)
            if v.act in ENDS:
                return self._reset(req, ex, v.why)
            out = await carried(v, body, withhold=True)  # a drop: until the host gives up
            assert out is not None
            if len(out) != len(body):
                rr.set_header("Content-Length", str(len(out)))
            rr.body = out
            await rr.send(req)
        except (asyncio.CancelledError, ConnectionError):  # the host left
            self._error(ex, "Client disconnected.")
            raise
        self._done(ex, out)
        return rr

    async def _events(
        self,
        req: FrontRequest,
        rr: RelayResponse,
        ex: TapeExchange,
        chunks: AsyncIterator[bytes],
        hooks: Hooks,
    ) -> str:
        """An event stream event by event: each recorded as the upstream sent it, decided,
        then carried out (the reverse relay's order). How it ended: ``ENDED`` (the upstream
        ended it), ``CUT`` (a hook ended it cleanly) or ``RESET`` (a hook reset the host)."""

        async def send(data: bytes) -> None:
            await rr.write(data)

        parser = SSEParser()
        async for chunk in chunks:
            for ev in parser.feed(chunk):
                self._call(ex.chunk, ev.raw)
                if ex.kind != KIND_MCP:  # a GET stream that is not MCP: not decided
                    await rr.write(ev.raw)
                    continue
                v = await hooks.event(ex, ev, send)
                if v.act is Act.END:
                    return CUT
                if v.act in ENDS:
                    self._reset(req, ex, v.why)
                    return RESET
                out = await carried(v, ev.raw, withhold=False)
                if out is not None:
                    await rr.write(out)
        rest = parser.flush()
        if rest is not None:
            self._call(ex.chunk, rest.raw)
            await rr.write(rest.raw)
        await hooks.stream_end(ex)
        return ENDED

    def _answer(self, ex: TapeExchange, v: Verdict) -> RelayResponse:
        """A hook answers the host in the upstream's place."""
        body = v.data or b""
        self._call(ex.answered, v.status, v.headers, len(body))
        return RelayResponse(status=v.status, headers=v.headers, body=body)

    def _reset(self, req: FrontRequest, ex: TapeExchange, where: str) -> RelayResponse:
        """A hook resets the host's connection: it sees the peer go away."""
        transport = req.transport
        if transport is not None:
            transport.abort()
        self._call(ex.ended, "injected_reset", f"mcptape reset the host's connection ({where})")
        return plain_response(500)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


Copy = Callable[[bytes], None]


def guarded(chunk: Copy) -> Copy:
    """The tape's chunk copier, given copies only: the bytes already went to the host, so a
    failure in it is logged once and ends the copying — never the host's stream."""
    broken = False

    def copy(data: bytes) -> None:
        nonlocal broken
        if broken:
            return
        try:
            chunk(data)
        except Exception:
            broken = True
            log.exception("mcptape: copying a chunk for the recording failed; the rest is not")

    return copy
