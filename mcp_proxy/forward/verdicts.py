"""The lean engine's HTTP side, its recording and hook calls: what :class:`~mcp_proxy.forward.
handler.RequestHandler` composes besides forwarding.

- :class:`Taping`: each call into the tape guarded (a failure in the recording is logged, never
  the host's problem), the response head told to the tape and the hooks;
- :class:`Verdicts`: with ``--fault``/``--intercept``, the hooks' verdicts carried out at the
  reverse relay's boundaries — the request body before it goes upstream; a whole answer by the
  reverse relay's own decision (:func:`~mcp_proxy.relay.http.response.decide_message`), each
  SSE event on its own loop (:func:`~mcp_proxy.relay.http.stream.copy_events`);
- :class:`TapeSide`: the lean engine's side of both (where the bytes and the recording go);
- :func:`guarded`: the tape's chunk copier, given copies only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mcp_proxy.forward.exchange import KIND_MAYBE, KIND_MCP, ResponseHead, TapeExchange
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.forward import RequestHead as WireHead
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.hooks import Hooks, Verdict
from mcp_proxy.relay.http.kept import Kept
from mcp_proxy.relay.http.response import decide_request

__all__ = ["Copy", "TapeSide", "Taping", "Verdicts", "answer", "guarded", "reset_host"]

log = logging.getLogger("mcptape.forward")


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

    def events_hooked(self, ex: TapeExchange | None) -> bool:
        """The body is an event stream of MCP messages (or one that may be) and hooks decide
        each event."""
        return ex is not None and ex.parser is not None and ex.kind in (KIND_MCP, KIND_MAYBE)

    async def decide_request(
        self, req: FrontRequest, ex: TapeExchange, head: WireHead, body: bytes
    ) -> RelayResponse | tuple[WireHead, bytes]:
        """The hooks' verdict on a request body before it goes upstream, carried out by the
        reverse relay's own decision (:func:`~mcp_proxy.relay.http.response.decide_request`)."""
        taping = self.taping
        try:
            decided = await decide_request(
                self.hooks,
                ex,
                head,
                body,
                lambda v: answer(taping, ex, v),
                lambda why: reset_host(req, taping, ex, why),
            )
        except asyncio.CancelledError:
            taping.error(ex, "Client disconnected.")
            raise
        if isinstance(decided, RelayResponse):
            return decided
        head, out = decided
        assert out is not None
        return head, out


def answer(taping: Taping, ex: TapeExchange, v: Verdict) -> RelayResponse:
    """A hook answers the host in the upstream's place; the tape says so."""
    body = v.data or b""
    taping.call(ex.answered, v.status, v.headers, len(body))
    return RelayResponse(status=v.status, headers=v.headers, body=body)


def reset_host(req: FrontRequest, taping: Taping, ex: TapeExchange, where: str) -> None:
    """A hook resets the host's connection: it sees the peer go away; the tape says so."""
    transport = req.transport
    if transport is not None:
        transport.abort()
    taping.call(ex.ended, "injected_reset", f"mcptape reset the host's connection ({where})")


class TapeSide:
    """The lean engine's side of the one streaming copy (:func:`~mcp_proxy.relay.http.stream.
    copy_body`): the upstream's bytes written to the host as they came, then a copy of each
    chunk to the tape when it asked for them (``copy``), else the body kept, bounded, for its
    end (``kept``); with hooks, each event recorded through the tape's chunk copier. It is the
    lean engine's side of the one whole-answer decision too (:func:`~mcp_proxy.relay.http.
    response.decide_message`): the body recorded as the upstream sent it, a hook's answer."""

    __slots__ = ("copy", "ex", "kept", "req", "rr", "taping")

    def __init__(
        self, req: FrontRequest, rr: RelayResponse, taping: Taping, ex: TapeExchange | None
    ) -> None:
        self.req = req
        self.rr = rr
        self.taping = taping
        self.ex = ex
        self.copy: Copy | None = None
        self.kept: Kept | None = None

    async def send(self, data: bytes) -> None:
        await self.rr.write(data)

    def before(self, chunk: bytes) -> bytes | None:
        return chunk

    def went(self, chunk: bytes, sent: int) -> None:
        if self.copy is not None:
            self.copy(chunk)  # a copy, after it went
        elif self.kept is not None:
            self.kept.add(chunk)

    def held(self) -> bytes | None:
        return None

    def event(self, ev: SSEEvent) -> bytes | None:
        ex = self.ex
        assert ex is not None
        self.taping.call(ex.chunk, ev.raw)
        return ev.raw if ex.kind == KIND_MCP else None  # a GET stream that is not MCP: undecided

    def last_event(self, ev: SSEEvent) -> None:
        assert self.ex is not None
        self.taping.call(self.ex.chunk, ev.raw)

    def reset(self, why: str) -> None:
        assert self.ex is not None
        reset_host(self.req, self.taping, self.ex, why)

    def message(self, body: bytes) -> None:
        assert self.ex is not None
        self.taping.call(self.ex.message, body)

    def answer(self, v: Verdict) -> RelayResponse:
        assert self.ex is not None
        return answer(self.taping, self.ex, v)


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
