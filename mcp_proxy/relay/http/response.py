"""The response path: the upstream's answer back to the host — small, streamed, or event stream.

:class:`ResponsePath` is one part of :class:`~mcp_proxy.relay.http.server.HTTPRelay` (composed,
not inherited). One entry (:meth:`ResponsePath.respond`) reads the upstream's head once
(:meth:`~ResponsePath.response_head`: status and headers forwarded as the upstream sent them,
the session a response names, the recording's view), then takes one of two ways:

- :meth:`~ResponsePath.respond_small` — a body with a ``Content-Length`` up to
  ``SMALL_RESPONSE``: read whole, one write, recorded with the end of the exchange; with
  hooks, decided as one message by :func:`decide_message` — the one whole-answer decision,
  shared with the lean forward engine, which gives it a :class:`WholeSide` of its own (the
  relay's is :class:`RelayWhole`);
- :meth:`~ResponsePath.respond_stream` — anything else, forwarded chunk by chunk as it
  arrives: event streams parsed for the recording (a legacy ``endpoint`` event held back and
  rewritten), other bodies kept (bounded) for it.

Bytes for the host go through :func:`deliver`, except a streamed body's chunks, which the one
streaming copy (:func:`~mcp_proxy.relay.http.stream.copy_body`, shared with the lean forward
engine) writes itself and counts through its side. What the response leaves in the recording
is :mod:`~mcp_proxy.relay.http.response_record`'s.

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
from typing import TYPE_CHECKING, Protocol

import aiohttp

from mcp_proxy.headers import end_to_end
from mcp_proxy.limits import SMALL_RESPONSE
from mcp_proxy.relay.http.common import decode_header, default_reason, quickack, quickack_socket
from mcp_proxy.relay.http.exchange import Exchange, ExchangeContext
from mcp_proxy.relay.http.forward import RequestHead, with_content_length
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse, plain_response
from mcp_proxy.relay.http.hooks import ENDS, Act, HookExchange, Hooks, Verdict, carried
from mcp_proxy.relay.http.response_record import (
    after,
    finish_body,
    record_body,
    synthetic,
)
from mcp_proxy.relay.http.sessions import RULE_MCP_SESSION
from mcp_proxy.relay.http.upstream import UpstreamReply

if TYPE_CHECKING:
    from mcp_proxy.relay.http.stream import StreamPath

__all__ = [
    "RelayState",
    "RelayWhole",
    "ResponsePath",
    "WholeSide",
    "decide_message",
    "decide_request",
]


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


async def deliver(sresp: RelayResponse, data: bytes, ex: Exchange, *, last: bool = False) -> None:
    """Write bytes to the host, counted on the exchange (a small body, an event on a hooked
    stream; a streamed body's chunks go through :func:`~mcp_proxy.relay.http.stream.copy_body`).

    ``last``: the upstream's body has ended with these bytes — they go out with the end of
    the response (the chunked terminator) in the same write.
    """
    if last:
        await sresp.write_eof(data)
    else:
        await sresp.write(data)
    ex.response_size += len(data)


def answer(ex: Exchange, v: Verdict, *, late: bool) -> RelayResponse:
    """A hook answers in the peer's place (``late``: after the upstream's head came)."""
    body = v.data or b""
    r = RelayResponse(status=v.status, headers=v.headers, body=body)
    row = {
        "status": v.status,
        "response_headers": [[k, val] for k, val in v.headers]
        + [["Content-Length", str(len(body))]],
    }
    if late:
        ex.raw_resp = None  # what the upstream said is not what the host got
        ex.later(**row)
    else:
        ex.update(first_byte_at=time.time(), **row)
    ex.response_size = len(body)
    ex.finish("complete")
    return r


def reset_host(request: FrontRequest, ex: Exchange, where: str) -> RelayResponse:
    """A hook resets the host's connection: it sees the peer go away (no response, or half
    of one). Nothing more reaches the host: the front finds the transport closed."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    ex.finish("injected_reset", f"mcptape reset the host's connection ({where})")
    return plain_response(500)


