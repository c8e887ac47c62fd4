"""The HTTP relay: a recording reverse proxy for Streamable HTTP and legacy HTTP+SSE servers.

``mcptape record --upstream https://server.example/mcp`` listens on 127.0.0.1 and relays every
request — any method, any path — to the upstream origin, paths unchanged, so the host is pointed
at ``http://127.0.0.1:8765/mcp`` instead. What the relay guarantees, and how:

- **Exactly once.** Each host request is sent upstream once; nothing is buffered-and-resent and
  nothing is retried (a request that fails on a stale keep-alive connection is answered 502,
  never re-sent: only the host may decide to repeat a ``tools/call``).
- **Streaming.** Response bodies are forwarded chunk by chunk as they arrive (``iter_any``), SSE
  keep-alive comments included; large request bodies stream through too. When the host closes
  its side, the handler is cancelled (``handler_cancellation``) and the upstream response is
  closed at once — in the 2026-07-28 era that *is* how a request is cancelled.
- **Transparency.** The request head goes upstream as the host's own bytes (names, values,
  order), with hop-by-hop headers dropped as RFC 9110 requires and ``Host`` rewritten to the
  upstream's (servers with DNS-rebinding protection refuse anything else); status, reason and
  end-to-end response headers pass through in order; bodies are byte-exact (no decompression,
  no re-encoding). The one rewrite of content: a legacy SSE ``endpoint`` event carrying an absolute
  URL of the upstream origin is pointed at the relay, or the host would post around it.
- **Recording is a copy.** Frames and exchanges go to the recorder — a separate process fed
  through a pipe (:mod:`mcp_proxy.recorder_proc`) — only after the bytes were forwarded; a quick
  exchange is handed over once, complete. Classification, redaction of bodies and database
  writes happen there, never on this event loop.

What is a frame here: every JSON-RPC body of an MCP exchange — a request body, a JSON response
body, or one SSE event's ``data`` (event type and id in their own columns) — exactly as the
upstream or the host sent it. For the rewritten ``endpoint`` event the frame is what the upstream
sent; what the host got is noted in the exchange's ``meta.endpoint``. SSE comments (keep-alives)
are forwarded and counted in ``meta.sse_comments``, not recorded as frames. Bodies of non-MCP
exchanges (``/.well-known/*``, OAuth endpoints) are kept, redacted and capped, in the exchange's
``meta.request_body`` / ``meta.response_body`` rather than as frames, so that analysis never
mistakes an OAuth document for a JSON-RPC message.

When the relay itself answers (upstream unreachable, timed out, reset before its response) the
body is a JSON-RPC error with ``id: null`` — which the SDK client surfaces as the
error message — plus an ``X-Mcptape-Error`` header; the exchange records what happened, and no
frame is invented for the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.headers import HOP_BY_HOP, mcp_headers
from mcp_proxy.recorder_proc import RecorderClient
from mcp_proxy.redact import ENV_REDACT, Redactor
from mcp_proxy.relay.http_sessions import (
    RULE_CLIENT,
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    BodyFacts,
    SessionEntry,
    SessionRouter,
    body_facts,
    query_session_id,
)
from mcp_proxy.relay.http_upstream import (
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamPool,
    UpstreamResponse,
)
from mcp_proxy.relay.http_wire import WireFrame

__all__ = ["HTTPRelay", "RelayConfig", "record_http"]

log = logging.getLogger("mcptape.http")

#: Request bodies up to this size (with a Content-Length) are read whole before forwarding —
#: one write upstream; larger or chunked bodies stream through.
SMALL_BODY = 1 << 20
#: Response bodies with a Content-Length up to this size are read whole and sent in one write.
SMALL_RESPONSE = 256 * 1024
#: The most bytes of one body kept for the recording (the relay forwards everything).
MAX_RECORDED_BODY = 64 << 20
#: Non-MCP bodies (OAuth, discovery documents) are kept in exchange meta up to this size.
META_BODY_LIMIT = 64 << 10
#: A request still waiting for its response after this long is handed to the recorder (so that
#: long calls show while they run); quicker exchanges are handed over once, complete.
REGISTER_AFTER = 0.25
#: How long the rest of an event stream is read after the host left with its response.
TAIL_READ = 1.0
#: Seconds in-flight exchanges get to finish when the relay stops.
SHUTDOWN_GRACE = 2.0
#: How much of a GET event-stream is held back looking for a legacy ``endpoint`` event.
ENDPOINT_HOLD_LIMIT = 64 << 10

_HOP_BY_HOP_B = frozenset(h.encode() for h in HOP_BY_HOP)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: Response headers not forwarded. ``Content-Length`` is forwarded as the upstream sent it
#: (name, casing, place): the relay never re-frames a body it relays.
_RESPONSE_DROP = HOP_BY_HOP
_MCP_SESSION_ID = "Mcp-Session-Id"


_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def _quickack_socket(resp: UpstreamResponse) -> socket.socket | None:
    """The upstream socket, if acknowledging at once can be asked for (Linux)."""
    return resp.sock if _TCP_QUICKACK is not None else None


def _quickack(sock: socket.socket | None) -> None:
    """Acknowledge what the upstream sent now, not after the 40 ms delayed-ACK timer.

    An upstream with Nagle's algorithm on holds each small write (an SSE event) until its
    previous segment is acknowledged. On a fresh connection Linux acknowledges at once; on a
    reused keep-alive connection it delays, so a pooled relay would add 40 ms per event that the
    host, talking directly, would not see. The flag is one-shot, hence set after every read.
    """
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)  # type: ignore[arg-type]


def _jsonrpc_error_body(message: str, data: dict[str, Any]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message, "data": data}},
        separators=(",", ":"),
    ).encode()


def _decode_header(value: bytes) -> str:
    """Header bytes as text for the recording (never fails; non-UTF-8 bytes escaped)."""
    if value.isascii():
        return value.decode("ascii")
    return value.decode("utf-8", "backslashreplace")


@dataclass
class RelayConfig:
    upstream: str
    host: str = "127.0.0.1"
    port: int = 8765
    name: str | None = None
    idle_cut: float = 300.0
    connect_timeout: float = 10.0
    #: Seconds to wait for the upstream's response headers; None waits for ever (the host's own
    #: timeout then decides). Long tool calls in JSON-response mode hold the headers back.
    response_timeout: float | None = None
    redactor: Redactor = field(default_factory=Redactor)
    #: Extra ``Host`` names (``--allow-host``) accepted besides the relay's own address;
    #: ``*`` accepts any (DNS-rebinding protection off).
    allow_hosts: tuple[str, ...] = ()


class HostCheck:
    """Which ``Host`` values the relay answers: DNS-rebinding protection, as MCP servers have.

    A web page on ``evil.example`` whose name the attacker re-points at 127.0.0.1 can make a
    browser talk to the relay; the browser then sends ``Host: evil.example``. The upstream's own
    protection would refuse that, but the relay rewrites ``Host`` to the upstream's, so the
    relay has to refuse it itself (421, as the SDK servers do). Accepted: the listen address
    itself; for a loopback listener any loopback name (``localhost``, ``127.x.x.x``, ``[::1]``);
    for a wildcard listener (``0.0.0.0``, ``::``) any IP literal, ``localhost`` and this
    machine's name (an IP literal cannot be rebound); plus every ``--allow-host`` name (with a
    port, ``name:port`` must match exactly). Ports are not compared otherwise — the SDK's
    defaults (``127.0.0.1:*``) do the same. A request without ``Host`` (HTTP/1.0) is answered:
    browsers always send one.
    """

    __slots__ = ("_any", "_hosts", "_ip_literals", "_loopback", "_netlocs")

    def __init__(self, listen_host: str, allow: tuple[str, ...] = ()) -> None:
        listen = listen_host.strip("[]").lower()
        self._any = "*" in allow
        self._hosts: set[str] = {listen}
        self._netlocs: set[str] = set()
        self._loopback = _is_loopback(listen)
        self._ip_literals = listen in ("", "0.0.0.0", "::")
        if self._loopback:
            self._hosts.update({"localhost", "127.0.0.1", "::1"})
        if self._ip_literals:
            self._hosts.update({"localhost", socket.gethostname().lower()})
        for name in allow:
            name = name.strip().lower()
            if not name or name == "*":
                continue
            host, port = _split_host(name)
            if port is None:
                self._hosts.add(host)
            else:
                self._netlocs.add(f"{host}:{port}")

    def allows(self, value: str | None) -> bool:
        if value is None or self._any:
            return True
        host, port = _split_host(value.strip().lower())
        if host in self._hosts or (port is not None and f"{host}:{port}" in self._netlocs):
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return self._ip_literals or (self._loopback and ip.is_loopback)


def _split_host(value: str) -> tuple[str, str | None]:
    """``host[:port]`` (IPv6 in brackets) → (host without brackets, port or None)."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") and rest[1:] else None
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port or None
    return value, None


