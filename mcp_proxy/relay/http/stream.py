"""Streamed responses: forwarded chunk by chunk as they arrive — event streams and bodies
without a (small) ``Content-Length`` — on one path for both front ends.

The copy itself is shared: :func:`copy_body` (the head prepared, held up to ``HEAD_HOLD`` for
the body's first bytes, then each upstream chunk to the host, recorded once it went — or, with
hooks installed on an event stream, :func:`copy_events`: event by event, each recorded as the
upstream sent it, decided, carried out). What differs between the front ends is a
:class:`Side`: what is held back and where the recording goes — the reverse
relay's :class:`RelaySide` (its :class:`~mcp_proxy.relay.http.exchange.Exchange`: events parsed
before the write, a legacy GET stream's first bytes held back until its ``endpoint`` event is
whole, then rewritten to point at the relay; other bodies kept, bounded) and the lean forward
engine's ``TapeSide`` (:mod:`mcp_proxy.forward.verdicts`: a copy of each chunk to the tape).

:class:`StreamPath` is the reverse relay's streaming half of the response path
(:class:`~mcp_proxy.relay.http.response.ResponsePath` hands it every body it does not read
whole). A host that leaves after it got its JSON-RPC response leaves the rest of the stream to a
task that reads it (briefly) so the upstream connection can serve again (:func:`read_tail`, the
lean forward engine's too).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.limits import ENDPOINT_HOLD_LIMIT, HEAD_HOLD, TAIL_READ
from mcp_proxy.relay.http.common import quickack
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.hooks import ENDS, Act, HookExchange, Hooks, carried
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

__all__ = [
    "CUT",
    "ENDED",
    "RESET",
    "Side",
    "StreamPath",
    "copy_body",
    "copy_events",
    "read_tail",
]

#: How a streamed body ended (:func:`copy_body`): the upstream ended it (``ENDED``), a hook
#: ended it cleanly (``CUT``) or reset the host's connection (``RESET``).
ENDED, CUT, RESET = "ended", "cut", "reset"


class Side(Protocol):
    """One front end's part in the shared copy: what it holds back, how its recording sees
    what went to its host. Every call but :meth:`send` is synchronous and must not raise for
    the host's sake."""

    async def send(self, data: bytes) -> None:
        """Write ``data`` to the host on the open stream (an event; what a hook sends)."""
        ...

    def before(self, chunk: bytes) -> bytes | None:
        """An upstream chunk, before it goes: the bytes to write now (None: held back)."""
        ...

    def went(self, chunk: bytes, sent: int) -> None:
        """``chunk`` went to the host as ``sent`` bytes (0: held back): record it."""
        ...

    def held(self) -> bytes | None:
        """The upstream ended its body: what is still held back goes now."""
        ...

    def event(self, ev: SSEEvent) -> bytes | None:
        """With hooks: one event, recorded as the upstream sent it; the bytes the hooks decide
        on (None: a stream that is not MCP — it goes as it came, undecided)."""
        ...

    def last_event(self, ev: SSEEvent) -> None:
        """With hooks: the stream ended inside an event; its rest recorded (it goes as it came)."""
        ...

    def reset(self, why: str) -> None:
        """A hook resets the host's connection here."""
        ...


async def copy_events(
    chunks: AsyncIterator[bytes],
    parser: SSEParser,
    side: Side,
    hooks: Hooks,
    ex: HookExchange,
    qsock: socket.socket | None = None,
) -> str:
    """An event stream event by event, with hooks: each event recorded as the upstream sent it,
    decided, then carried out. How it ended: ``ENDED``, ``CUT`` or ``RESET``."""
    send = side.send
    async for chunk in chunks:
        if qsock is not None:
            quickack(qsock)
        for ev in parser.feed(chunk):
            out = side.event(ev)
            if out is None:  # not an MCP stream: not decided
                await send(ev.raw)
                continue
            v = await hooks.event(ex, ev, send)
            if v.act in ENDS:
                if v.act is Act.END:
                    return CUT
                side.reset(v.why)  # a reset (no answer after a head)
                return RESET
            sent = await carried(v, out, withhold=False)
            if sent is not None:
                await send(sent)
    rest = parser.flush()
    if rest is not None:
        side.last_event(rest)
        await send(rest.raw)
    await hooks.stream_end(ex)
    return ENDED