class ResponsePath:
    """The response path (see the module docstring)."""

    __slots__ = ("hooks", "state", "streams")

    def __init__(self, state: RelayState, streams: StreamPath, hooks: Hooks | None = None) -> None:
        self.state = state
        #: Bodies forwarded as they arrive (event streams, large or unsized bodies).
        self.streams = streams
        #: Called at message boundaries when installed (fault rules); None costs one ``if``.
        self.hooks = hooks

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
        return await self.streams.respond_stream(request, ex, resp, head, method)

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
        ctype = resp.content_type
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
        encoding = resp.content_encoding.strip().lower()
        if encoding and encoding != "identity":
            ex.meta["content_encoding"] = encoding
        # Content-Length included, as the upstream sent it.
        sresp = RelayResponse(status=status, reason=resp.reason, raw=out, has_length=has_length)
        if self.hooks is not None:
            self.hooks.response_head(ex, status)
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
        """A small body with a length: read whole, one write. The reply ends here (released
        when read to a clean end, otherwise closed)."""
        try:
            sresp = head.sresp
            try:
                body = out = await resp.read()
                if self.hooks is not None and ex.is_mcp and body:
                    # Recorded as the upstream sent it, then decided as one message.
                    side = RelayWhole(request, ex, head)
                    decided = await decide_message(self.hooks, ex, side, sresp, body)
                    if isinstance(decided, RelayResponse):
                        return decided
                    out, body = decided, b""  # recorded already
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
                await deliver(sresp, out, ex, last=True)  # head + body: one write
            except asyncio.CancelledError:
                finish_body(ex)
                ex.finish(*self.state.abort())
                raise
            except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
                finish_body(ex)
                record_body(ex, body, head.ctype, head.encoding, ex.is_mcp, complete=True)
                ex.response_size = len(out)
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
        finally:
            end_reply(ex, resp)


class WholeSide(Protocol):
    """One front end's part in deciding a whole answer (:func:`decide_message`): how its
    recording sees the body and a hook's answer, how its host's connection is reset. Each
    call is synchronous and must not raise for the host's sake."""

    def message(self, body: bytes) -> None:
        """The whole body, recorded as the upstream sent it (before the hooks decide it)."""
        ...

    def answer(self, v: Verdict) -> RelayResponse:
        """A hook answers in the upstream's place (after its head came): recorded; what the
        host gets."""
        ...

    def reset(self, why: str) -> None:
        """A hook resets the host's connection here."""
        ...


async def decide_message(
    hooks: Hooks, ex: HookExchange, side: WholeSide, sresp: RelayResponse, body: bytes
) -> bytes | RelayResponse:
    """A small JSON answer decided as one message — the one whole-body decision of both front
    ends: recorded as the upstream sent it, the hooks' verdict carried out. The bytes the host
    gets in ``sresp`` (its ``Content-Length`` fixed when they changed size; a drop withholds
    them until the host gives up), or the response it gets instead (a hook's answer; after a
    reset, one nothing reaches)."""
    side.message(body)
    v = await hooks.message(ex, body)
    if v.act is Act.ANSWER:
        return side.answer(v)
    if v.act in ENDS:
        side.reset(v.why)
        return plain_response(500)
    out = await carried(v, body, withhold=True)  # a drop: withheld until the host leaves
    assert out is not None
    if len(out) != len(body):
        sresp.set_header("Content-Length", str(len(out)))
    return out


async def decide_request(
    hooks: Hooks,
    ex: HookExchange,
    rh: RequestHead,
    body: bytes | None,
    answer_it: Callable[[Verdict], RelayResponse],
    reset_it: Callable[[str], object],
) -> RelayResponse | tuple[RequestHead, bytes | None]:
    """The hooks' verdict on a request before it goes upstream — the one request decision of
    both front ends, carried out: the head and the bytes to send (``body`` itself when
    unchanged; a replacement with the head's ``Content-Length`` made to fit; None for a
    streamed body, which a hook can only delay or drop), or the response the host gets
    instead (``answer_it``: a hook answers; after ``reset_it``, one nothing reaches). A drop
    waits here until the host gives up (cancelled)."""
    v = await hooks.request_body(ex, rh.head, body or b"")
    if v.act is Act.ANSWER:
        return answer_it(v)
    if v.act in ENDS:
        reset_it(v.why)
        return plain_response(500)
    if body is None:
        await carried(v, b"", withhold=True)  # a streamed body: delayed or dropped only
        return rh, None
    out = await carried(v, body, withhold=True)
    assert out is not None
    if out is not body:
        rh = with_content_length(rh, len(body), len(out))
    return rh, out


@dataclass(slots=True)
class RelayWhole:
    """The reverse relay's side of :func:`decide_message`: its
    :class:`~mcp_proxy.relay.http.exchange.Exchange` records."""

    request: FrontRequest
    ex: Exchange
    head: ResponseHead

    def message(self, body: bytes) -> None:
        record_body(self.ex, body, self.head.ctype, self.head.encoding, True, complete=True)

    def answer(self, v: Verdict) -> RelayResponse:
        return answer(self.ex, v, late=True)

    def reset(self, why: str) -> None:
        reset_host(self.request, self.ex, why)
