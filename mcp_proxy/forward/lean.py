"""The lean forward engine: mcptape's own CONNECT proxy, driving the same mitmproxy addon.

Why it exists: through mitmproxy, one MCP call over a fresh HTTPS connection — what the Python
SDK does for every call of the 2025-11-25 era — cost the proxy 6.6–13 ms of CPU (tuned and as
shipped, by machine), nearly all of it the Python of mitmproxy's layers (events, commands, hooks
per connection and per request; ``benchmarks/bench_forward.py --profile``), and a forwarded call
took 2.3–3 times a direct one. On the relay's own core (httptools, a pooled upstream) the same
call costs the proxy about 2 ms, ×1.4 (docs/forward-proxy.md has the figures). mitmproxy stays one flag away (``--engine mitmproxy``) and is chosen by itself when
``config.yaml`` asks for what only it does (scripts, proxy auth, upstream proxies, …).

What it is, per host connection:

1. **The proxy request.** ``CONNECT host:port`` is answered ``200`` and becomes a tunnel; an
   absolute-form ``GET http://…`` request (``HTTP_PROXY``) is handled as plain HTTP.
2. **The tunnel's first bytes** say what it carries: a TLS ClientHello is intercepted with a
   certificate for the host, made from mitmproxy's CA (the same files, the same trust as the
   mitmproxy engine; ALPN offers ``http/1.1`` only, so a host offering ``h2`` falls back, as
   RFC 7301 has it); a plain HTTP request is relayed as ``http``; anything else is piped to
   ``host:port`` untouched and unrecorded (the upstream is dialled once the host spoke first,
   as with mitmproxy's lazy connection strategy).
3. **Each HTTP request** is parsed by the relay's host-facing server
   (:mod:`mcp_proxy.relay.http.front`), its body read whole up to ``SMALL_BODY`` (larger or
   chunked: streamed upstream, the first ``MAX_RECORDED_BODY`` bytes kept for the addon), its
   head rewritten by :func:`~mcp_proxy.relay.http.forward.build_request_head` (hop-by-hop headers
   dropped, every other byte as the host sent it) and sent over a keep-alive connection pooled
   per upstream origin (:class:`~mcp_proxy.relay.http.upstream.UpstreamPool`) — shared by all of
   a host's connections, so a host that reconnects per call costs one TLS handshake (the host's)
   instead of two. The pools live in a :class:`~mcp_proxy.bounded.IdleLru` (at most
   ``MAX_UPSTREAM_POOLS``); its timer closes connections idle past ``UPSTREAM_IDLE`` and drops
   pools unused as long.
4. **The response** is forwarded as it arrives, chunk by chunk (event streams included: each
   event reaches the host when the upstream wrote it); a response that is whole at once goes out
   in one write. Headers are forwarded but the hop-by-hop ones, those ``Connection`` names too
   (:func:`mcp_proxy.headers.end_to_end`); the addon gets at most ``MAX_RECORDED_BODY`` bytes of
   a body it does not stream.

The addon (:class:`~mcp_proxy.forward.addon.McpTape`) sees what mitmproxy would show it: an
``HTTPFlow`` with ``request`` (after the request went upstream — the bytes go first),
``responseheaders``, then ``response`` with the whole body, or ``error`` (upstream unreachable,
TLS refused, reset mid-body, host gone). A ``stream`` callable it sets is handed each chunk
*after* the chunk was written to the host: the lean engine forwards, the addon records a copy,
and nothing can rewrite the bytes. Only mcptape's addon runs here.

Its other rooms: :mod:`mcp_proxy.forward.contexts` (the TLS contexts on both sides),
:mod:`mcp_proxy.forward.tunnel` (where a tunnel goes, raw pipes) and
:mod:`mcp_proxy.forward.guard` (who may connect beyond loopback).

Errors the engine answers itself: ``502`` (upstream unreachable, TLS with it failed, closed
before its response) with the reason in the body and ``X-Mcptape-Error``, ``400`` for a
malformed proxy request, ``501`` for protocol upgrades (WebSocket) inside a tunnel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from mcp_proxy.bounded import IdleLru
from mcp_proxy.forward.bodies import Kept, drain, stream_body
from mcp_proxy.forward.contexts import SNI_ATTR, LeafContexts
from mcp_proxy.forward.tunnel import Pipe, Target, feed, parse_authority
from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import (
    ENTRY_IDLE,
    HANDSHAKE_TIMEOUT,
    MAX_IDLE_PER_POOL,
    MAX_PROXY_HEAD,
    MAX_UPSTREAM_POOLS,
    POOL_SWEEP_INTERVAL,
    SMALL_BODY,
    TAIL_READ,
    UPSTREAM_IDLE,
)
from mcp_proxy.relay.http.forward import build_request_head
from mcp_proxy.relay.http.front import (
    FrontProtocol,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.upstream import UpstreamPool

__all__ = [
    "LEAN_OPTIONS",
    "REQUEST_SIZE",
    "RESPONSE_SIZE",
    "LeanForward",
    "print_refused",
]

log = logging.getLogger("mcptape.forward")

#: ``config.yaml`` options the lean engine honours; any other one selects the mitmproxy engine.
LEAN_OPTIONS = frozenset(
    {
        "ssl_insecure",
        "ssl_verify_upstream_trusted_ca",
        "ssl_verify_upstream_trusted_confdir",
        "connection_strategy",  # lean is always lazy; "eager" selects mitmproxy (see runner)
        "block_global",
        "block_private",
    }
)
#: ``flow.metadata`` keys: the whole size of a streamed body when the flow holds only the first
#: ``MAX_RECORDED_BODY`` bytes of it (the addon then records the frame as cut).
REQUEST_SIZE = "mcptape_request_size"
RESPONSE_SIZE = "mcptape_response_size"
_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")
_CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"


class TunnelFront(FrontProtocol):
    """The HTTP side of one host connection: in a tunnel to ``target``, or (``target`` None)
    absolute-form requests to any origin."""

    def __init__(self, server: FrontServer, target: Target | None, client: Any) -> None:
        super().__init__(server)
        self.target = target
        self.client = client
        self.server_conn: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Called once the host's TLS handshake is done: the SNI it sent is known then.
        target = self.target
        if target is not None and target.scheme == "https":
            obj = transport.get_extra_info("ssl_object")
            sni = getattr(obj, SNI_ATTR, None)
            if sni and sni != target.host:
                self.target = target._replace(sni=sni)
                self.client.sni = sni
        super().connection_made(transport)


class _Entry(asyncio.Protocol):
    """A new host connection until it is a tunnel or an HTTP connection (see the module doc)."""

    def __init__(self, engine: LeanForward) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.target: Target | None = None
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.engine.pending.add(transport)  # type: ignore[arg-type]
        if self.engine.guard is not None and not self.engine.guard(transport):
            transport.close()
            return
        self.idle = self.engine.loop.call_later(ENTRY_IDLE, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._handed_on()

    def _handed_on(self) -> None:
        """This connection is no longer waiting on its first bytes (or is gone)."""
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        if self.transport is not None:
            self.engine.pending.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if self.target is not None:
            self._handed_on()
            self.engine.open_tunnel(transport, self.target, data)
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or end > MAX_PROXY_HEAD:
            if len(self.buf) > MAX_PROXY_HEAD:
                self._refuse(431, "proxy request head too large")
            return
        line = bytes(self.buf[: self.buf.find(b"\r\n")])
        parts = line.split(b" ")
        if parts[0] != b"CONNECT":
            # An absolute-form request (plain-HTTP proxying): the HTTP server takes over.
            self._handed_on()
            self.engine.serve_http(transport, None, bytes(self.buf))
            return
        where = parse_authority(parts[1], 443) if len(parts) == 3 else None
        if where is None:
            self._refuse(400, "malformed CONNECT request")
            return
        self.target = Target("https", where[0], where[1])
        rest = bytes(self.buf[end + 4 :])
        self.buf = bytearray()
        transport.write(_CONNECTED)
        if rest:
            self.data_received(rest)

    def _refuse(self, status: int, text: str) -> None:
        body = f"mcptape forward proxy: {text}\n".encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (status, HTTPStatus(status).phrase.encode(), len(body), body)
        )
        self.transport.close()


class LeanForward:
    """The engine: listen, tunnel, intercept, relay; the addon's hooks per flow."""

    def __init__(
        self,
        addon: Any,
        leaves: LeafContexts,
        upstream_ssl: ssl.SSLContext,
        *,
        on_tls_refused: Callable[[str, str], None] | None = None,
        guard: Callable[[asyncio.BaseTransport], bool] | None = None,
        upstream_idle: float = UPSTREAM_IDLE,
    ) -> None:
        """``guard``: asked for each new host connection (False: it is closed at once); see
        :class:`ClientGuard` — not needed when listening on loopback only. ``upstream_idle``:
        seconds an upstream connection (and a per-origin pool) stays unused before it is
        closed."""
        from mitmproxy import connection, flow, http

        self._connection = connection
        self._http = http
        self._Error = flow.Error
        self.addon = addon
        self.leaves = leaves
        self.upstream_ssl = upstream_ssl
        self.loop = asyncio.get_running_loop()
        self.front = FrontServer(self.handle, self._log_error)
        self.upstream_idle = upstream_idle
        #: One pool per upstream origin, the least recently used dropped past
        #: MAX_UPSTREAM_POOLS; a timer closes idle connections and drops idle pools.
        self.pools: IdleLru[Target, UpstreamPool] = IdleLru(
            MAX_UPSTREAM_POOLS, upstream_idle, lambda _, pool: pool.close_idle()
        )
        self.pools.arm(self.loop, min(POOL_SWEEP_INTERVAL, upstream_idle), UpstreamPool.sweep)
        self.pending: set[asyncio.Transport] = set()
        self.pipes: set[asyncio.Transport] = set()
        self.on_tls_refused = on_tls_refused
        self.guard = guard
        #: Upstream streams read to their end after their host left (see _host_left).
        self.tails: set[asyncio.Task[None]] = set()
        self.stopping = False
        self._server: asyncio.Server | None = None
        self._ssl_protocol = self._ssl_protocol_class()

    def _ssl_protocol_class(self) -> Any:
        """uvloop's TLS protocol (Cython) on its loop, asyncio's otherwise."""
        if type(self.loop).__module__.startswith("uvloop"):
            with contextlib.suppress(ImportError, AttributeError):
                from uvloop.loop import SSLProtocol as UvSSLProtocol  # type: ignore[attr-defined]

                return UvSSLProtocol
        from asyncio.sslproto import SSLProtocol

        return SSLProtocol

    # ------------------------------------------------------------------ lifecycle
    async def listen(self, host: str, port: int) -> tuple[str, int]:
        self._server = await self.loop.create_server(
            lambda: _Entry(self), host, port, reuse_address=True, backlog=1024
        )
        name = self._server.sockets[0].getsockname()
        return str(name[0]), int(name[1])

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, let running requests finish (``grace`` s), close everything."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for t in list(self.pending) + list(self.pipes):
            t.close()
        await self.front.close(grace)
        for task in list(self.tails):
            task.cancel()
        if self.tails:
            await asyncio.wait(list(self.tails), timeout=grace)
        for pool in self.pools.clear():
            await pool.close()
        # The addon finishes what the closing handlers reported with call_soon (its error
        # hook): let that run before the caller closes the addon and its recorder.
        for _ in range(3):
            await asyncio.sleep(0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    def _log_error(self, req: FrontRequest) -> None:
        log.exception("mcptape: forward proxy: internal error on %s %s", req.method, req.raw_path)

    # ------------------------------------------------------------------ connections
    def _client(self, transport: asyncio.BaseTransport) -> Any:
        peer = transport.get_extra_info("peername") or ("", 0)
        sock = transport.get_extra_info("sockname") or ("", 0)
        return self._connection.Client(
            peername=tuple(peer[:2]), sockname=tuple(sock[:2]), timestamp_start=time.time()
        )

    def serve_http(self, transport: asyncio.Transport, target: Target | None, data: bytes) -> None:
        """Hand a connection (plain, or a tunnel carrying plain HTTP) to the HTTP server."""
        front = TunnelFront(self.front, target, self._client(transport))
        transport.set_protocol(front)
        front.connection_made(transport)
        if data:
            front.data_received(data)

    def open_tunnel(self, transport: asyncio.Transport, target: Target, data: bytes) -> None:
        """The tunnel's first bytes are in: TLS, plain HTTP or anything else."""
        if data[:1] == b"\x16":
            self._intercept(transport, target, data)
        elif data.startswith(_HTTP_METHODS):
            self.serve_http(transport, Target("http", target.host, target.port), data)
        else:
            self._pipe(transport, target, data)

    def _intercept(self, transport: asyncio.Transport, target: Target, hello: bytes) -> None:
        try:
            leaf = self.leaves.context(target.host)
        except Exception as exc:  # a name no certificate can carry ("a..b")
            transport.close()
            print(
                f"mcptape: forward proxy: no certificate can name {target.host!r} ({exc}); "
                "the tunnel was closed",
                file=sys.stderr,
                flush=True,
            )
            return
        client = self._client(transport)
        front = TunnelFront(self.front, target, client)
        client.tls = True
        waiter = self.loop.create_future()
        proto = self._ssl_protocol(
            self.loop,
            front,
            leaf,
            waiter,
            server_side=True,
            call_connection_made=True,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
        )
        transport.set_protocol(proto)
        proto.connection_made(transport)
        feed(proto, hello)  # the ClientHello, read to tell TLS from the rest
        waiter.add_done_callback(lambda f: self._handshake_done(f, transport, target))

    def _handshake_done(
        self, fut: asyncio.Future[None], transport: asyncio.Transport, target: Target
    ) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is None:
            return
        transport.close()
        if self.on_tls_refused is None:
            return
        if isinstance(exc, ssl.SSLError) and exc.reason:
            if "ALERT" not in exc.reason and "CERTIFICATE" not in exc.reason:
                return  # not a refusal of the certificate (no TLS at all, a broken hello…)
            self.on_tls_refused(target.host, str(exc.reason))
        elif not isinstance(exc, TimeoutError):
            # Python hosts (asyncio TLS) refuse a certificate by closing, without an alert.
            why = str(exc) or type(exc).__name__
            self.on_tls_refused(target.host, f"closed during the handshake: {why}")

    def _pipe(self, transport: asyncio.Transport, target: Target, first: bytes) -> None:
        transport.pause_reading()
        self.pipes.add(transport)

        def done() -> None:
            self.pipes.discard(transport)

        async def connect() -> None:
            try:
                up, _ = await self.loop.create_connection(
                    lambda: Pipe(transport, done), target.host, target.port
                )
            except (OSError, UnicodeError, ValueError):  # refused, unresolvable, not a name
                transport.close()
                done()
                return
            if transport.is_closing():  # the host left while the upstream was dialled
                up.close()
                return
            down = Pipe(up, done)  # type: ignore[arg-type]
            up_half: Pipe = up.get_protocol()  # type: ignore[assignment]
            down.other, up_half.other = up_half, down
            transport.set_protocol(down)
            down.connection_made(transport)
            up.write(first)
            transport.resume_reading()

        task = self.loop.create_task(connect())
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)

    def pool(self, target: Target) -> UpstreamPool:
        pool = self.pools.get(target)
        if pool is None:
            pool = UpstreamPool(
                target.host,
                target.port,
                tls=target.scheme == "https",
                keepalive=self.upstream_idle,
                max_idle=MAX_IDLE_PER_POOL,
                ssl_context=self.upstream_ssl if target.scheme == "https" else None,
                server_hostname=target.sni,
            )
            self.pools.put(target, pool)
        return pool

    # ------------------------------------------------------------------ requests
    def _hook(self, name: str, flow: Any) -> None:
        """One addon hook; an addon failure is logged, never the host's problem."""
        fn = getattr(self.addon, name, None)
        if fn is None:
            return
        try:
            fn(flow)
        except Exception:
            log.exception("mcptape: the addon failed in %s", name)

    def _flow(
        self,
        conn: TunnelFront,
        target: Target,
        req: FrontRequest,
        path: str,
        body: bytes,
        started: float,
    ) -> Any:
        server = conn.server_conn
        if server is None or conn.target is None:
            server = self._connection.Server(address=(target.host, target.port))
            if conn.target is not None:
                conn.server_conn = server
        flow = self._http.HTTPFlow(conn.client, server, live=True)
        flow.metadata["mcptape_engine"] = "mcptape"
        flow.request = self._http.Request(
            # Bracketed IPv6: mitmproxy builds its URLs by joining host and port as they are.
            f"[{target.host}]" if ":" in target.host else target.host,
            target.port,
            req.method.encode("ascii", "replace"),
            target.scheme.encode(),
            b"",
            path.encode("utf-8", "surrogateescape"),
            b"HTTP/1.1" if req.version >= (1, 1) else b"HTTP/1.0",
            tuple(req.raw_headers),
            body,
            None,
            started,
            time.time(),
        )
        return flow

    async def handle(self, req: FrontRequest) -> RelayResponse:
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
        streamed = req.body_exists and (length is None or length > SMALL_BODY)
        body = await req.content.read() if req.body_exists and not streamed else b""
        # An absolute-form target wins over the host's Host header (RFC 9112 §3.2.2).
        host_value = req.headers.get("host") if conn.target is not None else None
        host_header = (host_value or target.authority).encode("utf-8", "surrogateescape")
        head = build_request_head(
            req.method, path, req.raw_headers, host_header, body_exists=req.body_exists
        )
        flow: Any = None
        kept = Kept() if streamed else None

        def on_sent() -> None:
            # The request went upstream (a streamed body: all of it, or the response came
            # first): now the addon gets its flow (the bytes go first).
            nonlocal flow
            if flow is not None:
                return
            sent = body
            if kept is not None:
                sent = kept.take()
            flow = self._flow(conn, target, req, path, sent, started)
            if kept is not None and kept.cut:
                flow.metadata[REQUEST_SIZE] = kept.size
            self._hook("request", flow)

        wire: bytes | AsyncIterator[bytes] | None = body or None
        if kept is not None:
            wire = stream_body(req, kept, on_sent)
        try:
            resp = await self.pool(target).request(
                head.head,
                wire,
                head_only=req.method == "HEAD",
                chunked=head.chunked,
                on_sent=None if streamed else on_sent,
            )
        except asyncio.CancelledError:
            on_sent()
            self._error(flow, "Client disconnected.")
            raise
        except Exception as exc:
            msg = str(exc) or type(exc).__name__
            if kept is not None and flow is None and not kept.size:
                await drain(req, kept)  # never sent: read it for the recording, briefly
            if flow is None:
                on_sent()
            elif "closed" not in msg.lower():
                msg = f"the upstream closed the connection before its response: {msg}"
            self._error(flow, msg)
            out = plain_response(502, f"mcptape forward proxy: {msg}\n")
            out.headers["X-Mcptape-Error"] = "upstream-error"
            return out
        on_sent()  # a streamed body the upstream answered before taking it whole
        return await self._respond(req, flow, resp)

    def _host_left(self, resp: Any, flow: Any, tee: Callable[[bytes], Any] | None) -> None:
        """The host went away while the response was coming.

        Closing the upstream connection is how a 2026-07-28 host's cancellation reaches the
        server, so that is what happens — unless the JSON-RPC response already went to the host
        (the addon saw it pass: nothing is left to cancel). The SDK closes every POST's event
        stream that way, just before the stream's end: the rest of the upstream's stream is then
        read aside (at most ``TAIL_READ`` s, recorded as the reverse proxy records it) and the
        connection goes back to the pool instead of costing the next call a TLS handshake.
        """
        ex = flow.metadata.get("mcptape")
        if self.stopping or not getattr(ex, "responded", False):
            resp.close()
            self._error(flow, "Client disconnected.")
            return
        task = self.loop.create_task(self._read_tail(resp, flow, tee))
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)

    async def _read_tail(self, resp: Any, flow: Any, tee: Callable[[bytes], Any] | None) -> None:
        try:
            async with asyncio.timeout(TAIL_READ):
                async for chunk in resp.content.iter_any():
                    if tee is not None:
                        tee(chunk)
            resp.release()
        except asyncio.CancelledError:
            resp.close()
            raise
        except Exception:  # timed out, or the upstream broke: the connection is not reused
            resp.close()
        finally:
            self._error(flow, "Client disconnected.")

    def _error(self, flow: Any, msg: str) -> None:
        flow.error = self._Error(msg)
        self._hook("error", flow)

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

    async def _respond(self, req: FrontRequest, flow: Any, resp: Any) -> RelayResponse:
        """Forward the response; the addon's hooks run after the bytes they concern went out."""
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
            self._response_headers(flow, resp, arrived)
            self._responded(flow, b"")
            return rr
        if resp.has_buffered_body() and resp.content.is_eof():
            # Whole already (a small JSON answer): head and body in one write, then the addon.
            body = await resp.read()
            resp.release()
            rr.body = body
            await rr.send(req)
            tee = self._response_headers(flow, resp, arrived)
            if tee is not None and body:
                tee(body)
            self._responded(flow, body if tee is None else None)
            return rr
        tee = None
        kept: Kept | None = None
        host_write = True  # a ConnectionError while writing is the host's going
        try:
            await rr.prepare(req)
            content = resp.content
            if not resp.has_buffered_body():
                rr.flush_head()  # a quiet event stream must still show its head
            tee = self._response_headers(flow, resp, arrived)
            # The body for the addon's ``response`` hook, up to MAX_RECORDED_BODY — unless it
            # streams (tee) or does not follow this flow (other traffic: never held in memory).
            kept = Kept() if tee is None and "mcptape" in flow.metadata else None
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
                if tee is not None:
                    tee(chunk)  # a copy, after it went
                elif kept is not None:
                    kept.add(chunk)
            resp.release()
        except asyncio.CancelledError:
            self._ensure_response(flow, resp, arrived)
            self._host_left(resp, flow, tee)
            raise
        except ConnectionError as exc:
            self._ensure_response(flow, resp, arrived)
            if host_write or req.conn._lost:
                self._host_left(resp, flow, tee)
            else:
                resp.close()
                self._error(flow, f"peer closed connection: {exc}")
            raise
        except Exception as exc:
            self._ensure_response(flow, resp, arrived)
            resp.close()
            self._error(flow, f"peer closed connection: {exc or type(exc).__name__}")
            raise ConnectionResetError(str(exc)) from exc
        if kept is not None and kept.cut:
            flow.metadata[RESPONSE_SIZE] = kept.size
        self._responded(flow, kept.take() if kept is not None else None)
        return rr

    def _responded(self, flow: Any, body: bytes | None) -> None:
        """The response went out whole: its body for the addon (None: it streamed a copy, or
        does not follow this flow), then its ``response`` hook."""
        if body is not None:
            flow.response.raw_content = body
        flow.response.timestamp_end = time.time()
        self._hook("response", flow)

    def _response_headers(
        self, flow: Any, resp: Any, arrived: float
    ) -> Callable[[bytes], Any] | None:
        """The addon's ``responseheaders``; the stream callable it set, if any."""
        mresp = self._http.Response(
            b"HTTP/1.1",
            resp.status,
            (resp.reason or "").encode("latin-1", "replace"),
            tuple(resp.raw_headers),
            None,
            None,
            arrived,
            None,
        )
        flow.response = mresp
        self._hook("responseheaders", flow)
        stream = mresp.stream
        return _guarded(stream) if callable(stream) else None

    def _ensure_response(self, flow: Any, resp: Any, arrived: float) -> None:
        if flow.response is None:
            self._response_headers(flow, resp, arrived)


def _guarded(tee: Callable[[bytes], Any]) -> Callable[[bytes], None]:
    """The addon's stream callable, given copies only: the bytes already went to the host, so
    a failure in it is logged once and ends the copying — never the host's stream."""
    broken = False

    def copy(data: bytes) -> None:
        nonlocal broken
        if broken:
            return
        try:
            tee(data)
        except Exception:
            broken = True
            log.exception("mcptape: the addon's stream callable failed; the rest is not copied")

    return copy


def print_refused(ca: Path) -> Callable[[str, str], None]:
    """A one-line warning per host name whose TLS handshake with the proxy failed."""
    seen: set[str] = set()

    def warn(host: str, reason: str) -> None:
        if host in seen:
            return
        seen.add(host)
        print(
            f"mcptape: a host refused the proxy's certificate for {host} ({reason}); it must "
            f"trust {ca}",
            file=sys.stderr,
            flush=True,
        )

    return warn
