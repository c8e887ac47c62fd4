"""The relay's core: its state, and describing an exchange's request for the recording.

:class:`RelayCore` holds what every path of the relay shares (configuration, upstream target,
session router, recorder, pool) and the request side of the recording: body redaction, client
identity, the request frame, streamed request bodies (header and URL redaction happen where the
exchange is described: the recorder process for a quick exchange). The response paths
(:mod:`~mcp_proxy.relay.http.response`) and the server lifecycle and request handler
(:mod:`~mcp_proxy.relay.http.server`) build on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.limits import MAX_RECORDED_BODY
from mcp_proxy.relay.http.common import (
    HostCheck,
    RecorderLike,
    RelayConfig,
    Target,
    decode_for_record,
    jsonrpc_error_body,
)
from mcp_proxy.relay.http.common import meta_body as summarize_body
from mcp_proxy.relay.http.exchange import REGISTER_AFTER, Exchange
from mcp_proxy.relay.http.front import (
    _V11,
    FrontRequest,
    FrontServer,
    RelayResponse,
    plain_response,
)
from mcp_proxy.relay.http.sessions import (
    RULE_CLIENT,
    RULE_MCP_SESSION,
    BodyFacts,
    SessionRouter,
    body_facts,
)
from mcp_proxy.relay.http.upstream import (
    Upstream,
    UpstreamConnectError,
)
from mcp_proxy.relay.http.wire import WireFrame

__all__ = ["RelayCore"]


class RelayCore:
    """State shared by every path of the relay, and the request side of the recording."""

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
        #: Paths whose bodies are JSON-RPC: the upstream's MCP path and legacy message paths.
        self.mcp_paths: set[str] = {self.target.path}
        self.local_origin = ""
        self.stats_exchanges = 0
        self.host_check = HostCheck(config.host, config.allow_hosts)
        #: The upstream (the seam: a scripted fake in unit tests; a pool made at start otherwise).
        self._pool: Upstream | None = pool
        self._server: FrontServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        #: Tasks reading the rest of event streams the host left (see _read_rest).
        self._tails: set[asyncio.Task[None]] = set()
        self._stopping = False
        # State of the fault layer (relay/http/faults.py), kept here so that it is declared:
        #: Requests a ``reorder`` rule holds until the server has taken the next request.
        self.fault_held: list[asyncio.Event] = []
        #: Open legacy HTTP+SSE GET streams under faults, by session key (answers ride them):
        #: (exchange, fault_events._Stream, fault_core._Faults).
        self.fault_streams: dict[str, tuple[Exchange, Any, Any]] = {}

    # ------------------------------------------------------------------ helpers
    def _synthetic(
        self, ex: Exchange | None, status: int, kind: str, message: str, **data: Any
    ) -> RelayResponse:
        body = jsonrpc_error_body(f"mcptape: {message}", {"mcptape": kind, **data})
        headers = {"Content-Type": "application/json", "X-Mcptape-Error": kind}
        if ex is not None:
            ex.late.clear()  # what the upstream said (if anything) is not what the host got
            ex.raw_resp = None
            ex.meta["synthesized"] = {"by": "mcptape", "status": status, "kind": kind}
            ex.response_size = len(body)
            ex.update(
                status=status,
                first_byte_at=time.time(),
                response_headers=[[k, v] for k, v in headers.items()]
                + [["Content-Length", str(len(body))]],
            )
        return plain_response(status, body, headers)

    def _is_mcp_path(self, path: str) -> bool:
        return path in self.mcp_paths

    def _describe(self, ex: Exchange) -> None:
        """Describe a request for the recording, once, just after it was sent upstream.

        Metadata, the raw pieces its headers and URLs are described from (by the recorder
        process, see ``recorder/httpraw.py``), the session it belongs to (client identity from
        the body when nothing else names it), its body frame — and whether it is registered with
        the recorder at once (its session has a stream open that may answer it) or in a moment.
        """
        pre = ex.pre
        if pre is None:
            return
        ex.pre = None
        request, rec_headers, has_mcp, raw_path, body = pre
        meta = ex.meta
        # The headers and URLs are described (decoded, redacted, MCP headers picked out) from
        # these raw pieces by the recorder process, or by Exchange.materialize when the
        # exchange goes to the recorder while it runs (recorder/httpraw.py).
        ex.raw_req = (self.target.origin, self.local_origin, raw_path, rec_headers, has_mcp)
        version = request.version
        meta["http_version"] = "1.1" if version is _V11 else f"{version.major}.{version.minor}"
        peer = request.conn.peer
        if peer:
            meta["peer"] = peer
        fields = ex.fields
        complete = True
        if body and ex.req_coding:
            body, complete = self._request_for_record(ex, body)
        if body:
            if not (ex.attached and ex.is_mcp):
                # Parsed only when it can change something: whether the body is JSON-RPC (off
                # the MCP path) and who sent it (the session is not known yet). A request that
                # names its session on the MCP path — every initialize-era call — is not.
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
                        complete,
                        extra={"content_type": ex.req_ctype},
                    )
                )
            else:
                meta["request_body"] = self.meta_body(body, ex.req_ctype)
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
        if ex.local_id is None and ex.timer is None:
            # Held: a quick exchange is handed over once, complete. Frames another exchange of
            # the session records meanwhile (a GET stream's events) flush it first, so the
            # request stays ahead of what answers it (see Exchange._flush_held).
            ex.timer = asyncio.get_running_loop().call_later(REGISTER_AFTER, ex.register)

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

    def _client_fallback(self, ex: Exchange, facts: BodyFacts, authorization: str | None) -> None:
        if facts.client_name is not None:
            key = self.router.client_key(facts.client_name, facts.client_version, authorization)
            client = {"name": facts.client_name, "version": facts.client_version}
            ex.fallback = (key, RULE_CLIENT, {"client": client})

    async def _stream_body(self, request: FrontRequest, ex: Exchange) -> AsyncIterator[bytes]:
        """Stream the host's body upstream, keeping a copy (up to the cap) for the recording.

        The frame is handed to the recorder as soon as the last chunk has gone out.
        """
        parts = ex.body_parts
        assert parts is not None
        kept = 0
        async for chunk in request.content.iter_any():
            ex.request_size += len(chunk)
            # Kept before the yield (a reference, no copy below the cap): when the upstream
            # answers right after this chunk went out (a 413), the generator is not resumed,
            # and a copy taken after the yield would lose bytes that crossed the wire.
            if kept < MAX_RECORDED_BODY:
                piece = (
                    chunk
                    if len(chunk) <= MAX_RECORDED_BODY - kept
                    else chunk[: MAX_RECORDED_BODY - kept]
                )
                parts.append(piece)
                kept += len(piece)
            yield chunk
        self._finish_request_body(ex, complete=True)

    async def _drain_request(self, request: FrontRequest, ex: Exchange) -> None:
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

    async def _settle_request_body(self, request: FrontRequest, ex: Exchange) -> None:
        """The upstream answered before taking the whole body (a 413): record what it took.

        The frame holds the bytes that were forwarded, marked incomplete; the rest of the
        host's body never reached the upstream and is left to the HTTP server to discard.
        """
        if ex.body_streaming and not ex.body_done:
            ex.meta["request_body_not_taken"] = True
            self._finish_request_body(ex, complete=False)

    def _facts_from_stream(self, ex: Exchange) -> None:
        """Client identity from the head of a streamed body (bounded look, body may be partial)."""
        if ex.facts is not None or not ex.body_parts:
            return
        head = b"".join(ex.body_parts[:64])[: 64 * 1024]
        facts = body_facts(head, partial=True)
        ex.facts = facts
        if facts.is_jsonrpc:
            ex.is_mcp = True
        self._client_fallback(ex, facts, None)

    def _finish_request_body(self, ex: Exchange, complete: bool | None = None) -> None:
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
        if ex.req_coding:
            decoded, whole = self._request_for_record(ex, raw)
            if decoded is None:
                return
            raw = decoded
            truncated = truncated or not whole
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
            ex.meta["request_body"] = self.meta_body(raw, ex.req_ctype)

    def _request_for_record(self, ex: Exchange, raw: bytes) -> tuple[bytes | None, bool]:
        """A compressed request body decoded (bounded) for the recording: (bytes or None when
        it is not decoded, whether they are the whole body). Runs after it was forwarded."""
        coding = (ex.req_coding or "").strip().lower()
        if not coding or coding == "identity":
            return raw, True
        decoded = decode_for_record(raw, coding, "request", ex.req_ctype)
        if decoded.note:
            ex.meta.update(decoded.note)
        return decoded.data, decoded.complete

    def meta_body(self, raw: bytes, ctype: str | None) -> dict[str, Any]:
        return summarize_body(self.redactor, raw, ctype)

    # ------------------------------------------------------------------ the response

    def _after(self, ex: Exchange, method: str, status: int, path: str) -> None:
        """Session bookkeeping once an exchange completed (DELETE ends a session)."""
        if method == "DELETE" and 200 <= status < 300 and ex.entry is not None:
            if ex.entry.rule == RULE_MCP_SESSION:
                self.router.end(ex.entry.key, reason="DELETE")
