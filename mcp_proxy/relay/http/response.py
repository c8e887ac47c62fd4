"""The response path: the upstream's answer back to the host — small, streamed, or event stream.

:class:`ResponsePath` is one part of :class:`~mcp_proxy.relay.http.server.HTTPRelay` (composed,
not inherited). One entry (:meth:`ResponsePath.respond`) reads the upstream's head once
(:meth:`~ResponsePath.response_head`: status and headers forwarded as the upstream sent them,
the session a response names, the recording's view), then takes one of two ways:

- :meth:`~ResponsePath.respond_small` — a body with a ``Content-Length`` up to
  ``SMALL_RESPONSE``: read whole, one write, recorded with the end of the exchange;
- :meth:`~ResponsePath.respond_stream` — anything else, forwarded chunk by chunk as it
  arrives: event streams parsed for the recording (a legacy ``endpoint`` event held back and
  rewritten), other bodies kept (bounded) for it.

Every byte for the host goes through :meth:`~ResponsePath.deliver`. What the response leaves
in the recording is :mod:`~mcp_proxy.relay.http.response_record`'s.

The host's response is a :class:`~mcp_proxy.relay.http.front.RelayResponse`: it adds no
header of its own, so names, casing and order — ``Content-Length`` included — are the
upstream's.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import ENDPOINT_HOLD_LIMIT, MAX_RECORDED_BODY, SMALL_RESPONSE, TAIL_READ
from mcp_proxy.relay.http.common import decode_header, default_reason, quickack, quickack_socket
from mcp_proxy.relay.http.exchange import Exchange, ExchangeContext
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.response_record import (
    after,
    finish_body,
    has_response,
    record_body,
    rewrite_endpoint,
    sse_events,
    synthetic,
)
from mcp_proxy.relay.http.sessions import RULE_MCP_SESSION
from mcp_proxy.relay.http.upstream import UpstreamReply

__all__ = ["RelayState", "ResponsePath"]

#: How long the head of a streamed response waits for the first body bytes to go out with them.
HEAD_HOLD = 0.003


@dataclass(slots=True)
class ResponseHead:
    """The upstream's response head, as the paths need it."""

    status: int
    sresp: RelayResponse
    ctype: str
    encoding: str
    is_sse: bool
    no_body: bool
    small: bool
    qsock: socket.socket | None


@dataclass(slots=True)
class StreamState:
    """A streamed response in progress (what the chunk handlers share)."""

    head: ResponseHead
    method: str
    is_mcp: bool
    parser: SSEParser | None
    #: A legacy GET stream's first bytes, held back looking for the ``endpoint`` event.
    hold: list[bytes] | None
    held_size: int = 0
    #: A plain streamed body's bytes kept for the recording (up to the cap).
    parts: list[bytes] = field(default_factory=list)
    kept: int = 0
    #: Events parsed from the chunk being written (recorded once the write is done).
    unsent: list[SSEEvent] | None = None
    #: The chunk being written carries the JSON-RPC response of this POST.
    answering: bool = False
    #: A task reads the rest of the stream (the host left with its response): it owns the reply.
    tail: bool = False


def end_reply(ex: Exchange, resp: UpstreamReply) -> None:
    """Release a reply read to a clean end (its connection serves again); otherwise (host
    gone, upstream broke, cancelled) drop its connection now, so the server sees the close."""
    if ex.outcome == "complete":
        resp.release()
    else:
        resp.close()


@dataclass(slots=True)
class RelayState:
    """What the relay's parts share while it runs."""

    ctx: ExchangeContext
    #: Paths whose bodies are JSON-RPC: the upstream's MCP path and legacy message paths.
    mcp_paths: set[str]
    #: Tasks that outlive their handler (the tail of a stream the host left), awaited at stop.
    tails: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: bool = False

    def abort(self) -> tuple[str, str]:
        """Outcome and error of an exchange cut by the host leaving, or by the relay stopping."""
        if self.stopping:
            return "relay_shutdown", "the relay was stopped"
        return "host_aborted", "host closed the connection"

    def spawn(self, task: asyncio.Task[None]) -> None:
        """Keep ``task`` until it ends (the relay waits for it when it stops)."""
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)


