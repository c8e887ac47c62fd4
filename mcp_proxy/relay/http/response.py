"""Response paths: the upstream's answer back to the host — small, streamed, or event stream.

One entry (:meth:`ResponseSide._respond`) reads the upstream's head once
(:meth:`~ResponseSide._response_head`: status and headers forwarded as the upstream sent them,
the session a response names, the recording's view), then takes one of two paths:

- :meth:`~ResponseSide._respond_small` — a body with a ``Content-Length`` up to
  ``SMALL_RESPONSE``: read whole, one write, recorded with the end of the exchange;
- :meth:`~ResponseSide._respond_stream` — anything else, forwarded chunk by chunk as it
  arrives: :meth:`~ResponseSide._sse_chunk` for event streams (parsed for the recording, a
  legacy ``endpoint`` event held back and rewritten) and :meth:`~ResponseSide._plain_chunk`
  for other bodies.

Every byte for the host goes through :meth:`~ResponseSide._deliver` — the one seam where a
fault-injection layer can delay, cut or alter what the host gets (the request's seam is
``Upstream.request``).

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
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import ENDPOINT_HOLD_LIMIT, MAX_RECORDED_BODY, SMALL_RESPONSE, TAIL_READ
from mcp_proxy.relay.http.common import (
    decode_for_record,
    decode_header,
    default_reason,
    quickack,
    quickack_socket,
)
from mcp_proxy.relay.http.core import RelayCore
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE, RULE_MCP_SESSION, body_facts
from mcp_proxy.relay.http.upstream import UpstreamReply
from mcp_proxy.relay.http.wire import WireFrame

__all__ = ["ResponseSide"]

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


class ResponseSide(RelayCore):
    """The response paths (see the module docstring)."""

    async def _deliver(
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

    async def _respond(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        method: str,
        path: str,
    ) -> RelayResponse:
        head = self._response_head(ex, resp, method)
        if head.small:
            return await self._respond_small(request, ex, resp, head, method, path)
        return await self._respond_stream(request, ex, resp, head, method, path)

    def _response_head(self, ex: Exchange, resp: UpstreamReply, method: str) -> ResponseHead:
        """Status and headers for the host (the upstream's, in order), and for the recording."""
        first_byte = time.time()
        self._describe(ex)
        qsock = quickack_socket(resp)
        if not resp.content.is_eof():
            # More of this response is to come: acknowledge at once (see quickack). A response
            # whose body came whole with its head needs no early ACK (the next request carries
            # it), which saves a system call per quick exchange.
            quickack(qsock)
        if ex.body_streaming and not ex.body_done:
            self._facts_from_stream(ex)
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
            ex.attach(
                self.router.get(
                    self.router.mcp_key(new_session),
                    RULE_MCP_SESSION,
                    grouping={"mcp_session_id": new_session, "opened_by": "initialize"},
                )
            )
        elif not sse_get:
            ex.attach_fallback()

    async def _respond_small(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        head: ResponseHead,
        method: str,
        path: str,
    ) -> RelayResponse:
        """A small body with a length: read whole, one write."""
        sresp = head.sresp
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
                upstream_status=head.status,
            )
            ex.finish("upstream_error", f"response body cut short: {exc!r}")
            return r
        try:
            await sresp.prepare(request)
            await self._deliver(sresp, body, ex, last=True)  # head + body: one write
        except asyncio.CancelledError:
            self._finish_request_body(ex)
            ex.finish(self._abort_outcome(), self._abort_error())
            raise
        except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
            self._finish_request_body(ex)
            self._record_body(ex, body, head.ctype, head.encoding, ex.is_mcp, complete=True)
            ex.response_size = len(body)
            ex.finish("host_aborted", f"host went away while receiving: {exc!r}")
            return sresp
        # Request before response in the recording, even when the upstream answered (413)
        # before taking the whole body: what the host still sends is read and recorded.
        await self._settle_request_body(request, ex)
        self._record_body(ex, body, head.ctype, head.encoding, ex.is_mcp, complete=True)
        self._after(ex, method, head.status, path)
        ex.finish("complete")
        return sresp

    async def _respond_stream(
        self,
        request: FrontRequest,
        ex: Exchange,
        resp: UpstreamReply,
        head: ResponseHead,
        method: str,
        path: str,
    ) -> RelayResponse:
        """Forward the body chunk by chunk as it arrives (event streams and large bodies)."""
        sresp = head.sresp
        st = StreamState(
            head,
            method,
            ex.is_mcp,
            SSEParser() if head.is_sse else None,
            [] if (head.is_sse and method == "GET" and not ex.attached) else None,
        )
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
            self._finish_request_body(ex)
            await sresp.write_eof()
        except asyncio.CancelledError:
            self._stream_cancelled(ex, resp, st)
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if st.unsent and isinstance(exc, ConnectionError):
                self._sse_events(ex, st.unsent, st.is_mcp)  # sent upstream, not got by the host
            outcome, error = self._stream_broke(request, ex, exc, ex.responded)
        finally:
            if flush is not None:
                flush.cancel()
        await self._stream_end(
            request,
            ex,
            outcome,
            error,
            method,
            head.status,
            path,
            lambda c: self._close_stream(ex, st, complete=c),
        )
        return sresp

    def _stream_broke(
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

    async def _stream_end(
        self,
        request: FrontRequest,
        ex: Exchange,
        outcome: str,
        error: str | None,
        method: str,
        status: int,
        path: str,
        close: Callable[[bool], None] | None = None,
    ) -> None:
        """Record the end of a streamed response: the request body, what is held, the outcome."""
        complete = outcome == "complete"
        if complete:
            await self._settle_request_body(request, ex)
        self._finish_request_body(ex)
        if close is not None:
            close(complete)
        if complete:
            self._after(ex, method, status, path)
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
            await self._deliver(st.head.sresp, out, ex)

    async def _plain_chunk(self, ex: Exchange, st: StreamState, chunk: bytes, last: bool) -> None:
        await self._deliver(st.head.sresp, chunk, ex, last=last)
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
                st.answering = self._has_response(events)
        if st.hold is not None:
            st.hold.append(chunk)
            st.held_size += len(chunk)
            first = next((e for e in events if not e.comment_only), None)
            if first is None and st.held_size < ENDPOINT_HOLD_LIMIT:
                st.unsent = None
                self._sse_events(ex, events, st.is_mcp)
                return
            out = b"".join(st.hold)
            st.hold = None
            if first is not None:
                out = self._maybe_rewrite_endpoint(ex, first, out)
            await self._deliver(st.head.sresp, out, ex, last=last)
        else:
            await self._deliver(st.head.sresp, chunk, ex, last=last)
        if st.answering:
            ex.responded = True
        st.unsent = None
        self._sse_events(ex, events, st.is_mcp)

    def _stream_cancelled(self, ex: Exchange, resp: UpstreamReply, st: StreamState) -> None:
        """The host closed (or the relay stops) while the stream was being relayed."""
        if st.unsent:
            # Cancelled while the chunk was being written: it was handed to the host's
            # connection, so it is recorded (and counts as delivered).
            self._sse_events(ex, st.unsent, st.is_mcp)
            ex.responded = ex.responded or st.answering
        if ex.responded and not self._stopping and st.parser is not None:
            # The SDK closes a POST's event stream as soon as it has the response: the
            # exchange completed; only the HTTP stream was left before its end. The rest of
            # the upstream's stream is read (and recorded) aside, so that its connection can
            # serve the next request instead of being torn down and reopened.
            ex.meta["host_closed_after_response"] = True
            self._finish_request_body(ex)
            ex.finish("complete")
            ex.handed_off = True
            task = asyncio.create_task(self._read_rest(ex, resp, st.parser, st.is_mcp))
            self._tails.add(task)
            task.add_done_callback(self._tails.discard)
            return
        self._close_stream(ex, st, complete=False)
        self._finish_request_body(ex)
        ex.finish(self._abort_outcome(), self._abort_error())

    async def _read_rest(
        self, ex: Exchange, resp: UpstreamReply, parser: SSEParser, is_mcp: bool
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
            ex.update(meta={**ex.described_meta(), "events_after_host_closed": after})

    def _close_stream(self, ex: Exchange, st: StreamState, *, complete: bool) -> None:
        """The stream ended (or was cut): record what is still held back."""
        parser, parts, is_mcp = st.parser, st.parts, st.is_mcp
        ctype, encoding = st.head.ctype, st.head.encoding
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
        self, ex: Exchange, body: bytes, ctype: str, encoding: str, is_mcp: bool, complete: bool
    ) -> None:
        if not body:
            return
        if encoding and encoding != "identity":
            # After forwarding, bounded: a decompression bomb costs MAX_INFLATED_BODY bytes.
            decoded = decode_for_record(body, encoding, "response", ctype)
            if decoded.note:
                ex.meta.update(decoded.note)
            if decoded.data is None:
                return
            body = decoded.data
            complete = complete and decoded.complete
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
            ex.meta["response_body"] = self.meta_body(body, ctype)

    def _sse_events(
        self, ex: Exchange, events: list[SSEEvent] | None, is_mcp: bool, complete: bool = True
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

    def _attach_legacy(self, ex: Exchange, ev: SSEEvent) -> None:
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

    def _maybe_rewrite_endpoint(self, ex: Exchange, ev: SSEEvent, out: bytes) -> bytes:
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
