"""Faults on event streams: each SSE event decided, then delivered, changed or held back
(see :mod:`mcp_proxy.relay.http.faults`); legacy HTTP+SSE GET streams carry injected answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from mcp_proxy.frames import Direction
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.relay.http.common import quickack
from mcp_proxy.relay.http.fault_core import (
    Decision,
    _accepted,
    _answer_body,
    _event_bytes,
    _Faults,
    _reset,
    _spawn,
)
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse
from mcp_proxy.relay.http.response_record import finish_body, rewrite_endpoint, sse_events
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE
from mcp_proxy.relay.http.upstream import UpstreamReply

if TYPE_CHECKING:
    from mcp_proxy.relay.http.exchange import Exchange
    from mcp_proxy.relay.http.response import ResponseHead
    from mcp_proxy.relay.http.server import HTTPRelay

__all__ = ["answer_on_stream", "legacy_stream", "respond_sse"]


@dataclass
class _Stream:
    """One event stream under faults: what is held back, and how the rest is to go."""

    sresp: RelayResponse
    bps: int = 0  # a throttle rule fired: the rest of the stream at this rate
    held: list[SSEEvent] = field(default_factory=list)  # reorder: sent after the next event
    end_after: int | None = None  # end-stream: events still to deliver before the end
    delivered: int = 0  # events (not comments) the host got on this stream
    timer: asyncio.TimerHandle | None = None  # reorder: sends what is held after ``wait``
    responded: bool = False
    key: str | None = None  # a legacy GET stream: its session (answers are injected into it)


def legacy_stream(relay: HTTPRelay, ex: Exchange) -> tuple[Exchange, _Stream, _Faults] | None:
    if ex.entry is None or ex.entry.rule != RULE_LEGACY_SSE:
        return None
    return relay.fault_streams.get(ex.entry.key)


async def answer_on_stream(
    relay: HTTPRelay, ex: Exchange, f: _Faults, decision: Decision
) -> RelayResponse:
    """Legacy HTTP+SSE: the POST is acknowledged ``202 Accepted`` and the answer goes out on
    the session's GET stream — where a legacy server sends every answer; the server never sees
    the request."""
    found = legacy_stream(relay, ex)
    assert found is not None
    gex, st, gf = found
    answer = _answer_body(decision) or b""
    ev = SSEEvent(raw=b"", data=answer, event="message")
    f.fired(decision, on="the legacy GET stream")
    f.place()
    r = _accepted(relay, ex, True)
    try:
        await _send(relay, gex, st, _event_bytes(ev, answer))
    except (ConnectionError, aiohttp.ClientConnectionResetError):
        return r  # the GET stream is gone: the host hears nothing more, as from the server
    gf.inject(Direction.S2C, answer, sse=ev)
    return r


async def respond_sse(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    resp: UpstreamReply,
    head: ResponseHead,
    method: str,
    f: _Faults,
) -> RelayResponse:
    """An event stream, event by event: each is decided, then delivered (or not)."""
    st = _Stream(head.sresp)
    try:
        return await _pump_events(relay, request, ex, resp, head, method, f, st)
    finally:
        if st.timer is not None:
            st.timer.cancel()
        _forget(relay, st)


async def _pump_events(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    resp: UpstreamReply,
    head: ResponseHead,
    method: str,
    f: _Faults,
    st: _Stream,
) -> RelayResponse:
    sresp = head.sresp
    parser = SSEParser()
    outcome, error = "complete", None
    try:
        await sresp.prepare(request)
        if not resp.has_buffered_body():
            head.sresp.flush_head()  # type: ignore[attr-defined]
        ended = False
        async for chunk in resp.content.iter_any():
            quickack(head.qsock)
            for ev in parser.feed(chunk):
                if not await _event(relay, request, ex, f, st, ev):
                    ended = True
                    break
            if ended:
                break
        if not ended:
            rest = parser.flush()
            if rest is not None:
                sse_events(relay.state, ex, [rest], complete=False)
                await _send(relay, ex, st, rest.raw)
            await _flush_held(relay, ex, f, st)
        finish_body(ex)
        await sresp.write_eof()
    except asyncio.CancelledError:
        if st.responded and not relay.state.stopping:
            ex.meta["host_closed_after_response"] = True
            finish_body(ex)
            ex.finish("complete")
        else:
            finish_body(ex)
            ex.finish(*relay.state.abort())
        raise
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        outcome, error = relay.responses.stream_broke(request, ex, exc, st.responded)
    await relay.responses.stream_end(request, ex, outcome, error, method, head.status)
    return sresp


def _forget(relay: HTTPRelay, st: _Stream) -> None:
    if st.key is not None:
        streams = relay.fault_streams
        if streams.get(st.key, (None, None))[1] is st:
            del streams[st.key]


async def _send(relay: HTTPRelay, ex: Exchange, st: _Stream, raw: bytes) -> None:
    if st.bps:
        await asyncio.sleep(len(raw) / st.bps)
    await relay.responses.deliver(st.sresp, raw, ex)  # type: ignore[arg-type]


def _is_response(ev: SSEEvent) -> bool:
    head = ev.data[:160]
    return b'"method"' not in head and (b'"result"' in head or b'"error"' in head)


async def _event(
    relay: HTTPRelay, request: FrontRequest, ex: Exchange, f: _Faults, st: _Stream, ev: SSEEvent
) -> bool:
    """Decide and deliver one event; False once the stream is to end here."""
    if ev.comment_only or not ev.data or ev.event == "endpoint":
        plain = ev.raw
        if ev.event == "endpoint":
            plain = rewrite_endpoint(ex, ev, plain)
        sse_events(relay.state, ex, [ev])
        if not ev.comment_only:
            st.delivered += 1
        await _send(relay, ex, st, plain)
        if ev.event == "endpoint" and ex.entry is not None and ex.entry.rule == RULE_LEGACY_SSE:
            st.key = ex.entry.key
            relay.fault_streams[st.key] = (ex, st, f)
        return True
    decision = f.engine.decide("s2c", ev.data)
    sse_events(relay.state, ex, [ev])  # what the server sent, on its usual channel
    if st.end_after is not None:
        if st.end_after <= 0:
            return False
        st.end_after -= 1
    if decision is None:
        await _deliver_event(relay, ex, f, st, ev, ev.raw)
        return True
    action = decision.action
    s = decision.rule.settings
    out = ev.raw
    if action == "delay":
        f.fired(decision)
        await asyncio.sleep(decision.delay_seconds())
    elif action == "throttle":
        f.fired(decision, bps=s.get("bps"))
        st.bps = int(s.get("bps") or 0)
    elif action == "drop":
        f.fired(decision)
        return True
    elif action in ("error", "tool-error"):
        answer = _answer_body(decision)
        if answer is None:
            f.fired(decision, applied=False, why="a notification: nothing to replace")
        else:
            out = _event_bytes(ev, answer)
            f.fired(decision)
            f.inject(Direction.S2C, answer, sse=ev)
    elif action == "corrupt":
        data = decision.corrupted(ev.data)
        out = _event_bytes(ev, data)
        f.fired(decision)
        f.inject(Direction.S2C, data, sse=ev)
    elif action == "duplicate":
        f.fired(decision)
        await _deliver_event(relay, ex, f, st, ev, ev.raw)
        f.inject(Direction.S2C, ev.data, sse=ev)
    elif action == "reorder":
        f.fired(decision)
        st.held.append(ev)
        if st.timer is None:  # no next event within ``wait``: it goes out alone
            wait = float(s.get("wait") or 1000) / 1000.0
            st.timer = asyncio.get_running_loop().call_later(
                wait, lambda: _spawn(relay, _flush_held(relay, ex, f, st))
            )
        return True
    elif action == "disconnect":
        mode = s.get("mode")
        if mode == "end-stream":
            # ``after=N``: the stream ends once the host has had N events on it (counted from
            # its start); the event the rule fired on goes out only if it is within the N.
            after = int(s.get("after") or 0)
            if st.end_after is not None:
                # The stream is already ending: a later firing changes nothing (no finding).
                await _deliver_event(relay, ex, f, st, ev, out)
                return True
            f.fired(decision, mode=mode, after=after)
            if after - st.delivered <= 0:
                return False
            st.end_after = after - st.delivered - 1
        else:
            f.fired(decision, mode=mode, http="connection reset")
            _reset(relay, request, ex, f, "mid-stream")
            return False
    elif action == "http":
        f.fired(decision, applied=False, http="connection reset", why="the head was already sent")
        _reset(relay, request, ex, f, "mid-stream: a status cannot follow the head")
        return False
    await _deliver_event(relay, ex, f, st, ev, out)
    return True


async def _deliver_event(
    relay: HTTPRelay, ex: Exchange, f: _Faults, st: _Stream, ev: SSEEvent, out: bytes | None
) -> None:
    if out is None:
        return
    if _is_response(ev):
        st.responded = True
    st.delivered += 1
    await _send(relay, ex, st, out)
    await _flush_held(relay, ex, f, st)


async def _flush_held(relay: HTTPRelay, ex: Exchange, f: _Faults, st: _Stream) -> None:
    """Reorder: what was held goes out now (after the event it was swapped with, or alone
    once ``wait`` passed); on the inject channel, where the host got it."""
    if st.timer is not None:
        st.timer.cancel()
        st.timer = None
    while st.held:
        held = st.held.pop(0)
        if _is_response(held):
            st.responded = True
        st.delivered += 1
        await _send(relay, ex, st, held.raw)
        f.inject(Direction.S2C, held.data, sse=held)