class ResponsePath:
    """The response path (see the module docstring)."""

    __slots__ = ("state",)

    def __init__(self, state: RelayState) -> None:
        self.state = state

    async def deliver(
        self, sresp: RelayResponse, data: bytes, ex: Exchange, *, last: bool = False
    ) -> None:
        """Write bytes to the host (the response-side seam: every byte for the host passes).

        ``last``: the upstream's body has ended with these bytes — they go out with the end of
        the response (the chunked terminator) in the same write.
        """
        if last:
            await sresp.write_eof(data)
        else:
            await sresp.write(data)
        ex.response_size += len(data)

    async def respond(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        method: str,
    ) -> RelayResponse:
        """The upstream's answer to the host. The reply ends here: released (read to its end:
        its connection serves again) or closed, unless a task reading its tail took it."""
        try:
            head = self.response_head(ex, resp, method)
        except BaseException:
            resp.close()
            raise
        if head.small:
            return await self.respond_small(request, ex, resp, head, method)
        return await self.respond_stream(request, ex, resp, head, method)

    def response_head(self, ex: Exchange, resp: UpstreamReply, method: str) -> ResponseHead:
        """Status and headers for the host (the upstream's, in order), and for the recording."""
        first_byte = time.time()
        ex.describe()
        qsock = quickack_socket(resp)
        if not resp.content.is_eof():
            # More of this response is to come: acknowledge at once (see quickack). A response
            # whose body came whole with its head needs no early ACK (the next request carries
            # it), which saves a system call per quick exchange.
            quickack(qsock)
        if ex.body is not None:
            ex.body.learn()
        status = resp.status
        # The upstream's pairs go to the host as bytes, hop-by-hop ones dropped; the recording
        # gets them raw too (described by the recorder, see Exchange.response_headers).
        new_session: str | None = None
        has_length = False
        raw_headers = resp.raw_headers
        out = end_to_end(raw_headers)
        for kb, vb in out:
            low = kb.lower()
            if low == b"content-length":
                has_length = True
            elif low == b"mcp-session-id":
                new_session = decode_header(vb)
        ctype = resp.headers.get("Content-Type", "")
        is_sse = ctype.lower().startswith("text/event-stream")
        if is_sse:
            ex.is_mcp = True
        self._place_by_response(ex, new_session, is_sse and method == "GET")
        length = resp.content_length
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        small = not is_sse and not no_body and length is not None and length <= SMALL_RESPONSE
        row = {"status": status, "first_byte_at": first_byte}
        row.update(ex.response_headers(raw_headers))
        if small:
            ex.later(**row)  # recorded with the end of the exchange, a moment from now
        else:
            ex.update(**row)
            ex.hold_stream()
        if resp.reason and resp.reason != default_reason(status):
            ex.meta["reason"] = resp.reason
        encoding = resp.headers.get("Content-Encoding", "").strip().lower()
        if encoding and encoding != "identity":
            ex.meta["content_encoding"] = encoding
        # Content-Length included, as the upstream sent it.
        sresp = RelayResponse(status=status, reason=resp.reason, raw=out, has_length=has_length)
        return ResponseHead(status, sresp, ctype, encoding, is_sse, no_body, small, qsock)

    def _place_by_response(self, ex: Exchange, new_session: str | None, sse_get: bool) -> None:
        """Sessions decided by the response: ``initialize`` → its ``Mcp-Session-Id``."""
        if ex.attached:
            return
        if new_session:
            ex.attach_key(
                ex.ctx.router.mcp_key(new_session),
                RULE_MCP_SESSION,
                grouping={"mcp_session_id": new_session, "opened_by": "initialize"},
            )
        elif not sse_get:
            ex.attach_fallback()

    async def respond_small(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        head: ResponseHead,
        method: str,
    ) -> RelayResponse:
        """A small body with a length: read whole, one write."""
        try:
            return await self._small(request, ex, resp, head, method)
        finally:
            end_reply(ex, resp)

    async def _small(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        head: ResponseHead,
        method: str,
    ) -> RelayResponse:
        sresp = head.sresp
        try:
            body = await resp.read()
        except asyncio.CancelledError:
            finish_body(ex)
            ex.finish(*self.state.abort())
            raise
        except (aiohttp.ClientError, OSError) as exc:
            finish_body(ex)
            r = synthetic(
                ex,
                502,
                "upstream-reset",
                f"the upstream failed while sending the response body ({exc!r})",
                upstream_status=head.status,
            )
            ex.finish("upstream_error", f"response body cut short: {exc!r}")
            return r
        try:
            await sresp.prepare(request)
            await self.deliver(sresp, body, ex, last=True)  # head + body: one write
        except asyncio.CancelledError:
            finish_body(ex)
            ex.finish(*self.state.abort())
            raise
        except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
            finish_body(ex)
            record_body(ex, body, head.ctype, head.encoding, ex.is_mcp, complete=True)
            ex.response_size = len(body)
            ex.finish("host_aborted", f"host went away while receiving: {exc!r}")
            return sresp
        # Request before response in the recording, even when the upstream answered (413)
        # before taking the whole body: what the host still sends is read and recorded.
        if ex.body is not None:
            ex.body.settle()
        record_body(ex, body, head.ctype, head.encoding, ex.is_mcp, complete=True)
        after(ex, method, head.status)
        ex.finish("complete")
        return sresp

    async def respond_stream(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        head: ResponseHead,
        method: str,
    ) -> RelayResponse:
        """Forward the body chunk by chunk as it arrives (event streams and large bodies)."""
        st = StreamState(
            head,
            method,
            ex.is_mcp,
            SSEParser() if head.is_sse else None,
            [] if (head.is_sse and method == "GET" and not ex.attached) else None,
        )
        try:
            return await self._stream(request, ex, resp, st)
        finally:
            if not st.tail:
                end_reply(ex, resp)

    async def _stream(
        self, request: FrontRequest, ex: Exchange, resp: UpstreamReply, st: StreamState
    ) -> RelayResponse:
        head = st.head
        method = st.method
        sresp = head.sresp
        outcome = "complete"
        error: str | None = None
        flush: asyncio.TimerHandle | None = None
        try:
            await sresp.prepare(request)
            if not head.no_body and not resp.has_buffered_body():
                # Nothing to send with the head yet. Servers write the head of an event stream
                # a moment before its first event: the head waits that moment (one write and
                # one wake-up of the host instead of two), then goes alone if the stream is
                # quiet — the host must see it while nothing else comes.
                flush = asyncio.get_running_loop().call_later(HEAD_HOLD, sresp.flush_head)
            if not head.no_body:
                await self._pump(ex, resp, st)
            finish_body(ex)
            await sresp.write_eof()
        except asyncio.CancelledError:
            self._stream_cancelled(ex, resp, st)
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if st.unsent and isinstance(exc, ConnectionError):
                sse_events(self.state, ex, st.unsent)  # sent upstream, not got by the host
            outcome, error = self.stream_broke(request, ex, exc, ex.responded)
        finally:
            if flush is not None:
                flush.cancel()
        await self.stream_end(
            request,
            ex,
            outcome,
            error,
            method,
            head.status,
            lambda c: self._close_stream(ex, st, complete=c),
        )
        return sresp

    def stream_broke(
        self, request: FrontRequest, ex: Exchange, exc: BaseException, responded: bool
    ) -> tuple[str, str | None]:
        """The outcome of a streamed response that an exception ended (not a cancellation).

        Writing to the host failed: the host went away (complete if it had its answer).
        Reading from the upstream failed mid-body: the host's connection is cut too, so it
        sees a broken response exactly as it would have directly (never a clean end).
        """
        if isinstance(exc, ConnectionError):
            if responded:
                ex.meta["host_closed_after_response"] = True
                return "complete", None
            return "host_aborted", f"host went away: {exc!r}"
        if request.transport is not None:
            request.transport.close()
        return "upstream_error", f"upstream failed mid-response: {exc!r}"

    async def stream_end(
        self,
        request: FrontRequest,
        ex: Exchange,
        outcome: str,
        error: str | None,
        method: str,
        status: int,
        close: Callable[[bool], None] | None = None,
    ) -> None:
        """Record the end of a streamed response: the request body, what is held, the outcome."""
        complete = outcome == "complete"
        if complete and ex.body is not None:
            ex.body.settle()
        finish_body(ex)
        if close is not None:
            close(complete)
        if complete:
            after(ex, method, status)
        ex.finish(outcome, error)

    async def _pump(self, ex: Exchange, resp: UpstreamReply, st: StreamState) -> None:
        """Upstream body → host, chunk by chunk, until the upstream ends it."""
        qsock = st.head.qsock
        handle = self._sse_chunk if st.parser is not None else self._plain_chunk
        content = resp.content
        async for chunk in content.iter_any():
            quickack(qsock)
            await handle(ex, st, chunk, content.at_eof())
        if st.hold:
            out = b"".join(st.hold)
            st.hold = None
            await self.deliver(st.head.sresp, out, ex)

    async def _plain_chunk(self, ex: Exchange, st: StreamState, chunk: bytes, last: bool) -> None:
        await self.deliver(st.head.sresp, chunk, ex, last=last)
        if st.kept < MAX_RECORDED_BODY:
            piece = chunk[: MAX_RECORDED_BODY - st.kept]
            st.parts.append(piece)
            st.kept += len(piece)

    async def _sse_chunk(self, ex: Exchange, st: StreamState, chunk: bytes, last: bool) -> None:
        assert st.parser is not None
        events = st.parser.feed(chunk)
        st.answering = False
        if events:
            # Parsed (not recorded) before the write: the host may close the moment it has
            # the response, and that close must not read as a cancellation.
            st.unsent = events
            if not ex.responded and st.method == "POST":
                st.answering = has_response(events)
        if st.hold is not None:
            st.hold.append(chunk)
            st.held_size += len(chunk)
            first = next((e for e in events if not e.comment_only), None)
            if first is None and st.held_size < ENDPOINT_HOLD_LIMIT:
                st.unsent = None
                sse_events(self.state, ex, events)
                return
            out = b"".join(st.hold)
            st.hold = None
            if first is not None:
                out = rewrite_endpoint(ex, first, out)
            await self.deliver(st.head.sresp, out, ex, last=last)
        else:
            await self.deliver(st.head.sresp, chunk, ex, last=last)
        if st.answering:
            ex.responded = True
        st.unsent = None
        sse_events(self.state, ex, events)

    def _stream_cancelled(self, ex: Exchange, resp: UpstreamReply, st: StreamState) -> None:
        """The host closed (or the relay stops) while the stream was being relayed."""
        if st.unsent:
            # Cancelled while the chunk was being written: it was handed to the host's
            # connection, so it is recorded (and counts as delivered).
            sse_events(self.state, ex, st.unsent)
            ex.responded = ex.responded or st.answering
        if ex.responded and not self.state.stopping and st.parser is not None:
            # The SDK closes a POST's event stream as soon as it has the response: the
            # exchange completed; only the HTTP stream was left before its end. The rest of
            # the upstream's stream is read (and recorded) aside, so that its connection can
            # serve the next request instead of being torn down and reopened.
            ex.meta["host_closed_after_response"] = True
            finish_body(ex)
            ex.finish("complete")
            st.tail = True
            self.state.spawn(asyncio.create_task(self._read_rest(ex, resp, st.parser)))
            return
        self._close_stream(ex, st, complete=False)
        finish_body(ex)
        ex.finish(*self.state.abort())

    async def _read_rest(self, ex: Exchange, resp: UpstreamReply, parser: SSEParser) -> None:
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
                    sse_events(self.state, ex, events)
            rest = parser.flush()
            if rest is not None:
                sse_events(self.state, ex, [rest], complete=False)
            resp.release()
        except asyncio.CancelledError:
            resp.close()
            raise
        except Exception:  # timed out, or the upstream broke: the connection is not reused
            resp.close()
        if after:
            ex.update(meta={**ex.described_meta(), "events_after_host_closed": after})

    def _close_stream(self, ex: Exchange, st: StreamState, *, complete: bool) -> None:
        """The stream ended (or was cut): record what is still held back."""
        parser, parts, is_mcp = st.parser, st.parts, st.is_mcp
        ctype, encoding = st.head.ctype, st.head.encoding
        if parser is not None:
            rest = parser.flush()
            if rest is not None:
                sse_events(self.state, ex, [rest], complete=False)
            return
        if parts:
            body = b"".join(parts)
            parts.clear()
            truncated = ex.response_size > len(body)
            if truncated:
                ex.meta["response_body_recorded"] = len(body)
            record_body(ex, body, ctype, encoding, is_mcp, complete=complete and not truncated)
