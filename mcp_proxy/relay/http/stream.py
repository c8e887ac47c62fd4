"""Streamed responses: forwarded chunk by chunk as they arrive — event streams and bodies
without a (small) ``Content-Length``.

:class:`StreamPath` is the streaming half of the response path
(:class:`~mcp_proxy.relay.http.response.ResponsePath` hands it every body it does not read
whole). Without hooks an event stream goes chunk by chunk (:meth:`StreamPath._sse_chunk`:
events parsed for the recording after the bytes went out; a legacy GET stream's first bytes
held back until its ``endpoint`` event is whole, then rewritten to point at the relay); with
hooks installed, event by event (:meth:`StreamPath._pump_events`: recorded as sent, decided,
carried out). Other bodies are kept, bounded, for the recording (:meth:`StreamPath._plain_chunk`).
A host that leaves after it got its JSON-RPC response leaves the rest of the stream to a task
that reads it (briefly) so the upstream connection can serve again (:func:`read_tail`, the lean
forward engine's too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.limits import ENDPOINT_HOLD_LIMIT, HEAD_HOLD, TAIL_READ
from mcp_proxy.relay.http.common import quickack
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.hooks import ENDS, Act, Hooks, Send, carried
from mcp_proxy.relay.http.kept import Kept
from mcp_proxy.relay.http.response import (
    RelayState,
    ResponseHead,
    deliver,
    end_reply,
    reset_host,
)
from mcp_proxy.relay.http.response_record import (
    after,
    finish_body,
    has_response,
    record_body,
    rewrite_endpoint,
    sse_events,
)
from mcp_proxy.relay.http.upstream import UpstreamReply

__all__ = ["StreamPath", "read_tail"]


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
    copy: Kept = field(default_factory=Kept)
    #: Events parsed from the chunk being written (recorded once the write is done).
    unsent: list[SSEEvent] | None = None
    #: The chunk being written carries the JSON-RPC response of this POST.
    answering: bool = False
    #: A task reads the rest of the stream (the host left with its response): it owns the reply.
    tail: bool = False
    #: With hooks: the host's request (a reset aborts its connection), and what writes to it.
    request: FrontRequest | None = None
    send: Send | None = None


async def read_tail(resp: UpstreamReply, consume: Callable[[bytes], None]) -> bool:
    """Read the rest of a response whose host left with its answer — one path for the reverse
    relay and the lean forward engine: at most ``TAIL_READ`` s, each chunk to ``consume`` (the
    recording); the connection goes back to its pool when the body ended in time (True), and
    is closed otherwise (timed out, the upstream broke, or cancelled)."""
    try:
        async with asyncio.timeout(TAIL_READ):
            async for chunk in resp.content.iter_any():
                consume(chunk)
    except asyncio.CancelledError:
        resp.close()
        raise
    except Exception:  # timed out, or the upstream broke: the connection is not reused
        resp.close()
        return False
    resp.release()
    return True


class StreamEnd(Exception):
    """A hook ended the event stream here (cleanly, or by resetting the host's connection)."""


class StreamPath:
    """The streaming half of the response path (see the module docstring)."""

    __slots__ = ("hooks", "state")

    def __init__(self, state: RelayState, hooks: Hooks | None = None) -> None:
        self.state = state
        self.hooks = hooks

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
        if self.hooks is not None and head.is_sse:
            st.hold = None  # events go one by one: an endpoint event is whole when decided
            st.request = request

            async def send(data: bytes) -> None:
                await deliver(head.sresp, data, ex)

            st.send = send
        try:
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
        finally:
            if not st.tail:  # a task reading the stream's tail owns the reply
                end_reply(ex, resp)

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
        if st.send is not None:
            await self._pump_events(ex, resp, st)
            return
        handle = self._sse_chunk if st.parser is not None else self._plain_chunk
        content = resp.content
        async for chunk in content.iter_any():
            quickack(qsock)
            await handle(ex, st, chunk, content.at_eof())
        if st.hold:
            out = b"".join(st.hold)
            st.hold = None
            await deliver(st.head.sresp, out, ex)

    async def _pump_events(self, ex: Exchange, resp: UpstreamReply, st: StreamState) -> None:
        """With hooks: event by event, each recorded as sent, then decided, then carried out."""
        parser, send, hooks = st.parser, st.send, self.hooks
        assert parser is not None and send is not None and hooks is not None
        # The head goes at once: a hook may reset the connection at the first event, and the
        # host must then see what a server cutting its stream shows (a head, then nothing).
        st.head.sresp.flush_head()
        try:
            async for chunk in resp.content.iter_any():
                quickack(st.head.qsock)
                for ev in parser.feed(chunk):
                    await self._event(ex, st, ev, send, hooks)
        except StreamEnd:
            return
        rest = parser.flush()
        if rest is not None:
            sse_events(self.state, ex, [rest], complete=False)
            await send(rest.raw)
        await hooks.stream_end(ex)

    async def _event(
        self, ex: Exchange, st: StreamState, ev: SSEEvent, send: Send, hooks: Hooks
    ) -> None:
        out = ev.raw
        if ev.event == "endpoint":
            out = rewrite_endpoint(ex, ev, out)
        sse_events(self.state, ex, [ev])  # what the upstream sent, on its usual channel
        v = await hooks.event(ex, ev, send)
        if v.act in ENDS:
            if v.act is not Act.END:  # a reset (no answer after a head)
                assert st.request is not None
                reset_host(st.request, ex, v.why)
            raise StreamEnd()
        sent = await carried(v, out, withhold=False)
        if sent is not None:
            await send(sent)

    async def _plain_chunk(self, ex: Exchange, st: StreamState, chunk: bytes, last: bool) -> None:
        await deliver(st.head.sresp, chunk, ex, last=last)
        st.copy.add(chunk)

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
            await deliver(st.head.sresp, out, ex, last=last)
        else:
            await deliver(st.head.sresp, chunk, ex, last=last)
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

        def record(chunk: bytes) -> None:
            nonlocal after
            events = parser.feed(chunk)
            after += sum(1 for e in events if not e.comment_only)
            sse_events(self.state, ex, events)

        if await read_tail(resp, record):
            rest = parser.flush()
            if rest is not None:
                sse_events(self.state, ex, [rest], complete=False)
        if after:
            ex.update(meta={**ex.described_meta(), "events_after_host_closed": after})

    def _close_stream(self, ex: Exchange, st: StreamState, *, complete: bool) -> None:
        """The stream ended (or was cut): record what is still held back."""
        parser, is_mcp = st.parser, st.is_mcp
        ctype, encoding = st.head.ctype, st.head.encoding
        if parser is not None:
            rest = parser.flush()
            if rest is not None:
                sse_events(self.state, ex, [rest], complete=False)
            return
        body = st.copy.take()
        if body:
            truncated = ex.response_size > len(body)
            if truncated:
                ex.meta["response_body_recorded"] = len(body)
            record_body(ex, body, ctype, encoding, is_mcp, complete=complete and not truncated)
