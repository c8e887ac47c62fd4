"""Server lifecycle and the request handler: host request in, upstream request out.

:class:`HTTPRelay` binds the listener (:mod:`~mcp_proxy.relay.http.front`: an asyncio protocol
over httptools, with handler cancellation: a host that closes its connection cancels its exchange, which in the 2026-07-28 era *is* how a
request is cancelled), and for each request: checks ``Host`` (DNS-rebinding protection), builds
the upstream head (:func:`~mcp_proxy.relay.http.forward.build_request_head`), places the
exchange in its session when the request names it, reads a small body whole or streams a large
one, and hands the request to the upstream pool exactly once (:meth:`HTTPRelay._forward` —
the request-side seam for fault injection). The answer goes back through
:mod:`~mcp_proxy.relay.http.response`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp

from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction
from mcp_proxy.limits import SHUTDOWN_GRACE, SMALL_BODY
from mcp_proxy.relay.http.common import decode_header
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.forward import RequestHead, build_request_head
from mcp_proxy.relay.http.front import (
    BadRequest,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.response import ResponseSide
from mcp_proxy.relay.http.sessions import (
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    query_session_id,
)
from mcp_proxy.relay.http.upstream import (
    UpstreamConnectTimeout,
    UpstreamPool,
    UpstreamReply,
)
from mcp_proxy.relay.http.wire import WireFrame

__all__ = ["HTTPRelay"]

_log = logging.getLogger("mcptape.relay.http")

_NOT_A_REVERSE_PROXY_REQUEST = (
    "mcptape is a reverse proxy: send requests to its own origin "
    "(for a forward proxy, run mcptape record --forward)\n"
)


class _BodyAborted(Exception):
    """The host went away while sending a small body (already recorded)."""


class HTTPRelay(ResponseSide):
    """The reverse proxy: one aiohttp server for the host, one connection pool to the upstream."""

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        """Bind, start serving; returns the local URL the host should use."""
        target = self.target
        if self._pool is None:
            self._pool = UpstreamPool(
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
        self.local_origin = f"http://{shown}:{port}"
        self._sweeper = asyncio.create_task(self._sweep_loop())
        return self.local_origin + self.target.path_qs

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
        self._stopping = True
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
        for task in list(self._tails):
            task.cancel()
        if self._tails:
            await asyncio.gather(*self._tails, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self.router.close_all()

    # ------------------------------------------------------------------ the handler
    async def _handle(self, request: FrontRequest) -> RelayResponse:
        wall0 = time.time()
        mono0 = time.monotonic_ns()
        method = request.method
        raw_path = request.raw_path
        if not raw_path.startswith("/") or method == "CONNECT":
            return plain_response(405 if method == "CONNECT" else 400, _NOT_A_REVERSE_PROXY_REQUEST)
        host_value = request.headers.get("Host")
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
        ex = Exchange(self, {"method": method, "started_at": wall0}, {})
        ex.mono0 = mono0
        ex.authorization = rh.authorization
        self._place_by_request(ex, rh, path, query)
        if rh.expect_continue:
            await request.send_continue()
        ex.req_ctype = request.headers.get("Content-Type")
        if request.body_exists:
            ex.req_coding = request.headers.get("Content-Encoding")
        ex.is_mcp = self._is_mcp_path(path)
        ex.pre = (request, rh.rec_headers, rh.has_mcp, raw_path, None)
        body: bytes | None = None
        data: Any = None
        if request.body_exists:
            length = request.content_length
            if length is not None and length <= SMALL_BODY:
                try:
                    body = await self._read_small_body(request, ex, length)
                except _BodyAborted as exc:
                    raise BadRequest("the request body was cut short") from exc
                data = body
            else:
                ex.body_parts = []
                ex.body_streaming = True
                data = self._stream_body(request, ex)
        ex.pre = (request, rh.rec_headers, rh.has_mcp, raw_path, body)
        asyncio.get_running_loop().call_soon(self._describe, ex)
        if self.config.faults is not None:  # fault rules: their own path (relay/http/faults.py)
            # Imported here: a relay without rules never loads the fault layer (~40 ms).
            from mcp_proxy.relay.http import faults as http_faults

            return await http_faults.handle(self, request, ex, rh, data, body, method, path)
        resp = await self._forward(request, ex, rh, data)
        if isinstance(resp, RelayResponse):
            return resp  # the relay answered (upstream unreachable, timed out…)
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

    def _place_by_request(self, ex: Exchange, rh: RequestHead, path: str, query: str) -> None:
        """Place the exchange in its session now when the request names it."""
        legacy_sid = query_session_id(query) if query else None
        if rh.session_id:
            ex.attach(
                self.router.get(
                    self.router.mcp_key(rh.session_id),
                    RULE_MCP_SESSION,
                    grouping={"mcp_session_id": rh.session_id},
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

    async def _read_small_body(self, request: FrontRequest, ex: Exchange, length: int) -> bytes:
        """A body with a length up to ``SMALL_BODY``: read whole (one write upstream)."""
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
            # The host went away mid-body: nothing is forwarded (the upstream would only wait
            # for bytes that never come); what arrived is recorded.
            self._describe(ex)
            partial = b"".join(got)
            ex.request_size = len(partial)
            if partial:
                ex.frame(
                    WireFrame(
                        Direction.C2S,
                        Channel.HTTP,
                        partial,
                        ex.mono0,
                        ex.wall0,
                        False,
                        extra={"content_type": ex.req_ctype},
                    )
                )
            ex.finish("host_aborted", f"host closed while sending the body: {exc!r}")
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise _BodyAborted() from exc
        ex.request_size = len(body)
        return body

    async def _forward(
        self, request: FrontRequest, ex: Exchange, rh: RequestHead, data: Any
    ) -> UpstreamReply | RelayResponse:
        """Send the request upstream, once (the request-side seam); map failures to answers."""
        assert self._pool is not None
        timeout = self.config.response_timeout
        head_only = request.method == "HEAD"
        try:
            if timeout is None:  # the default: no timeout object per request
                return await self._pool.request(
                    rh.head, data, head_only=head_only, chunked=rh.chunked
                )
            async with asyncio.timeout(timeout):
                return await self._pool.request(
                    rh.head, data, head_only=head_only, chunked=rh.chunked
                )
        except asyncio.CancelledError:
            self._finish_request_body(ex)
            ex.finish(self._abort_outcome(), self._abort_error())
            raise
        except TimeoutError as exc:
            await self._drain_request(request, ex)
            self._finish_request_body(ex)
            ex.attach_fallback()
            origin = self.target.origin
            if isinstance(exc, UpstreamConnectTimeout):
                text = f"connecting to the upstream timed out ({self.config.connect_timeout} s)"
                r = self._synthetic(ex, 504, "upstream-timeout", text, upstream=origin)
                ex.finish("timeout", text)
                return r
            text = f"no response headers from {origin} within {timeout} s"
            r = self._synthetic(ex, 504, "upstream-timeout", text, upstream=origin)
            ex.finish("timeout", f"no response headers within {timeout} s")
            return r
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            await self._drain_request(request, ex)
            self._finish_request_body(ex)
            ex.attach_fallback()
            status, kind, text = self._describe_failure(exc)
            r = self._synthetic(ex, status, kind, text, upstream=self.target.origin)
            ex.finish("timeout" if status == 504 else "upstream_error", text)
            return r

    def _refuse_host(
        self, request: FrontRequest, host_value: str | None, wall0: float
    ) -> RelayResponse:
        """Answer 421 for a Host that is not the relay's (recorded; nothing goes upstream)."""
        ex = Exchange(self, {"method": request.method, "started_at": wall0}, {})
        ex.fields["url"] = self.redactor.url(self.local_origin + request.raw_path)
        ex.fields["request_headers"] = self.redactor.headers(
            [[k.decode("latin-1"), decode_header(v)] for k, v in request.raw_headers]
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