async def copy_body(
    request: FrontRequest,
    sresp: RelayResponse,
    resp: UpstreamReply,
    side: Side,
    qsock: socket.socket | None = None,
    hooked: tuple[Hooks, HookExchange, SSEParser] | None = None,
) -> str:
    """A streamed body from ``resp`` to the host — the one streaming copy of both front ends:
    each upstream chunk written to ``sresp`` (the body's last bytes with its end: one write),
    then recorded through ``side``; ``qsock`` acknowledged at once after each read (see
    quickack). ``hooked``: an event stream decided event by event (:func:`copy_events`). The
    response's end is the caller's (after a reset nothing more reaches the host). How it
    ended: ``ENDED``, ``CUT`` or ``RESET``."""
    await sresp.prepare(request)
    content = resp.content
    if hooked is not None:
        # The head goes at once: a hook may reset the connection at the first event, and the
        # host must then see what a server cutting its stream shows (a head, then nothing).
        sresp.flush_head()
        hooks, ex, parser = hooked
        return await copy_events(content.iter_any(), parser, side, hooks, ex, qsock)
    flush: asyncio.TimerHandle | None = None
    if not resp.has_buffered_body():
        # Nothing to send with the head yet. Servers write the head of a JSON answer or an
        # event stream a moment before its body: the head waits that moment (one write, one
        # TLS record and one wake-up of the host instead of two), then goes alone if the
        # stream is quiet — the host must see it while nothing else comes.
        flush = asyncio.get_running_loop().call_later(HEAD_HOLD, sresp.flush_head)
    try:
        while chunk := await content.readany():
            if qsock is not None:
                quickack(qsock)
            out = side.before(chunk)
            if out is None:
                side.went(chunk, 0)
                continue
            if content.at_eof():  # the last bytes: no read more for the end
                await sresp.write_eof(out)
                side.went(chunk, len(out))
                break
            await sresp.write(out)
            side.went(chunk, len(out))
        rest = side.held()
        if rest:
            await sresp.write(rest)
            side.went(b"", len(rest))
    finally:
        if flush is not None:
            flush.cancel()
    return ENDED


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


@dataclass(slots=True)
class RelaySide:
    """The reverse relay's side of the copy: a streamed response in progress, recorded on its
    :class:`~mcp_proxy.relay.http.exchange.Exchange`."""

    state: RelayState
    ex: Exchange
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
    #: With hooks: the host's request (a reset aborts its connection).
    request: FrontRequest | None = None

    async def send(self, data: bytes) -> None:
        await deliver(self.head.sresp, data, self.ex)

    def before(self, chunk: bytes) -> bytes | None:
        parser = self.parser
        if parser is None:
            return chunk
        ex = self.ex
        events = parser.feed(chunk)
        self.answering = False
        if events:
            # Parsed (not recorded) before the write: the host may close the moment it has
            # the response, and that close must not read as a cancellation.
            self.unsent = events
            if not ex.responded and self.method == "POST":
                self.answering = has_response(events)
        if self.hold is None:
            return chunk
        self.hold.append(chunk)
        self.held_size += len(chunk)
        first = next((e for e in events if not e.comment_only), None)
        if first is None and self.held_size < ENDPOINT_HOLD_LIMIT:
            return None
        out = b"".join(self.hold)
        self.hold = None
        if first is not None:
            out = rewrite_endpoint(ex, first, out)
        return out

    def went(self, chunk: bytes, sent: int) -> None:
        self.ex.response_size += sent
        if self.parser is None:
            self.copy.add(chunk)
            return
        if self.answering:
            self.ex.responded = True
        events, self.unsent = self.unsent, None
        if events:
            sse_events(self.state, self.ex, events)

    def held(self) -> bytes | None:
        if not self.hold:
            return None
        out = b"".join(self.hold)
        self.hold = None
        return out

    def event(self, ev: SSEEvent) -> bytes | None:
        out = ev.raw
        if ev.event == "endpoint":
            out = rewrite_endpoint(self.ex, ev, out)
        sse_events(self.state, self.ex, [ev])  # what the upstream sent, on its usual channel
        return out

    def last_event(self, ev: SSEEvent) -> None:
        sse_events(self.state, self.ex, [ev], complete=False)

    def reset(self, why: str) -> None:
        assert self.request is not None
        reset_host(self.request, self.ex, why)


class StreamPath:
    """The reverse relay's streaming half of the response path (see the module docstring)."""

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
        st = RelaySide(
            self.state,
            ex,
            head,
            method,
            ex.is_mcp,
            SSEParser() if head.is_sse else None,
            [] if (head.is_sse and method == "GET" and not ex.attached) else None,
        )
        hooked: tuple[Hooks, HookExchange, SSEParser] | None = None
        if self.hooks is not None and st.parser is not None:
            st.hold = None  # events go one by one: an endpoint event is whole when decided
            st.request = request
            hooked = (self.hooks, ex, st.parser)
        try:
            sresp = head.sresp
            outcome = "complete"
            error: str | None = None
            try:
                if head.no_body:
                    await sresp.prepare(request)
                else:
                    await copy_body(request, sresp, resp, st, head.qsock, hooked)
                finish_body(ex)
                await sresp.write_eof()
            except asyncio.CancelledError:
                self._stream_cancelled(ex, resp, st)
                raise
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                if st.unsent and isinstance(exc, ConnectionError):
                    sse_events(self.state, ex, st.unsent)  # sent upstream, not got by the host
                outcome, error = self.stream_broke(request, ex, exc, ex.responded)
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

    def _stream_cancelled(self, ex: Exchange, resp: UpstreamReply, st: RelaySide) -> None:
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

    def _close_stream(self, ex: Exchange, st: RelaySide, *, complete: bool) -> None:
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