class _Target:
    """The upstream origin, parsed once."""

    def __init__(self, upstream: str) -> None:
        try:
            url = URL(upstream)
        except (ValueError, TypeError) as exc:
            raise UserError(f"not a URL: {upstream}") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise UserError(f"--upstream must be an http:// or https:// URL, got {upstream!r}")
        self.url = url
        self.scheme = url.scheme
        host = url.raw_host or ""
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.host_header = host if url.is_default_port() else f"{host}:{url.port}"
        self.host_header_b = self.host_header.encode("idna" if not host.isascii() else "ascii")
        self.origin = f"{url.scheme}://{self.host_header}"
        self.path = url.raw_path or "/"
        self.path_qs = url.raw_path_qs or "/"


class _Exchange:
    """One HTTP request/response going through the relay, and its recording state.

    The exchange row and the request's frames are held back until the exchange knows its
    session: at once for most requests, at the response headers for ``initialize`` (the
    session id comes back there), at the first event for a legacy ``GET /sse``.
    """

    __slots__ = (
        "authorization",
        "body_done",
        "body_parts",
        "body_streaming",
        "entry",
        "facts",
        "fallback",
        "fields",
        "finished",
        "handed_off",
        "is_mcp",
        "late",
        "local_id",
        "meta",
        "mono0",
        "outcome",
        "pending",
        "pre",
        "relay",
        "req_ctype",
        "request_size",
        "responded",
        "response_size",
        "sse_comments",
        "streaming",
        "timer",
        "wall0",
        "want_register",
    )

    def __init__(self, relay: HTTPRelay, fields: dict[str, Any], meta: dict[str, Any]) -> None:
        self.relay = relay
        self.fields = fields
        self.meta = meta
        self.entry: SessionEntry | None = None
        self.local_id: int | None = None
        self.pending: list[Frame] = []
        self.request_size = 0
        self.response_size = 0
        self.facts: BodyFacts | None = None
        self.fallback: tuple[str, str, dict[str, Any]] | None = None
        self.finished = False
        self.sse_comments = 0
        self.wall0 = fields["started_at"]
        self.mono0 = 0
        #: A streamed request body: the parts kept for the recording, and whether it ended.
        self.body_parts: list[bytes] | None = None
        self.body_streaming = False
        self.body_done = False
        self.req_ctype: str | None = None
        self.is_mcp = False
        self.outcome: str | None = None
        self.want_register = False
        self.handed_off = False
        self.late: dict[str, Any] = {}
        #: What describing the request for the recording needs (see HTTPRelay._describe).
        self.pre: tuple[Any, ...] | None = None
        #: Registers a request still waiting for its response after a moment (long calls show
        #: up while they run); cancelled when the exchange ends first.
        self.timer: asyncio.TimerHandle | None = None
        #: Streaming its response (other exchanges of the session then register at once, so
        #: that frames stay in wire order across them).
        self.streaming = False
        #: A JSON-RPC response went back on this exchange's event stream (label of a host close).
        self.responded = False
        #: Kept in memory only, to tell credentials apart when grouping (never recorded).
        self.authorization: str | None = None

    @property
    def attached(self) -> bool:
        return self.entry is not None

    def attach(self, entry: SessionEntry) -> None:
        """Place the exchange in its session (and register it if that was asked for)."""
        if self.entry is not None:
            return
        self.entry = entry
        self.relay.router.begin(entry)
        if self.want_register:
            self.register()

    def register(self) -> None:
        """Hand the exchange row and its frames so far to the recorder.

        Called (``call_soon``) right after the request was handed to the upstream: the
        recording work runs while the upstream thinks, never before the bytes moved, and the
        request frame is queued before anything the upstream answers. An exchange whose session
        is not known yet registers when it is attached.
        """
        if self.local_id is not None:
            return
        if self.entry is None:
            self.want_register = True
            return
        self._flush_earlier_streams()
        rec = self.relay.recorder
        if rec is None:
            self.pending = []
            return
        self.local_id = rec.new_exchange(self.entry.session_id, **self.fields, meta=self.meta)
        sid = self.entry.session_id
        for frame in self.pending:
            frame.http_exchange = self.local_id
            rec.put(sid, frame)
        self.pending = []

    def _flush_earlier_streams(self) -> None:
        """Register the session's streams still held back, so frames keep their wire order."""
        assert self.entry is not None
        waiting = self.entry.pending_streams
        if not waiting:
            return
        if self in waiting:
            waiting.remove(self)
        for other in list(waiting):
            other.register()

    def hold_stream(self) -> None:
        """A streaming response: count it, and hold its recording back for a moment.

        Most event streams of a POST carry one response and end within milliseconds; those are
        then recorded in one record at their end, like quick exchanges. A stream still open
        after ``REGISTER_AFTER`` (a GET stream, a slow tool with progress) registers then and
        its frames flow live; another exchange of the session registering first flushes it.
        """
        entry = self.entry
        if entry is None:
            return
        if not self.streaming:
            self.streaming = True
            entry.streams += 1
        if self.local_id is None:
            if self not in entry.pending_streams:
                entry.pending_streams.append(self)
            if self.timer is None:
                self.timer = asyncio.get_running_loop().call_later(REGISTER_AFTER, self.register)

    def later(self, **fields: Any) -> None:
        """Fields for the final update (saves a record for exchanges that end quickly)."""
        self.late.update(fields)

    def attach_fallback(self) -> None:
        if self.entry is not None:
            return
        if self.pre is not None:
            self.relay._describe(self)  # it may name the client (and attach)
            if self.entry is not None:
                return
        router = self.relay.router
        key, rule, grouping = self.fallback or router.keyless(self.authorization)
        self.attach(router.get(key, rule, grouping=grouping))

    def frame(self, frame: Frame) -> None:
        if self.local_id is None:
            self.pending.append(frame)
            return
        rec = self.relay.recorder
        if rec is not None and self.entry is not None:
            frame.http_exchange = self.local_id
            rec.put(self.entry.session_id, frame)

    def update(self, **fields: Any) -> None:
        if self.local_id is None:
            # Not registered yet: fold into the row to insert.
            self.fields.update(fields)
            return
        rec = self.relay.recorder
        if rec is not None and self.local_id is not None:
            rec.update_exchange(self.local_id, **fields)

    def finish(self, outcome: str, error: str | None = None) -> None:
        if self.finished:
            return
        self.relay._describe(self)
        self.finished = True
        self.outcome = outcome
        self.attach_fallback()
        if self.sse_comments:
            self.meta["sse_comments"] = self.sse_comments
        final = {
            "ended_at": time.time(),
            "outcome": outcome,
            "error": error,
            "request_size": self.request_size,
            "response_size": self.response_size,
        }
        if self.late:
            final.update(self.late)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.local_id is None:
            self.fields.update(final)
            rec = self.relay.recorder
            if self.entry is not None:
                self._flush_earlier_streams()
            if rec is not None and self.entry is not None:
                # A quick exchange: row and frames in one record.
                self.local_id = rec.record_exchange(
                    self.entry.session_id, frames=self.pending, **self.fields, meta=self.meta
                )
                self.pending = []
        else:
            self.update(**final, meta=self.meta)
        if self.streaming and self.entry is not None:
            self.entry.streams -= 1
        assert self.entry is not None
        router = self.relay.router
        router.done(self.entry)
        self.relay.stats_exchanges += 1
        if self.entry.rule == RULE_LEGACY_SSE and self.fields["method"] == "GET":
            # The legacy session lives exactly as long as its event stream.
            router.end(self.entry.key, reason="legacy SSE stream closed")


