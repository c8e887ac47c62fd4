"""The lean engine's HTTP side, its recording and hook calls: what :class:`~mcp_proxy.forward.
handler.RequestHandler` composes besides forwarding.

- :class:`Taping`: each call into the tape guarded (a failure in the recording is logged, never
  the host's problem), the response head told to the tape and the hooks;
- :class:`Verdicts`: with ``--fault``/``--intercept``, the hooks' verdicts carried out at the
  reverse relay's boundaries — the request body before it goes upstream, a whole answer, each
  SSE event (recorded as the upstream sent it, then decided);
- :func:`guarded`: the tape's chunk copier, given copies only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from mcp_proxy.forward.exchange import KIND_MAYBE, KIND_MCP, ResponseHead, TapeExchange
from mcp_proxy.forward.recognize import is_event_stream
from mcp_proxy.framing import SSEParser
from mcp_proxy.limits import SMALL_RESPONSE
from mcp_proxy.relay.http.forward import RequestHead as WireHead
from mcp_proxy.relay.http.forward import with_content_length
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse, plain_response
from mcp_proxy.relay.http.hooks import ENDS, Act, Hooks, Verdict, carried

__all__ = ["CUT", "ENDED", "RESET", "Copy", "Taping", "Verdicts", "guarded", "once"]

log = logging.getLogger("mcptape.forward")

#: How an event stream decided by hooks ended (:meth:`Verdicts.events`).
ENDED, CUT, RESET = "ended", "cut", "reset"


class Taping:
    """Telling the tape what passed, each call guarded: a failure in the recording is logged,
    never the host's problem; the hooks (when installed) hear of each response head."""

    __slots__ = ("hooks",)

    def __init__(self) -> None:
        self.hooks: Hooks | None = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One call into the recording: a failure there is logged, never the host's problem."""
        try:
            return fn(*args)
        except Exception:
            log.exception("mcptape: the recording failed in %s", getattr(fn, "__name__", fn))
            return None

    def head(self, ex: TapeExchange | None, resp: Any, arrived: float) -> bool:
        """The response's head to the tape; True: it copies the body chunk by chunk."""
        if ex is None:
            return False
        head = ResponseHead(resp.status, resp.reason or "", resp.raw_headers, arrived)
        copying = bool(self.call(ex.response_head, head))
        if self.hooks is not None:
            self.hooks.response_head(ex, resp.status)
        return copying

    def ensure_head(self, ex: TapeExchange | None, resp: Any, arrived: float) -> None:
        if ex is not None and ex.response is None:
            self.head(ex, resp, arrived)

    def done(self, ex: TapeExchange | None, body: bytes, size: int | None = None) -> None:
        """The response went out whole: its end (and body, unless it was copied) to the tape."""
        if ex is not None:
            self.call(ex.done, None if ex.streamed else body, size, time.time())

    def error(self, ex: TapeExchange | None, msg: str, *, synthesized: bool = False) -> None:
        """The exchange broke; ``synthesized``: the engine answers the host itself (502)."""
        if ex is not None:
            self.call(ex.error, msg, "mcptape" if synthesized else None)


