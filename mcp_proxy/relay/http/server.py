"""Server lifecycle and the request handler: host request in, upstream request out.

:class:`HTTPRelay` is composed of its parts (the host-side server, the upstream, the session
router, the exchange context, the response path, the hooks). It binds the listener
(:mod:`~mcp_proxy.relay.http.front`: an asyncio protocol over httptools, with handler
cancellation: a host that closes its connection cancels its exchange, which in the 2026-07-28
era *is* how a request is cancelled), and for each request: checks ``Host`` (DNS-rebinding
protection), builds the upstream head (:func:`~mcp_proxy.relay.http.forward.build_request_head`),
places the exchange in its session when the request names it, reads a small body whole or
streams a large one, carries out the hooks' verdict on it when hooks are installed, and hands
the request to the upstream exactly once (:meth:`HTTPRelay.forward_request`). The answer goes
back through :mod:`~mcp_proxy.relay.http.response`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp

from mcp_proxy.errors import UserError
from mcp_proxy.limits import SHUTDOWN_GRACE, SMALL_BODY
from mcp_proxy.relay.http.common import HostCheck, RecorderLike, RelayConfig, Target, decode_header
from mcp_proxy.relay.http.exchange import Exchange, ExchangeContext
from mcp_proxy.relay.http.forward import RequestHead, build_request_head
from mcp_proxy.relay.http.front import (
    BadRequest,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.hooks import Hooks
from mcp_proxy.relay.http.request_side import BodyAborted, RequestBody, read_small_body
from mcp_proxy.relay.http.response import (
    RelayState,
    ResponsePath,
    answer,
    decide_request,
    reset_host,
)
from mcp_proxy.relay.http.response_record import finish_body, synthetic
from mcp_proxy.relay.http.sessions import (
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    SessionRouter,
    query_session_id,
)
from mcp_proxy.relay.http.stream import StreamPath
from mcp_proxy.relay.http.upstream import (
    Upstream,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamPool,
    UpstreamReply,
)

__all__ = ["HTTPRelay"]

_log = logging.getLogger("mcptape.relay.http")

_NOT_A_REVERSE_PROXY_REQUEST = (
    "mcptape is a reverse proxy: send requests to its own origin "
    "(for a forward proxy, run mcptape record --forward)\n"
)


class HTTPRelay:
    """The reverse proxy, composed of its parts: the host-side server (``FrontServer``), the
    upstream (an :class:`~mcp_proxy.relay.http.upstream.Upstream`: a pool, or a fake), the
    session router, the exchange context (recorder, redactor) and the response path."""

    def __init__(
        self,
        config: RelayConfig,
        recorder: RecorderLike | None,
        *,
        pool: Upstream | None = None,
    ) -> None:
        self.config = config
        self.target = Target(config.upstream)
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
        self.ctx = ExchangeContext(recorder, self.router, self.redactor, self.target.origin)
        self.state = RelayState(self.ctx, {self.target.path})
        #: Called at message boundaries (fault rules); None — the default — costs one ``if``.
        self.hooks: Hooks | None = None
        if config.faults is not None:
            # Imported here: a relay without rules never loads the fault layer.
            from mcp_proxy.relay.http.faults import FaultHooks

            self.hooks = FaultHooks(
                config.faults, self.state.spawn, lambda _ex: self.upstream, config.intercepts
            )
        self.streams = StreamPath(self.state, self.hooks)
        self.responses = ResponsePath(self.state, self.streams, self.hooks)
        self.host_check = HostCheck(config.host, config.allow_hosts)
        #: The upstream (the seam: a scripted fake in unit tests; a pool made at start otherwise).
        self.upstream: Upstream | None = pool
        self._server: FrontServer | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def use_hooks(self, hooks: Hooks | None) -> None:
        """Install the hooks called at every exchange's message boundaries (None: none)."""
        self.hooks = self.streams.hooks = self.responses.hooks = hooks

    @property
    def local_origin(self) -> str:
        return self.ctx.local_origin

    @property
    def stats_exchanges(self) -> int:
        return self.ctx.finished

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Bind, start serving; returns the local URL the host should use."""
        target = self.target
        if self.upstream is None:
            self.upstream = UpstreamPool(
                target.url.raw_host or "",
                target.url.port or (443 if target.scheme == "https" else 80),
                tls=target.scheme == "https",
                connect_timeout=self.config.connect_timeout,
            )
        self._server = FrontServer(self._handle, self._log_error)
        try:
            port = await self._server.listen(self.config.host, self.config.port)
        except OSError as exc:
            await self.close()
            raise UserError(
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror or exc}"
            ) from exc
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        self.ctx.local_origin = f"http://{shown}:{port}"
        self._sweeper = asyncio.create_task(self._sweep_loop())
        return self.ctx.local_origin + self.target.path_qs

    def _log_error(self, request: FrontRequest) -> None:
        """A handler raised (a bug): the host got a 500; say what failed on stderr."""
        _log.exception("error while relaying %s %s", request.method, request.raw_path)

    async def _sweep_loop(self) -> None:
        interval = max(1.0, min(30.0, self.config.idle_cut / 4))
        while True:
            await asyncio.sleep(interval)
            self.router.sweep()

    async def close(self) -> None:
        """Stop listening, let in-flight exchanges end (briefly), end every session."""
        self.state.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            # In-flight exchanges (open event streams) get a short grace period, then are
            # cancelled and recorded as relay_shutdown: Ctrl-C must not wait a minute.
            await self._server.close(SHUTDOWN_GRACE)
            self._server = None
        tails = self.state.tails
        for task in list(tails):
            task.cancel()
        if tails:
            await asyncio.gather(*tails, return_exceptions=True)
        if self.upstream is not None:
            await self.upstream.close()
            self.upstream = None
        self.router.close_all()

    # ------------------------------------------------------------------ the handler
    async def _handle(self, request: FrontRequest) -> RelayResponse:
        wall0 = time.time()
        mono0 = time.monotonic_ns()
        method = request.method
        raw_path = request.raw_path
        if not raw_path.startswith("/") or method == "CONNECT":
            return plain_response(405 if method == "CONNECT" else 400, _NOT_A_REVERSE_PROXY_REQUEST)
        host_value = request.host
        if not self.host_check.allows(host_value):
            return self._refuse_host(request, host_value, wall0)
        path, _, query = raw_path.partition("?")
        rh = build_request_head(
            method,
            raw_path,
            request.raw_headers,
            self.target.host_header_b,
            body_exists=request.body_exists,
        )
        # Only what forwarding needs happens before the request leaves; describing it for
        # the recording (redaction, metadata, client identity, frames) runs right after.
        ex = Exchange(self.ctx, {"method": method, "started_at": wall0}, {})
        ex.mono0 = mono0
        ex.authorization = rh.authorization
        self._place_by_request(ex, rh, path, query)
        if rh.expect_continue:
            await request.send_continue()
        ex.req_ctype = request.content_type
        if request.body_exists:
            ex.req_coding = request.content_encoding
        ex.is_mcp = path in self.state.mcp_paths
        ex.pre = (request, rh.rec_headers, rh.has_mcp, raw_path, None)
        body: bytes | None = None
        data: Any = None
        if request.body_exists:
            length = request.content_length
            if length is not None and length <= SMALL_BODY:
                try:
                    body = await read_small_body(request, ex, length)
                except BodyAborted as exc:
                    raise BadRequest("the request body was cut short") from exc
                data = body
            else:
                ex.body = RequestBody(request, ex)
                data = ex.body.stream()
        ex.pre = (request, rh.rec_headers, rh.has_mcp, raw_path, body)
        asyncio.get_running_loop().call_soon(ex.describe)
        hooks = self.hooks
        if hooks is None:
            resp = await self.forward_request(request, ex, rh, data)
            if isinstance(resp, RelayResponse):
                return resp  # the relay answered (upstream unreachable, timed out…)
            return await self.responses.respond(request, ex, resp, method)
        try:
            return await self._hooked(request, ex, rh, data, body, hooks)
        except asyncio.CancelledError:
            # The host left (or the relay stops) while a hook held the exchange — a delay, a
            # withheld answer: the exchange is still recorded.
            finish_body(ex)
            ex.finish(*self.state.abort())
            raise
        finally:
            hooks.done(ex)

    async def _relay(
        self, request: FrontRequest, ex: Exchange, rh: RequestHead, data: Any, method: str
    ) -> RelayResponse:
        resp = await self.forward_request(request, ex, rh, data)
        if isinstance(resp, RelayResponse):
            return resp  # the relay answered (upstream unreachable, timed out…)
        return await self.responses.respond(request, ex, resp, method)

    async def _hooked(
        self,
        request: FrontRequest,
        ex: Exchange,
        rh: RequestHead,
        data: Any,
        body: bytes | None,
        hooks: Hooks,
    ) -> RelayResponse:
        """The hooks' verdict on the request, carried out; then the one path."""
        decided = await decide_request(
            hooks,
            ex,
            rh,
            body,
            lambda v: answer(ex, v, late=False),
            lambda why: reset_host(request, ex, why),
        )
        if isinstance(decided, RelayResponse):
            return decided
        rh, out = decided
        if out is not None:
            data = out
        return await self._relay(request, ex, rh, data, request.method)

    def _place_by_request(self, ex: Exchange, rh: RequestHead, path: str, query: str) -> None:
        """Place the exchange in its session now when the request names it."""
        legacy_sid = query_session_id(query) if query else None
        if rh.session_id:
            ex.attach_key(
                self.router.mcp_key(rh.session_id),
                RULE_MCP_SESSION,
                grouping={"mcp_session_id": rh.session_id},
            )
        elif legacy_sid:
            self.state.mcp_paths.add(path)
            ex.attach_key(
                self.router.sse_key(legacy_sid),
                RULE_LEGACY_SSE,
                transport="sse",
                grouping={"sse_session_id": legacy_sid},
            )

    async def forward_request(
        self, request: FrontRequest, ex: Exchange, rh: RequestHead, data: Any
    ) -> UpstreamReply | RelayResponse:
        """Send the request upstream, once (the request-side seam); map failures to answers."""
        upstream = self.upstream
        assert upstream is not None
        timeout = self.config.response_timeout
        head_only = request.method == "HEAD"
        try:
            if timeout is None:  # the default: no timeout object per request
                return await upstream.request(
                    rh.head, data, head_only=head_only, chunked=rh.chunked
                )
            async with asyncio.timeout(timeout):
                return await upstream.request(
                    rh.head, data, head_only=head_only, chunked=rh.chunked
                )
        except asyncio.CancelledError:
            finish_body(ex)
            ex.finish(*self.state.abort())
            raise
        except TimeoutError as exc:
            await drain_body(ex)
            ex.attach_fallback()
            origin = self.target.origin
            if isinstance(exc, UpstreamConnectTimeout):
                text = f"connecting to the upstream timed out ({self.config.connect_timeout} s)"
                r = synthetic(ex, 504, "upstream-timeout", text, upstream=origin)
                ex.finish("timeout", text)
                return r
            text = f"no response headers from {origin} within {timeout} s"
            r = synthetic(ex, 504, "upstream-timeout", text, upstream=origin)
            ex.finish("timeout", f"no response headers within {timeout} s")
            return r
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            await drain_body(ex)
            ex.attach_fallback()
            status, kind, text = describe_failure(exc)
            r = synthetic(ex, status, kind, text, upstream=self.target.origin)
            ex.finish("timeout" if status == 504 else "upstream_error", text)
            return r

    def _refuse_host(
        self, request: FrontRequest, host_value: str | None, wall0: float
    ) -> RelayResponse:
        """Answer 421 for a Host that is not the relay's (recorded; nothing goes upstream)."""
        ex = Exchange(self.ctx, {"method": request.method, "started_at": wall0}, {})
        ex.fields["url"] = self.redactor.url(self.ctx.local_origin + request.raw_path)
        ex.fields["request_headers"] = self.redactor.headers(
            [[k.decode("latin-1"), decode_header(v)] for k, v in request.raw_headers]
        )
        ex.meta["refused_host"] = host_value
        ex.attach_fallback()
        text = (
            f"Host {host_value!r} is not this relay's address (DNS-rebinding protection);"
            " allow it with --allow-host"
        )
        r = synthetic(ex, 421, "host-not-allowed", text, host=host_value)
        ex.finish("refused", text)
        return r


async def drain_body(ex: Exchange) -> None:
    """The upstream failed: read what the host still sends (briefly) and record the body."""
    if ex.body is not None:
        await ex.body.drain()
        ex.body.finish()


def describe_failure(exc: BaseException) -> tuple[int, str, str]:
    """Status, kind and text of the relay's answer when the upstream request failed."""
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