class _RelayResponse(web.StreamResponse):
    """A StreamResponse that adds no headers of its own (no Server, Date or Content-Type)."""

    __slots__ = ("_keep",)

    def __init__(self, *, status: int, reason: str | None, keep: frozenset[str]) -> None:
        super().__init__(status=status, reason=reason)
        self._keep = keep

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        headers = self._headers
        for name in ("Server", "Date", "Content-Type"):
            if name.lower() not in self._keep and name in headers:
                del headers[name]


class HTTPRelay:
    """The reverse proxy: one aiohttp server for the host, one client session to the upstream."""

    def __init__(self, config: RelayConfig, recorder: _RecorderLike | None) -> None:
        self.config = config
        self.target = _Target(config.upstream)
        self.recorder = recorder
        self.redactor = config.redactor
        base_meta: dict[str, Any] = {"relay": {"upstream": self.target.origin}}
        if not self.redactor.enabled:
            base_meta["redaction"] = "off (--no-redact): credentials are recorded in clear"
        self.router = SessionRouter(
            recorder,
            name=config.name,
            upstream=config.upstream,
            idle_cut=config.idle_cut,
            base_meta=base_meta,
        )
        #: Paths whose bodies are JSON-RPC: the upstream's MCP path and legacy message paths.
        self.mcp_paths: set[str] = {self.target.path}
        self.local_origin = ""
        self.stats_exchanges = 0
        self.host_check = HostCheck(config.host, config.allow_hosts)
        #: Exchanges relayed when the recorder process was found dead (None: it is alive).
        self.recorder_died_after: int | None = None
        self._pool: UpstreamPool | None = None
        self._runner: web.ServerRunner | None = None
        self._server: web.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        #: Tasks reading the rest of event streams the host left (see _read_rest).
        self._tails: set[asyncio.Task[None]] = set()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Bind, start serving; returns the local URL the host should use."""
        target = self.target
        self._pool = UpstreamPool(
            target.url.raw_host or "",
            target.url.port or (443 if target.scheme == "https" else 80),
            tls=target.scheme == "https",
            connect_timeout=self.config.connect_timeout,
        )
        self._server = web.Server(
            self._handle,
            handler_cancellation=True,
            max_line_size=64 * 1024,
            max_field_size=64 * 1024,
            access_log=None,
        )
        # In-flight exchanges (open event streams) get a short grace period at shutdown, then
        # are cancelled and recorded as relay_shutdown: Ctrl-C must not wait a minute.
        self._runner = web.ServerRunner(
            self._server, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self.close()
            raise UserError(
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror or exc}"
            ) from exc
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        port = sock.getsockname()[1]
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        self.local_origin = f"http://{shown}:{port}"
        self._sweeper = asyncio.create_task(self._sweep_loop())
        return self.local_origin + self.target.path_qs

    async def _sweep_loop(self) -> None:
        interval = max(1.0, min(30.0, self.config.idle_cut / 4))
        while True:
            await asyncio.sleep(interval)
            self.router.sweep()

    async def close(self) -> None:
        """Stop listening, let in-flight exchanges end (briefly), end every session."""
        self._stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._runner is not None:
            # Stops accepting, then waits up to shutdown_timeout for handlers, then cancels.
            await self._runner.cleanup()
            self._runner = None
        for task in list(self._tails):
            task.cancel()
        if self._tails:
            await asyncio.gather(*self._tails, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self.router.close_all()

    # ------------------------------------------------------------------ helpers
    def _synthetic(
        self, ex: _Exchange | None, status: int, kind: str, message: str, **data: Any
    ) -> web.Response:
        body = _jsonrpc_error_body(f"mcptape: {message}", {"mcptape": kind, **data})
        headers = {"Content-Type": "application/json", "X-Mcptape-Error": kind}
        if ex is not None:
            ex.late.clear()  # what the upstream said (if anything) is not what the host got
            ex.meta["synthesized"] = {"by": "mcptape", "status": status, "kind": kind}
            ex.response_size = len(body)
            ex.update(
                status=status,
                first_byte_at=time.time(),
                response_headers=[[k, v] for k, v in headers.items()]
                + [["Content-Length", str(len(body))]],
            )
        return web.Response(status=status, body=body, headers=headers)

    def _refuse_host(
        self, request: web.BaseRequest, host_value: str | None, wall0: float
    ) -> web.Response:
        """Answer 421 for a Host that is not the relay's (recorded; nothing goes upstream)."""
        ex = _Exchange(self, {"method": request.method, "started_at": wall0}, {})
        ex.fields["url"] = self.redactor.url(self.local_origin + request.raw_path)
        ex.fields["request_headers"] = self.redactor.headers(
            [[k.decode("latin-1"), _decode_header(v)] for k, v in request.raw_headers]
        )
        ex.meta["refused_host"] = host_value
        ex.attach_fallback()
        text = (
            f"Host {host_value!r} is not this relay's address (DNS-rebinding protection);"
            " allow it with --allow-host"
        )
        r = self._synthetic(ex, 421, "host-not-allowed", text, host=host_value)
        ex.finish("refused", text)
        return r

    def _is_mcp_path(self, path: str) -> bool:
        return path in self.mcp_paths

    # ------------------------------------------------------------------ the handler
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        wall0 = time.time()
        mono0 = time.monotonic_ns()
        method = request.method
        raw_path = request.raw_path
        if not raw_path.startswith("/") or method == "CONNECT":
            return web.Response(
                status=405 if method == "CONNECT" else 400,
                text="mcptape is a reverse proxy: send requests to its own origin "
                "(for a forward proxy, use the mitmproxy addon)\n",
            )
        target = self.target
        host_value = request.headers.get("Host")
        if not self.host_check.allows(host_value):
            return self._refuse_host(request, host_value, wall0)
        path, _, query = raw_path.partition("?")

        # Headers: forward end-to-end ones in wire order, Host rewritten; keep the host's
        # originals for the recording.
        raw_headers = request.raw_headers
        rec_headers: list[list[str]] = []
        keep: list[tuple[bytes, bytes, bytes]] = []  # (lower name, name, value) to forward
        connection_tokens: list[str] = []
        session_hdr: str | None = None
        authorization: str | None = None
        has_mcp = False
        has_length = False
        for kb, vb in raw_headers:
            name = kb.decode("latin-1")
            value = vb.decode("ascii") if vb.isascii() else _decode_header(vb)
            rec_headers.append([name, value])
            lowb = kb.lower()
            if lowb == b"host":
                keep.append((lowb, b"Host", target.host_header_b))
                continue
            if lowb in _HOP_BY_HOP_B:
                if lowb == b"connection":
                    connection_tokens.append(value)
                continue
            if lowb == b"expect":
                continue
            if lowb.startswith(b"mcp-"):
                has_mcp = True
                if lowb == b"mcp-session-id":
                    session_hdr = value
            elif lowb == b"authorization":
                authorization = value
            elif lowb == b"content-length":
                has_length = True
            keep.append((lowb, kb, vb))
        if connection_tokens:
            named = {
                t.strip().lower().encode("latin-1", "replace")
                for t in ",".join(connection_tokens).split(",")
                if t.strip()
            }
            keep = [k for k in keep if k[0] not in named or k[0] == b"host"]
        if not any(k[0] == b"host" for k in keep):
            keep.insert(0, (b"host", b"Host", target.host_header_b))
        # Forward chunked only when the host sent a body without a length.
        chunked = request.body_exists and not has_length
        # The head goes out as the host's own bytes (names, values, order), Host rewritten:
        # nothing is decoded and re-encoded on the way.
        head_parts = [
            method.encode("ascii")
            + b" "
            + raw_path.encode("utf-8", "surrogateescape")
            + b" HTTP/1.1\r\n"
        ]
        for _, kb, vb in keep:
            head_parts.append(kb + b": " + vb + b"\r\n")
        if chunked:
            head_parts.append(b"Transfer-Encoding: chunked\r\n")
        elif request.method in _BODY_METHODS and not request.body_exists and not has_length:
            head_parts.append(b"Content-Length: 0\r\n")
        head_parts.append(b"\r\n")
        head = b"".join(head_parts)

        # Only what forwarding needs happens before the request leaves; describing it for
        # the recording (redaction, metadata, client identity, frames) runs right after.
        ex = _Exchange(self, {"method": method, "started_at": wall0}, {})
        ex.mono0 = mono0
        ex.authorization = authorization

        # Where does this exchange belong? Decide now when the request says so.
        legacy_sid = query_session_id(query) if query else None
        if session_hdr:
            ex.attach(
                self.router.get(
                    self.router.mcp_key(session_hdr),
                    RULE_MCP_SESSION,
                    grouping={"mcp_session_id": session_hdr},
                )
            )
        elif legacy_sid:
            self.mcp_paths.add(path)
            ex.attach(
                self.router.get(
                    self.router.sse_key(legacy_sid),
                    RULE_LEGACY_SSE,
                    transport="sse",
                    grouping={"sse_session_id": legacy_sid},
                )
            )

        if request.headers.get("Expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

        # The request body: small ones whole, large or chunked ones streamed.
        body: bytes | None = None
        req_ctype = request.headers.get("Content-Type")
        ex.req_ctype = req_ctype
        ex.is_mcp = self._is_mcp_path(path)
        ex.pre = (request, rec_headers, has_mcp, raw_path, None)
        data: Any = None
        if request.body_exists:
            length = request.content_length
            if length is not None and length <= SMALL_BODY:
                got: list[bytes] = []
                try:
                    content = request.content
                    chunk = await content.readany()
                    while chunk:
                        got.append(chunk)
                        chunk = await content.readany()
                    body = got[0] if len(got) == 1 else b"".join(got)
                    if len(body) < length:
                        raise ConnectionResetError("body shorter than its Content-Length")
                except (
                    asyncio.CancelledError,
                    aiohttp.ClientError,
                    ConnectionError,
                    asyncio.IncompleteReadError,
                ) as exc:
                    # The host went away mid-body: nothing is forwarded (the upstream would
                    # only wait for bytes that never come); what arrived is recorded.
                    self._describe(ex)
                    partial = b"".join(got)
                    ex.request_size = len(partial)
                    if partial:
                        ex.frame(
                            WireFrame(
                                Direction.C2S,
                                Channel.HTTP,
                                partial,
                                mono0,
                                wall0,
                                False,
                                extra={"content_type": request.headers.get("Content-Type")},
                            )
                        )
                    ex.finish("host_aborted", f"host closed while sending the body: {exc!r}")
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    raise web.HTTPBadRequest() from exc
                data = body
                ex.request_size = len(body)
            else:
                ex.body_parts = []
                ex.body_streaming = True
                data = self._stream_body(request, ex)

        ex.pre = (request, rec_headers, has_mcp, raw_path, body)

        # Forward.
        assert self._pool is not None
        asyncio.get_running_loop().call_soon(self._describe, ex)
        try:
            if self.config.response_timeout is not None:
                async with asyncio.timeout(self.config.response_timeout):
                    resp = await self._pool.request(
                        head, data, head_only=method == "HEAD", chunked=chunked
                    )
            else:
                resp = await self._pool.request(
                    head, data, head_only=method == "HEAD", chunked=chunked
                )
        except asyncio.CancelledError:
            self._finish_request_body(ex)
            ex.finish(self._abort_outcome(), self._abort_error())
            raise
        except TimeoutError as exc:
            if isinstance(exc, UpstreamConnectTimeout):
                await self._drain_request(request, ex)
                self._finish_request_body(ex)
                ex.attach_fallback()
                text = f"connecting to the upstream timed out ({self.config.connect_timeout} s)"
                r = self._synthetic(ex, 504, "upstream-timeout", text, upstream=target.origin)
                ex.finish("timeout", text)
                return r
            await self._drain_request(request, ex)
            self._finish_request_body(ex)
            ex.attach_fallback()
            r = self._synthetic(
                ex,
                504,
                "upstream-timeout",
                f"no response headers from {target.origin} within {self.config.response_timeout} s",
                upstream=target.origin,
            )
            ex.finish("timeout", f"no response headers within {self.config.response_timeout} s")
            return r
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            await self._drain_request(request, ex)
            self._finish_request_body(ex)
            ex.attach_fallback()
            status, kind, text = self._describe_failure(exc)
            r = self._synthetic(ex, status, kind, text, upstream=target.origin)
            ex.finish("timeout" if status == 504 else "upstream_error", text)
            return r

        try:
            return await self._respond(request, ex, resp, method, path)
        finally:
            if ex.handed_off:
                pass  # the rest of the response is read by a task of its own (_read_rest)
            elif ex.outcome == "complete":
                resp.release()
            else:
                # Not a clean end (host gone, upstream broke, cancelled): drop the upstream
                # connection now, so the server sees the close at once.
                resp.close()

    def _describe(self, ex: _Exchange) -> None:
        """Describe a request for the recording, once, just after it was sent upstream.

        Redacted headers and URL, metadata, the session it belongs to (client identity from the
        body when nothing else names it), its body frame — and whether it is registered with the
        recorder at once (its session has a stream open that may answer it) or in a moment.
        """
        pre = ex.pre
        if pre is None:
            return
        ex.pre = None
        request, rec_headers, has_mcp, raw_path, body = pre
        redactor = self.redactor
        meta = ex.meta
        meta["local_url"] = redactor.url(self.local_origin + raw_path)
        meta["http_version"] = f"{request.version.major}.{request.version.minor}"
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if peer:
            meta["peer"] = f"{peer[0]}:{peer[1]}"
        red_headers = redactor.headers(rec_headers)
        if has_mcp:
            meta["mcp_headers"] = mcp_headers(red_headers)
        fields = ex.fields
        fields["url"] = redactor.url(self.target.origin + raw_path)
        fields["request_headers"] = red_headers
        if body:
            facts = body_facts(body)
            ex.facts = facts
            if facts.is_jsonrpc:
                ex.is_mcp = True
            self._client_fallback(ex, facts, ex.authorization)
            if ex.is_mcp:
                ex.frame(
                    WireFrame(
                        Direction.C2S,
                        Channel.HTTP,
                        body,
                        ex.mono0,
                        ex.wall0,
                        True,
                        extra={"content_type": ex.req_ctype},
                    )
                )
            else:
                meta["request_body"] = self._meta_body(body, ex.req_ctype)
        if not ex.attached:
            # Wait only where the response names the session: ``initialize`` (its
            # Mcp-Session-Id), a GET that may open a legacy SSE stream (its endpoint event),
            # and a streamed body (its head is read once it has gone out).
            method = fields["method"]
            if ex.facts is not None and ex.facts.is_initialize:
                pass
            elif method == "GET" and "text/event-stream" in request.headers.get("Accept", ""):
                pass
            elif ex.body_streaming:
                pass
            elif ex.fallback is not None:
                key, rule, grouping = ex.fallback
                ex.attach(self.router.get(key, rule, grouping=grouping))
            else:
                ex.attach_fallback()
        if ex.finished:
            return
        if ex.entry is not None and ex.entry.streams:
            # The session has a stream open (legacy SSE, a GET stream): what it carries may
            # answer this request, so the request is recorded now, before anything else.
            ex.register()
        else:
            ex.timer = asyncio.get_running_loop().call_later(REGISTER_AFTER, ex.register)

    def _looks_like_sse_open(self, path: str, request: web.BaseRequest) -> bool:
        accept = request.headers.get("Accept", "")
        return "text/event-stream" in accept or path == self.target.path

    def _abort_outcome(self) -> str:
        return "relay_shutdown" if self._stopping else "host_aborted"

    def _abort_error(self) -> str:
        return "the relay was stopped" if self._stopping else "host closed the connection"

    @staticmethod
    def _describe_failure(exc: BaseException) -> tuple[int, str, str]:
        if isinstance(exc, UpstreamConnectError):
            return 502, "upstream-unreachable", f"cannot connect to the upstream ({exc})"
        if isinstance(exc, aiohttp.ClientConnectorError):
            if isinstance(exc.os_error, TimeoutError) or "timeout" in str(exc).lower():
                return 504, "upstream-timeout", f"connecting to the upstream timed out ({exc})"
            return 502, "upstream-unreachable", f"cannot connect to the upstream ({exc})"
        if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ServerTimeoutError):
            return 504, "upstream-timeout", f"the upstream timed out ({exc})"
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return (
                502,
                "upstream-disconnected",
                "the upstream closed the connection before answering (the request was not "
                "re-sent: it may or may not have run)",
            )
        if isinstance(exc, ValueError):
            return 400, "unrelayable-request", f"the request cannot be relayed as sent ({exc})"
        return 502, "upstream-error", f"the upstream request failed ({exc!r})"

    def _client_fallback(self, ex: _Exchange, facts: BodyFacts, authorization: str | None) -> None:
        if facts.client_name is not None:
            key = self.router.client_key(facts.client_name, facts.client_version, authorization)
            client = {"name": facts.client_name, "version": facts.client_version}
            ex.fallback = (key, RULE_CLIENT, {"client": client})

    async def _stream_body(self, request: web.BaseRequest, ex: _Exchange) -> AsyncIterator[bytes]:
        """Stream the host's body upstream, keeping a copy (up to the cap) for the recording.

        The frame is handed to the recorder as soon as the last chunk has gone out.
        """
        parts = ex.body_parts
        assert parts is not None
        kept = 0
        async for chunk in request.content.iter_any():
            ex.request_size += len(chunk)
            yield chunk
            if kept < MAX_RECORDED_BODY:
                piece = chunk[: MAX_RECORDED_BODY - kept]
                parts.append(piece)
                kept += len(piece)
        self._finish_request_body(ex, complete=True)

    async def _drain_request(self, request: web.BaseRequest, ex: _Exchange) -> None:
        """Read what the host still sends (up to the cap, briefly) so its frame is recorded."""
        parts = ex.body_parts
        if parts is None or ex.body_done or request.content.at_eof():
            return
        kept = sum(len(p) for p in parts)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                async for chunk in request.content.iter_any():
                    ex.request_size += len(chunk)
                    if kept < MAX_RECORDED_BODY:
                        piece = chunk[: MAX_RECORDED_BODY - kept]
                        parts.append(piece)
                        kept += len(piece)

    async def _settle_request_body(self, request: web.BaseRequest, ex: _Exchange) -> None:
        """The upstream answered before taking the whole body (a 413): record what it took.

        The frame holds the bytes that were forwarded, marked incomplete; the rest of the
        host's body never reached the upstream and is left to the HTTP server to discard.
        """
        if ex.body_streaming and not ex.body_done:
            ex.meta["request_body_not_taken"] = True
            self._finish_request_body(ex, complete=False)

    def _facts_from_stream(self, ex: _Exchange) -> None:
        """Client identity from the head of a streamed body (bounded look, body may be partial)."""
        if ex.facts is not None or not ex.body_parts:
            return
        head = b"".join(ex.body_parts[:64])[: 64 * 1024]
        facts = body_facts(head, partial=True)
        ex.facts = facts
        if facts.is_jsonrpc:
            ex.is_mcp = True
        self._client_fallback(ex, facts, None)

    def _finish_request_body(self, ex: _Exchange, complete: bool | None = None) -> None:
        """Record a streamed request body (once): after it went out, or when it was given up."""
        if ex.body_parts is None or ex.body_done:
            return
        ex.body_done = True
        self._facts_from_stream(ex)
        raw = b"".join(ex.body_parts)
        ex.body_parts = []
        if not raw:
            return
        truncated = ex.request_size > len(raw)
        if truncated:
            ex.meta["request_body_recorded"] = len(raw)
        ex.meta["request_body_streamed"] = True
        if ex.is_mcp or raw[:1] in (b"{", b"["):
            ex.frame(
                WireFrame(
                    Direction.C2S,
                    Channel.HTTP,
                    raw,
                    ex.mono0,
                    ex.wall0,
                    bool(complete) and not truncated,
                    extra={"content_type": ex.req_ctype},
                )
            )
        else:
            ex.meta["request_body"] = self._meta_body(raw, ex.req_ctype)

    def _meta_body(self, raw: bytes, ctype: str | None) -> dict[str, Any]:
        """A non-MCP body for the exchange's metadata: redacted, capped, text when it is text."""
        head = raw[:META_BODY_LIMIT]
        red, changed = self.redactor.body(head, ctype)
        out: dict[str, Any] = {"size": len(raw), "content_type": ctype}
        try:
            out["text"] = red.decode("utf-8")
        except UnicodeDecodeError:
            out["text"] = None
            out["binary"] = True
        if len(raw) > META_BODY_LIMIT:
            out["truncated"] = True
        if changed:
            out["redacted"] = True
        return out

    # ------------------------------------------------------------------ the response
    async def _respond(
        self,
        request: web.BaseRequest,
        ex: _Exchange,
        resp: UpstreamResponse,
        method: str,
        path: str,
    ) -> web.StreamResponse:
        first_byte = time.time()
        self._describe(ex)
        qsock = _quickack_socket(resp)
        _quickack(qsock)
        if ex.body_streaming and not ex.body_done:
            self._facts_from_stream(ex)
        status = resp.status
        raw_resp_headers = resp.raw_headers
        resp_headers_rec: list[list[str]] = []
        out_headers: CIMultiDict[str] = CIMultiDict()
        new_session: str | None = None
        conn_tokens: list[str] = []
        keep: set[str] = set()
        for kb, vb in raw_resp_headers:
            name = kb.decode("latin-1")
            value = _decode_header(vb) if not vb.isascii() else vb.decode("ascii")
            resp_headers_rec.append([name, value])
            low = name.lower()
            if low in _RESPONSE_DROP:
                if low == "connection":
                    conn_tokens.append(value)
                continue
            if low == "mcp-session-id":
                new_session = value
            keep.add(low)
            out_headers.add(name, value if vb.isascii() else vb.decode("utf-8", "surrogateescape"))
        for token in ",".join(conn_tokens).split(","):
            token = token.strip()
            if token and token in out_headers:
                del out_headers[token]
                keep.discard(token.lower())
        ctype = resp.headers.get("Content-Type", "")
        is_sse = ctype.lower().startswith("text/event-stream")
        if is_sse:
            ex.is_mcp = True
        is_mcp = ex.is_mcp

        # Sessions decided by the response: initialize → Mcp-Session-Id.
        if not ex.attached:
            if new_session:
                ex.attach(
                    self.router.get(
                        self.router.mcp_key(new_session),
                        RULE_MCP_SESSION,
                        grouping={"mcp_session_id": new_session, "opened_by": "initialize"},
                    )
                )
            elif not (is_sse and method == "GET"):
                ex.attach_fallback()
        length = resp.content_length
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        small = not is_sse and not no_body and length is not None and length <= SMALL_RESPONSE
        head = {
            "status": status,
            "response_headers": self.redactor.headers(resp_headers_rec),
            "first_byte_at": first_byte,
        }
        if small:
            ex.later(**head)  # recorded with the end of the exchange, a moment from now
        else:
            ex.update(**head)
            ex.hold_stream()
        if resp.reason and resp.reason != _default_reason(status):
            ex.meta["reason"] = resp.reason

        encoding = resp.headers.get("Content-Encoding", "").strip().lower()
        if encoding and encoding != "identity":
            ex.meta["content_encoding"] = encoding

        sresp = _RelayResponse(status=status, reason=resp.reason, keep=frozenset(keep))
        sresp._headers.extend(out_headers)  # Content-Length included, as the upstream sent it

        # Small, complete bodies: read whole, one write.
        if small:
            try:
                body = await resp.read()
            except asyncio.CancelledError:
                self._finish_request_body(ex)
                ex.finish(self._abort_outcome(), self._abort_error())
                raise
            except (aiohttp.ClientError, OSError) as exc:
                self._finish_request_body(ex)
                r = self._synthetic(
                    ex,
                    502,
                    "upstream-reset",
                    f"the upstream failed while sending the response body ({exc!r})",
                    upstream_status=status,
                )
                ex.finish("upstream_error", f"response body cut short: {exc!r}")
                return r
            try:
                await sresp.prepare(request)
                await sresp.write(body)
                await sresp.write_eof()
            except asyncio.CancelledError:
                self._finish_request_body(ex)
                ex.finish(self._abort_outcome(), self._abort_error())
                raise
            except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
                self._finish_request_body(ex)
                self._record_body(ex, body, ctype, encoding, is_mcp, complete=True)
                ex.response_size = len(body)
                ex.finish("host_aborted", f"host went away while receiving: {exc!r}")
                return sresp
            ex.response_size = len(body)
            # Request before response in the recording, even when the upstream answered (413)
            # before taking the whole body: what the host still sends is read and recorded.
            await self._settle_request_body(request, ex)
            self._record_body(ex, body, ctype, encoding, is_mcp, complete=True)
            self._after(ex, method, status, path)
            ex.finish("complete")
            return sresp

        # Streaming.
        parser = SSEParser() if is_sse else None
        parts: list[bytes] = []
        kept = 0
        hold: list[bytes] | None = [] if (is_sse and method == "GET" and not ex.attached) else None
        unsent: list[SSEEvent] | None = None
        answering = False
        held_size = 0
        outcome = "complete"
        error: str | None = None
        try:
            await sresp.prepare(request)
            if not no_body:
                async for chunk in resp.content.iter_any():
                    _quickack(qsock)
                    events = parser.feed(chunk) if parser is not None else None
                    answering = False
                    if events:
                        # Parsed (not recorded) before the write: the host may close the moment
                        # it has the response, and that close must not read as a cancellation.
                        unsent = events
                        if not ex.responded and method == "POST":
                            answering = self._has_response(events)
                    if hold is not None:
                        hold.append(chunk)
                        held_size += len(chunk)
                        first = next((e for e in events or () if not e.comment_only), None)
                        if first is None and held_size < ENDPOINT_HOLD_LIMIT:
                            self._sse_events(ex, events, is_mcp)
                            continue
                        out = b"".join(hold)
                        hold = None
                        if first is not None:
                            out = self._maybe_rewrite_endpoint(ex, first, out)
                        await sresp.write(out)
                        ex.response_size += len(out)
                    else:
                        await sresp.write(chunk)
                        ex.response_size += len(chunk)
                    if answering:
                        ex.responded = True
                    if events is not None:
                        unsent = None
                        self._sse_events(ex, events, is_mcp)
                    elif kept < MAX_RECORDED_BODY:
                        piece = chunk[: MAX_RECORDED_BODY - kept]
                        parts.append(piece)
                        kept += len(piece)
                if hold:
                    out = b"".join(hold)
                    hold = None
                    await sresp.write(out)
                    ex.response_size += len(out)
            self._finish_request_body(ex)
            await sresp.write_eof()
        except asyncio.CancelledError:
            if unsent:
                # Cancelled while the chunk was being written: it was handed to the host's
                # connection, so it is recorded (and counts as delivered).
                self._sse_events(ex, unsent, is_mcp)
                ex.responded = ex.responded or answering
            if ex.responded and not self._stopping and parser is not None:
                # The SDK closes a POST's event stream as soon as it has the response: the
                # exchange completed; only the HTTP stream was left before its end. The rest
                # of the upstream's stream is read (and recorded) aside, so that its connection
                # can serve the next request instead of being torn down and reopened.
                ex.meta["host_closed_after_response"] = True
                self._finish_request_body(ex)
                ex.finish("complete")
                ex.handed_off = True
                task = asyncio.create_task(self._read_rest(ex, resp, parser, is_mcp))
                self._tails.add(task)
                task.add_done_callback(self._tails.discard)
                raise
            outcome, error = self._abort_outcome(), self._abort_error()
            self._close_stream(ex, parser, parts, ctype, encoding, is_mcp, complete=False)
            self._finish_request_body(ex)
            ex.finish(outcome, error)
            raise
        except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
            # Writing to the host failed: the host went away (complete if it had its answer).
            if unsent:
                self._sse_events(ex, unsent, is_mcp)  # the upstream sent them (host did not get)
            if ex.responded:
                outcome, error = "complete", None
                ex.meta["host_closed_after_response"] = True
            else:
                outcome, error = "host_aborted", f"host went away: {exc!r}"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # Reading from the upstream failed mid-body: cut the host's connection too, so it
            # sees a broken response exactly as it would have directly (never a clean end).
            outcome, error = "upstream_error", f"upstream failed mid-response: {exc!r}"
            if request.transport is not None:
                request.transport.close()
        complete = outcome == "complete"
        if complete:
            await self._settle_request_body(request, ex)
        self._finish_request_body(ex)
        self._close_stream(ex, parser, parts, ctype, encoding, is_mcp, complete=complete)
        if complete:
            self._after(ex, method, status, path)
        ex.finish(outcome, error)
        return sresp

    async def _read_rest(
        self, ex: _Exchange, resp: UpstreamResponse, parser: SSEParser, is_mcp: bool
    ) -> None:
        """After the host left with its response: read the upstream stream to its end (briefly).

        The upstream's last events are recorded (what it sent, though the host no longer got
        them), and the connection goes back to the pool when the stream ends in time.
        """
        after = 0
        try:
            async with asyncio.timeout(TAIL_READ):
                async for chunk in resp.content.iter_any():
                    events = parser.feed(chunk)
                    after += sum(1 for e in events if not e.comment_only)
                    self._sse_events(ex, events, is_mcp)
            rest = parser.flush()
            if rest is not None:
                self._sse_events(ex, [rest], is_mcp, complete=False)
            resp.release()
        except asyncio.CancelledError:
            resp.close()
            raise
        except Exception:  # timed out, or the upstream broke: the connection is not reused
            resp.close()
        if after:
            ex.update(meta={**ex.meta, "events_after_host_closed": after})

    def _after(self, ex: _Exchange, method: str, status: int, path: str) -> None:
        """Session bookkeeping once an exchange completed (DELETE ends a session)."""
        if method == "DELETE" and 200 <= status < 300 and ex.entry is not None:
            if ex.entry.rule == RULE_MCP_SESSION:
                self.router.end(ex.entry.key, reason="DELETE")

    def _close_stream(
        self,
        ex: _Exchange,
        parser: SSEParser | None,
        parts: list[bytes],
        ctype: str,
        encoding: str,
        is_mcp: bool,
        complete: bool,
    ) -> None:
        if parser is not None:
            rest = parser.flush()
            if rest is not None:
                self._sse_events(ex, [rest], is_mcp, complete=False)
            return
        if parts:
            body = b"".join(parts)
            parts.clear()
            truncated = ex.response_size > len(body)
            if truncated:
                ex.meta["response_body_recorded"] = len(body)
            self._record_body(
                ex, body, ctype, encoding, is_mcp, complete=complete and not truncated
            )

    def _record_body(
        self, ex: _Exchange, body: bytes, ctype: str, encoding: str, is_mcp: bool, complete: bool
    ) -> None:
        if not body:
            return
        if encoding and encoding != "identity":
            decoded = _decompress(body, encoding)
            if decoded is None:
                ex.meta["response_body"] = {
                    "size": len(body),
                    "content_type": ctype,
                    "note": f"{encoding}-encoded body not decoded for the recording",
                }
                return
            body = decoded
        jsonish = ctype.lower().startswith("application/json") or body.lstrip()[:1] in (b"{", b"[")
        if jsonish and (is_mcp or body_facts(body).is_jsonrpc):
            # A JSON body of an MCP exchange is a frame even when it is not valid JSON-RPC
            # (the analysis classifies it); plain-text bodies ("Accepted", error text) are not
            # messages and stay with the exchange.
            ex.frame(
                WireFrame(
                    Direction.S2C,
                    Channel.HTTP,
                    body,
                    time.monotonic_ns(),
                    time.time(),
                    complete,
                    extra={"content_type": ctype},
                )
            )
        else:
            ex.meta["response_body"] = self._meta_body(body, ctype)

    def _sse_events(
        self, ex: _Exchange, events: list[SSEEvent] | None, is_mcp: bool, complete: bool = True
    ) -> None:
        if not events:
            return
        mono = time.monotonic_ns()
        wall = time.time()
        for ev in events:
            if ev.comment_only:
                ex.sse_comments += 1
                continue
            if not ex.attached and ev.event == "endpoint":
                self._attach_legacy(ex, ev)
            ex.frame(
                WireFrame(
                    Direction.S2C,
                    Channel.SSE,
                    ev.data,
                    mono,
                    wall,
                    complete,
                    sse_id=ev.id,
                    sse_event=ev.event,
                )
            )
        if not ex.attached:
            ex.attach_fallback()
        if not ex.streaming:
            ex.hold_stream()

    @staticmethod
    def _has_response(events: list[SSEEvent]) -> bool:
        """Whether a JSON-RPC response is among these events (a cheap look at each head)."""
        for ev in events:
            head = ev.data[:160]
            if b'"method"' not in head and (b'"result"' in head or b'"error"' in head):
                return True
        return False

    def _attach_legacy(self, ex: _Exchange, ev: SSEEvent) -> None:
        data = ev.data.decode("utf-8", "replace").strip()
        parts = urlsplit(data)
        sid = None
        for key in ("session_id", "sessionId"):
            values = parse_qs(parts.query).get(key)
            if values:
                sid = values[0]
                break
        if parts.path:
            self.mcp_paths.add(parts.path)
        if sid:
            ex.attach(
                self.router.get(
                    self.router.sse_key(sid),
                    RULE_LEGACY_SSE,
                    transport="sse",
                    grouping={"sse_session_id": sid},
                )
            )

    def _maybe_rewrite_endpoint(self, ex: _Exchange, ev: SSEEvent, out: bytes) -> bytes:
        """Point a legacy ``endpoint`` event at the relay when it names the upstream origin."""
        if ev.event != "endpoint":
            return out
        data = ev.data.decode("utf-8", "replace").strip()
        note: dict[str, Any] = {"upstream_sent": data, "host_got": data, "rewritten": False}
        parts = urlsplit(data)
        if parts.scheme and parts.netloc:
            up = urlsplit(self.target.origin)
            if parts.scheme == up.scheme and parts.netloc.lower() == up.netloc.lower():
                new = self.local_origin + (parts.path or "/")
                if parts.query:
                    new += "?" + parts.query
                if parts.fragment:
                    new += "#" + parts.fragment
                replaced = out.replace(ev.data, new.encode(), 1)
                if replaced != out:
                    note.update(host_got=new, rewritten=True)
                    out = replaced
            else:
                note["warning"] = (
                    "the endpoint names another origin; the host will post there directly and "
                    "those messages are not recorded"
                )
        ex.meta["endpoint"] = note
        return out


