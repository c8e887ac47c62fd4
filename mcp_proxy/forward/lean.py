"""The lean forward engine: mcptape's own CONNECT proxy, recording through the forward tape.

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
3. **Each HTTP request** is relayed by :class:`~mcp_proxy.forward.handler.RequestHandler`
   (the relay's host-facing server, :mod:`mcp_proxy.relay.http.front`, parses it): sent over
   a keep-alive connection pooled per upstream origin
   (:class:`~mcp_proxy.relay.http.upstream.UpstreamPool`) — shared by all of a host's
   connections, so a host that reconnects per call costs one TLS handshake (the host's)
   instead of two. The pools live in a :class:`~mcp_proxy.bounded.IdleLru` (at most
   ``MAX_UPSTREAM_POOLS``); its timer closes connections idle past ``UPSTREAM_IDLE`` and drops
   pools unused as long. The response is forwarded as it arrives, chunk by chunk.

The recording is :class:`~mcp_proxy.forward.tape.ForwardTape`, called directly with plain
values (no mitmproxy flow objects, no mitmproxy import): the handler tells it of the request
once it went upstream, then the exchange of its response head, a copy of each chunk it asked to
copy (*after* the chunk was written to the host: nothing can rewrite the bytes), and its end or
error. The mitmproxy engine feeds the same tape through its addon
(:mod:`mcp_proxy.forward.addon`).

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
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from mcp_proxy.bounded import IdleLru
from mcp_proxy.forward.contexts import LeafContexts
from mcp_proxy.forward.handler import RequestHandler, TunnelFront
from mcp_proxy.forward.tape import ForwardTape
from mcp_proxy.forward.tunnel import Pipe, Target, feed, parse_authority
from mcp_proxy.limits import (
    ENTRY_IDLE,
    HANDSHAKE_TIMEOUT,
    MAX_IDLE_PER_POOL,
    MAX_PROXY_HEAD,
    MAX_UPSTREAM_POOLS,
    POOL_SWEEP_INTERVAL,
    REFUSED_LINGER,
    UPSTREAM_IDLE,
)
from mcp_proxy.relay.http.admission import FULL_RESPONSE
from mcp_proxy.relay.http.front import (
    FrontRequest,
    FrontServer,
)
from mcp_proxy.relay.http.upstream import UpstreamPool

__all__ = [
    "LEAN_OPTIONS",
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
_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")
_CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"


class _Entry(asyncio.Protocol):
    """A new host connection until it is a tunnel or an HTTP connection (see the module doc)."""

    def __init__(self, engine: LeanForward) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.target: Target | None = None
        self.idle: asyncio.TimerHandle | None = None
        #: Past the cap on host connections: answered 503, closed (nothing is read).
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        engine = self.engine
        if engine.guard is not None and not engine.guard(transport):
            transport.close()
            return
        if not engine.admit():
            # Past the cap on host connections (those being served, waiting on their proxy
            # request, or piped): answered 503 at once, closed once the host's request arrives
            # (read and dropped: a FIN, not a reset that would lose the answer) or after
            # REFUSED_LINGER s — as the front server refuses a connection inside a tunnel.
            self.refused = True
            assert self.transport is not None
            self.transport.write(FULL_RESPONSE)
            self.idle = engine.loop.call_later(REFUSED_LINGER, transport.close)
            return
        engine.pending.add(transport)  # type: ignore[arg-type]
        self.idle = engine.loop.call_later(ENTRY_IDLE, transport.close)

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
        if self.refused:
            transport.close()
            return
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
    """The engine: listen, tunnel, intercept, relay; the tape is told what passed."""

    def __init__(
        self,
        tape: ForwardTape,
        leaves: LeafContexts,
        upstream_ssl: ssl.SSLContext,
        *,
        on_tls_refused: Callable[[str, str], None] | None = None,
        guard: Callable[[asyncio.BaseTransport], bool] | None = None,
        upstream_idle: float = UPSTREAM_IDLE,
        faults: Any = None,
        intercepts: Any = None,
    ) -> None:
        """``guard``: asked for each new host connection (False: it is closed at once); see
        :class:`ClientGuard` — not needed when listening on loopback only. ``upstream_idle``:
        seconds an upstream connection (and a per-origin pool) stays unused before it is
        closed. ``faults``: the fault (and intercept) rules' decider, carried out at the relay's
        hooks (:class:`~mcp_proxy.relay.http.faults.FaultHooks`), as the reverse relay does;
        ``intercepts``: where a message an intercept rule matched waits for a person."""
        self.tape = tape
        self.leaves = leaves
        self.upstream_ssl = upstream_ssl
        self.loop = asyncio.get_running_loop()
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
        self.handler = RequestHandler(tape, self.pool, self._keep)
        if faults is not None:
            # Imported here: a proxy without rules never loads the fault layer.
            from mcp_proxy.relay.http.faults import FaultHooks

            self.handler.hooks = FaultHooks(
                faults, self._keep, self.handler.upstream_of, intercepts
            )
        handle = self.handler.handle if faults is None else self.handler.handle_hooked
        self.front = FrontServer(handle, self._log_error, what="forward proxy")
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

    def _keep(self, task: asyncio.Task[None]) -> None:
        """A task that outlives its caller (a stream's rest read after its host left, a hook's
        late send or duplicate, a tunnel's connect): waited for when closing."""
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, let running requests finish (``grace`` s), close everything."""
        self.handler.stopping = True
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
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    def admit(self) -> bool:
        """May one more host connection be taken? The cap counts every host connection of the
        engine: served by the front server, waiting on its proxy request, or piped."""
        front = self.front
        return front.admission.admit(len(front.connections) + len(self.pending) + len(self.pipes))

    def _log_error(self, req: FrontRequest) -> None:
        log.exception("mcptape: forward proxy: internal error on %s %s", req.method, req.raw_path)

    # ------------------------------------------------------------------ connections
    def serve_http(self, transport: asyncio.Transport, target: Target | None, data: bytes) -> None:
        """Hand a connection (plain, or a tunnel carrying plain HTTP) to the HTTP server."""
        front = TunnelFront(self.front, target)
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
        front = TunnelFront(self.front, target)
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

        self._keep(self.loop.create_task(connect()))

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