class Verdicts:
    """The hooks' verdicts carried out on the lean engine's path (fault injection, intercept),
    at the reverse relay's boundaries: the request body, a whole answer, each SSE event."""

    __slots__ = ("hooks", "taping")

    def __init__(self, hooks: Hooks, taping: Taping) -> None:
        self.hooks = hooks
        self.taping = taping

    @staticmethod
    def small_message(ex: TapeExchange, resp: Any) -> bool:
        """An MCP answer with a body of at most ``SMALL_RESPONSE`` bytes that is no event
        stream: decided as one message."""
        length = resp.content_length
        if ex.kind != KIND_MCP or length is None or not 0 < length <= SMALL_RESPONSE:
            return False
        ctype = resp.headers.get("Content-Type", "")
        return not is_event_stream(ctype)

    def events_hooked(self, ex: TapeExchange | None) -> bool:
        """The body is an event stream of MCP messages (or one that may be) and hooks decide
        each event."""
        return ex is not None and ex.parser is not None and ex.kind in (KIND_MCP, KIND_MAYBE)

    async def decide_request(
        self, req: FrontRequest, ex: TapeExchange, head: WireHead, body: bytes
    ) -> RelayResponse | tuple[WireHead, bytes]:
        """The hooks' verdict on a request body before it goes upstream, carried out."""
        try:
            v = await self.hooks.request_body(ex, head.head, body)
            if v.act is Act.ANSWER:
                return self.answer(ex, v)
            if v.act in ENDS:
                return self.reset(req, ex, v.why)
            out = await carried(v, body, withhold=True)  # a drop: until the host gives up
        except asyncio.CancelledError:
            self.taping.error(ex, "Client disconnected.")
            raise
        assert out is not None
        if out is not body:
            head = with_content_length(head, len(body), len(out))
        return head, out

    async def decide_whole(
        self,
        req: FrontRequest,
        ex: TapeExchange,
        resp: Any,
        rr: RelayResponse,
        body: bytes,
        arrived: float,
    ) -> RelayResponse:
        """A response whole at once, with hooks: recorded as the upstream sent it, decided
        (one JSON message, or each event of an event stream), then what was decided sent."""
        copying = self.taping.head(ex, resp, arrived)
        try:
            if copying and self.events_hooked(ex):
                await rr.prepare(req)
                if await self.events(req, rr, ex, once(body)) != RESET:
                    await rr.write_eof()
                    self.taping.done(ex, b"")
                return rr
            if copying:  # not an event stream: a large body goes as it came
                rr.body = body
                await rr.send(req)
                guarded(ex.chunk)(body)
                self.taping.done(ex, body)
                return rr
            self.taping.call(ex.message, body)
            v = await self.hooks.message(ex, body)
            if v.act is Act.ANSWER:
                return self.answer(ex, v)
            if v.act in ENDS:
                return self.reset(req, ex, v.why)
            out = await carried(v, body, withhold=True)  # a drop: until the host gives up
            assert out is not None
            if len(out) != len(body):
                rr.set_header("Content-Length", str(len(out)))
            rr.body = out
            await rr.send(req)
        except (asyncio.CancelledError, ConnectionError):  # the host left
            self.taping.error(ex, "Client disconnected.")
            raise
        self.taping.done(ex, out)
        return rr

    async def events(
        self,
        req: FrontRequest,
        rr: RelayResponse,
        ex: TapeExchange,
        chunks: AsyncIterator[bytes],
    ) -> str:
        """An event stream event by event: each recorded as the upstream sent it, decided,
        then carried out (the reverse relay's order). How it ended: ``ENDED`` (the upstream
        ended it), ``CUT`` (a hook ended it cleanly) or ``RESET`` (a hook reset the host)."""

        async def send(data: bytes) -> None:
            await rr.write(data)

        hooks = self.hooks
        parser = SSEParser()
        async for chunk in chunks:
            for ev in parser.feed(chunk):
                self.taping.call(ex.chunk, ev.raw)
                if ex.kind != KIND_MCP:  # a GET stream that is not MCP: not decided
                    await rr.write(ev.raw)
                    continue
                v = await hooks.event(ex, ev, send)
                if v.act is Act.END:
                    return CUT
                if v.act in ENDS:
                    self.reset(req, ex, v.why)
                    return RESET
                out = await carried(v, ev.raw, withhold=False)
                if out is not None:
                    await rr.write(out)
        rest = parser.flush()
        if rest is not None:
            self.taping.call(ex.chunk, rest.raw)
            await rr.write(rest.raw)
        await hooks.stream_end(ex)
        return ENDED

    def answer(self, ex: TapeExchange, v: Verdict) -> RelayResponse:
        """A hook answers the host in the upstream's place."""
        body = v.data or b""
        self.taping.call(ex.answered, v.status, v.headers, len(body))
        return RelayResponse(status=v.status, headers=v.headers, body=body)

    def reset(self, req: FrontRequest, ex: TapeExchange, where: str) -> RelayResponse:
        """A hook resets the host's connection: it sees the peer go away."""
        transport = req.transport
        if transport is not None:
            transport.abort()
        self.taping.call(
            ex.ended, "injected_reset", f"mcptape reset the host's connection ({where})"
        )
        return plain_response(500)


async def once(body: bytes) -> AsyncIterator[bytes]:
    yield body


Copy = Callable[[bytes], None]


def guarded(chunk: Copy) -> Copy:
    """The tape's chunk copier, given copies only: the bytes already went to the host, so a
    failure in it is logged once and ends the copying — never the host's stream."""
    broken = False

    def copy(data: bytes) -> None:
        nonlocal broken
        if broken:
            return
        try:
            chunk(data)
        except Exception:
            broken = True
            log.exception("mcptape: copying a chunk for the recording failed; the rest is not")

    return copy