_REASONS: dict[int, str] = {}


def _default_reason(status: int) -> str:
    reason = _REASONS.get(status)
    if reason is None:
        from http import HTTPStatus

        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        _REASONS[status] = reason
    return reason


def _decompress(body: bytes, encoding: str) -> bytes | None:
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error:
        return None
    return None


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _RecorderLike(Protocol):
    def new_session(self, *, transport: str, **fields: Any) -> str: ...
    def put(self, session_id: str, frame: Frame) -> None: ...
    def new_exchange(self, session_id: str, **fields: Any) -> int: ...
    def update_exchange(self, local_id: int, **fields: Any) -> None: ...
    def record_exchange(self, session_id: str, *, frames: list[Frame], **fields: Any) -> int: ...
    def update_session(self, session_id: str, **fields: Any) -> None: ...
    def end_session(self, session_id: str, **fields: Any) -> None: ...


async def _serve(config: RelayConfig, db_url: str) -> int:
    # The recorder runs in its own process (see mcp_proxy.recorder_proc): the event loop never
    # shares a GIL with classification, redaction and database writes. It learns the redaction
    # policy from its environment; bodies are redacted there, before anything is written.
    os.environ[ENV_REDACT] = config.redactor.to_env()
    recorder = RecorderClient(db_url)
    recorder.start()
    relay = HTTPRelay(config, recorder)
    try:
        local = await relay.start()
    except UserError:
        await asyncio.to_thread(recorder.close)
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    # Only now announce: a signal sent right after the line must find our handlers in place.
    print(f"mcptape: relaying {local} -> {config.upstream}", file=sys.stderr, flush=True)
    if not _is_loopback(config.host):
        print(
            f"mcptape: warning: listening on {config.host}, reachable from other machines; "
            "their traffic (and the upstream's answers) will be relayed and recorded",
            file=sys.stderr,
            flush=True,
        )
    watch = asyncio.create_task(_watch_recorder(recorder, relay))
    try:
        await stop.wait()
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await relay.close()
        await asyncio.to_thread(recorder.close)
    print(_stop_line(recorder, relay), file=sys.stderr, flush=True)
    return 0


