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
3. the response is forwarded as the reverse relay forwards it: a small body with a length
   (up to ``SMALL_RESPONSE``, no event stream) read whole and sent in one write (with hooks, an
   MCP answer decided first by the relay's :func:`~mcp_proxy.relay.http.response.
   decide_message`); any other on the reverse relay's streaming copy (:func:`~mcp_proxy.
   relay.http.stream.copy_body` with a :class:`~mcp_proxy.forward.verdicts.TapeSide`: chunk
   by chunk, a head whose body is not in yet held up to ``HEAD_HOLD`` to go out with the
   body's first bytes; with hooks, an event stream event by event); the exchange is told of
   its head, gets a copy of each chunk it asked to copy (after the chunk went to the host),
   then its end — or the error.

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
    KIND_MCP,
    RequestHead,
    TapeExchange,
)
from mcp_proxy.forward.recognize import is_event_stream
from mcp_proxy.forward.tape import ForwardTape, request_url
from mcp_proxy.forward.tunnel import Target, parse_authority
from mcp_proxy.forward.verdicts import Copy, TapeSide, Taping, Verdicts, guarded
from mcp_proxy.framing import SSEParser
from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import SMALL_BODY, SMALL_RESPONSE
from mcp_proxy.relay.http.forward import build_request_head
from mcp_proxy.relay.http.front import (
    FrontProtocol,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.hooks import HookExchange, Hooks
from mcp_proxy.relay.http.kept import Kept, drain, streamed
from mcp_proxy.relay.http.response import decide_message
from mcp_proxy.relay.http.stream import ENDED, RESET, copy_body, read_tail
from mcp_proxy.relay.http.upstream import Upstream, UpstreamPool

__all__ = ["RequestHandler", "TunnelFront"]

log = logging.getLogger("mcptape.forward")


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
        keep: Callable[[asyncio.Task[None]], None],
    ) -> None:
        """``pool``: the upstream pool of an origin; ``keep``: where a task reading a stream's
        rest after its host left is kept (the engine waits for it when closing)."""
        self.tape = tape
        self.pool = pool
        self.keep = keep
        self.loop = asyncio.get_running_loop()
        #: Set when the engine closes: no stream's rest is read aside any more.
        self.stopping = False
        #: Called at message boundaries (fault rules, intercepts), as the reverse relay calls
        #: them; None — the default — costs one ``if`` per boundary.
        #: Each call into the tape, guarded.
        self.taping = Taping()
        #: The hooks' verdicts carried out (None without hooks).
        self.verdicts: Verdicts | None = None

    @property
    def hooks(self) -> Hooks | None:
        return self.taping.hooks

    @hooks.setter
    def hooks(self, hooks: Hooks | None) -> None:
        self.taping.hooks = hooks
        self.verdicts = None if hooks is None else Verdicts(hooks, self.taping)

    def upstream_of(self, ex: HookExchange) -> Upstream | None:
        """Where an exchange's request went (for hooks that send it again)."""
        target = ex.target if isinstance(ex, TapeExchange) else None
        return None if target is None else self.pool(target)

    def _begin(
        self,
        conn: TunnelFront,
        target: Target,
        req: FrontRequest,
        path: str,
        body: bytes,
        size: int | None,
        started: float,
        taken: bool,
    ) -> TapeExchange | None:
        """The request went upstream: the tape's exchange for it (None: not recorded).
        ``taken``: False when the upstream answered before taking all of a streamed body."""
        head = RequestHead(
            req.method,
            request_url(target.scheme, target.host, target.port, path),
            req.raw_headers,
            "HTTP/1.1" if req.version >= (1, 1) else "HTTP/1.0",
            started,
            conn.peer,
        )
        ex: TapeExchange | None = self.taping.call(self.tape.request, head, body, size, taken)
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
        taken = True  # the upstream took the whole body (False: it answered first)

        def on_sent() -> None:
            # The request went upstream (a streamed body: all of it, or the response came
            # first): now the tape is told (the bytes go first).
            nonlocal ex, sent
            if sent:
                return
            sent = True
            size = kept.size if kept is not None and kept.cut else None
            recorded = kept.take() if kept is not None else body
            ex = self._begin(conn, target, req, path, recorded, size, started, taken)
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
                assert self.verdicts is not None
                decided = await self.verdicts.decide_request(req, ex, head, body)
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
            self.taping.error(ex, "Client disconnected.")
            raise
        except Exception as exc:
            msg = str(exc) or type(exc).__name__
            if kept is not None and not sent and not kept.size:
                await drain(req.content, kept)  # never sent: read it for the recording, briefly
            if not sent:
                on_sent()
            elif (box is None or went) and "closed" not in msg.lower():
                msg = f"the upstream closed the connection before its response: {msg}"
            self.taping.error(ex, msg, synthesized=True)
            out = plain_response(502, f"mcptape forward proxy: {msg}\n")
            out.headers["X-Mcptape-Error"] = "upstream-error"
            return out
        if not sent:  # a streamed body the upstream answered before taking it whole
            taken = False
            on_sent()
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
            self.taping.error(ex, "Client disconnected.")
            return
        self.keep(self.loop.create_task(self._read_tail(resp, ex, copy)))

    async def _read_tail(self, resp: Any, ex: TapeExchange, copy: Copy | None) -> None:
        try:
            await read_tail(resp, copy if copy is not None else _ignore)
        finally:
            self.taping.error(ex, "Client disconnected.")

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
            self.taping.head(ex, resp, arrived)
            self.taping.done(ex, b"")
            return rr
        verdicts = self.verdicts
        length = resp.content_length
        if (
            length is not None
            and length <= SMALL_RESPONSE
            and not is_event_stream(resp.content_type)
        ):
            # A small body with a length is read whole and goes in one write, as the reverse
            # relay sends it (ResponsePath.respond_small); with hooks, an MCP answer is decided
            # first as one message, by the reverse relay's own decision.
            try:
                body = await resp.read()
            except asyncio.CancelledError:
                resp.close()
                self.taping.error(ex, "Client disconnected.")
                raise
            except Exception as exc:  # the upstream broke its body: the host's connection too
                resp.close()
                self.taping.ensure_head(ex, resp, arrived)
                self.taping.error(ex, f"peer closed connection: {exc or type(exc).__name__}")
                raise ConnectionResetError(str(exc)) from exc
            resp.release()
            try:
                if verdicts is not None and ex is not None and body and ex.kind == KIND_MCP:
                    self.taping.head(ex, resp, arrived)  # recorded as it came, then decided
                    side = TapeSide(req, rr, self.taping, ex)
                    out = await decide_message(verdicts.hooks, ex, side, rr, body)
                    if isinstance(out, RelayResponse):
                        return out
                    rr.body = out
                    await rr.send(req)
                    self.taping.done(ex, out)
                    return rr
                rr.body = body
                await rr.send(req)  # head and body: one write, then the tape
            except (asyncio.CancelledError, ConnectionError):  # the host left
                self.taping.ensure_head(ex, resp, arrived)
                self.taping.error(ex, "Client disconnected.")
                raise
            if self.taping.head(ex, resp, arrived) and ex is not None and body:
                guarded(ex.chunk)(body)
            self.taping.done(ex, body)
            return rr
        # The rest streams through the reverse relay's copy (relay/http/stream.py), with the
        # tape on its side: a copy of each chunk for the tape if it asks for them (after the
        # chunk went); else the body for its end, up to MAX_RECORDED_BODY (other traffic:
        # never held in memory).
        side = TapeSide(req, rr, self.taping, ex)
        hooked: tuple[Hooks, HookExchange, SSEParser] | None = None
        try:
            if ex is not None:
                if self.taping.head(ex, resp, arrived):
                    side.copy = guarded(ex.chunk)
                    if verdicts is not None and verdicts.events_hooked(ex):
                        hooked = (verdicts.hooks, ex, SSEParser())
                else:
                    side.kept = Kept()
            how = await copy_body(req, rr, resp, side, None, hooked)
            if how != RESET:  # after a reset nothing more reaches the host
                await rr.write_eof()
        except asyncio.CancelledError:
            self.taping.ensure_head(ex, resp, arrived)
            self._host_left(resp, ex, side.copy)
            raise
        except ConnectionError as exc:
            self.taping.ensure_head(ex, resp, arrived)
            conn = req.conn
            if host_gone(req) or (isinstance(conn, TunnelFront) and conn.gone):
                self._host_left(resp, ex, side.copy)
            else:
                rr.flush_head()  # the upstream's going: the host sees the head, then the cut
                resp.close()
                self.taping.error(ex, f"peer closed connection: {exc}")
            raise
        except Exception as exc:
            self.taping.ensure_head(ex, resp, arrived)
            rr.flush_head()  # the upstream broke its body: the host sees the head, then the cut
            resp.close()
            self.taping.error(ex, f"peer closed connection: {exc or type(exc).__name__}")
            raise ConnectionResetError(str(exc)) from exc
        if how == ENDED or resp.content.at_eof():  # read to its end: the connection serves on
            resp.release()
        else:  # ended or reset by a hook: the upstream's rest is not read
            resp.close()
            if how == RESET:
                return rr
        if side.kept is not None:
            self.taping.done(ex, side.kept.take(), side.kept.size if side.kept.cut else None)
        else:
            self.taping.done(ex, b"")
        return rr


def host_gone(req: FrontRequest) -> bool:
    """The host's connection is closing or gone: a ConnectionError is then the host's going
    (the front refuses to write only to such a connection), not the upstream's."""
    transport = req.transport
    return transport is None or transport.is_closing()


def _ignore(_chunk: bytes) -> None:
    """The rest of a body nobody copies (read only so the connection can serve again)."""