#: How often the relay checks that its recorder process is alive.
RECORDER_WATCH_INTERVAL = 0.5


def _recorder_exit(recorder: RecorderClient) -> int | None:
    """The recorder process's exit status if it has ended (None while it runs)."""
    proc = getattr(recorder, "proc", None)
    return proc.poll() if proc is not None else None


async def _watch_recorder(recorder: RecorderClient, relay: HTTPRelay) -> None:
    """Say at once (on stderr, once) when the recorder process ends while the relay runs.

    Relaying goes on — the host must not lose its server because the recording failed — but
    from then on nothing is recorded, and the user must know it now, not at the stop line.
    """
    while True:
        await asyncio.sleep(RECORDER_WATCH_INTERVAL)
        code = _recorder_exit(recorder)
        if code is not None:
            relay.recorder_died_after = relay.stats_exchanges
            print(
                f"mcptape: the recorder process stopped (exit status {code}) after"
                f" {relay.stats_exchanges} exchange(s): traffic is still relayed but NOT recorded",
                file=sys.stderr,
                flush=True,
            )
            return


def _stop_line(recorder: RecorderClient, relay: HTTPRelay) -> str:
    """The last line: what was relayed, and what was recorded — never more than the truth."""
    code = _recorder_exit(recorder)
    n, sessions = relay.stats_exchanges, relay.router.sessions_created
    if code in (0, None) and relay.recorder_died_after is None:
        return f"mcptape: stopped; {n} exchange(s) in {sessions} session(s) recorded"
    after = relay.recorder_died_after
    when = f" after {after} exchange(s)" if after is not None else ""
    return (
        f"mcptape: stopped; {n} exchange(s) relayed in {sessions} session(s), the recording is"
        f" incomplete: the recorder process ended (exit status {code}){when} and what came"
        " later was NOT recorded"
    )


def _loop_factory() -> Any:
    """uvloop's event loop when it is installed (cheaper I/O per request: about 15% less relay
    CPU here); the standard loop otherwise. ``MCPTAPE_LOOP=asyncio`` forces the standard one."""
    if os.environ.get("MCPTAPE_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def record_http(
    upstream: str,
    *,
    db_url: str,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    redact: bool = True,
    redact_headers: list[str] | tuple[str, ...] = (),
    redact_paths: list[str] | tuple[str, ...] = (),
    idle_cut: float = 300.0,
    connect_timeout: float = 10.0,
    response_timeout: float | None = None,
    allow_hosts: list[str] | tuple[str, ...] = (),
) -> int:
    """``mcptape record --upstream URL``: relay and record until SIGINT/SIGTERM; exit status."""
    try:
        redactor = Redactor.from_options(enabled=redact, headers=redact_headers, paths=redact_paths)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    if not redact:
        print(
            "mcptape: WARNING: redaction is OFF (--no-redact). Authorization headers, cookies, "
            "API keys, OAuth tokens and secrets will be written to the database IN CLEAR TEXT. "
            "Use this only for local debugging, and delete the recording afterwards.",
            file=sys.stderr,
            flush=True,
        )
    config = RelayConfig(
        upstream=upstream,
        host=host,
        port=port,
        name=name,
        idle_cut=idle_cut,
        connect_timeout=connect_timeout,
        response_timeout=response_timeout if response_timeout else None,
        redactor=redactor,
        allow_hosts=tuple(allow_hosts),
    )
    _Target(upstream)  # validate before anything starts
    # Relay latency matters more than the writer thread's throughput (see relay/stdio.py).
    sys.setswitchinterval(0.0005)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    logging.getLogger("aiohttp.access").setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_serve(config, db_url), loop_factory=_loop_factory())
    except KeyboardInterrupt:
        return 130
