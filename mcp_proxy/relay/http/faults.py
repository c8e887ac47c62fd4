"""Fault injection in the HTTP relay: carry out the engine's decisions on HTTP exchanges.

:class:`~mcp_proxy.faults.engine.FaultEngine` decides, message by message, which rule fires;
this module does what the rule says to the HTTP wire, so that the host sees exactly what a
failing server would have sent it. It runs only when the relay has fault rules
(``RelayConfig.faults``): the relay's handler then hands each exchange to :func:`handle`
instead of its own forward-and-respond path — with no rules the relay pays one ``if`` per
request and nothing else.

Where each message is decided:

- the **request body** (``c2s``, a body read whole — bodies over ``SMALL_BODY`` stream through
  undecided) before it goes upstream: a request can be delayed or throttled, dropped (the host's
  request is left unanswered; a notification or response is acknowledged ``202`` as a server
  that lost it would), answered in the server's place (a JSON-RPC error, an ``isError`` tool
  result, or an HTTP status with headers — the server never sees the request), corrupted on
  its way to the server, sent twice, held until the server has taken the next host request
  (its response head came back; ``reorder``, at most ``wait``), or its connection reset;
- a **JSON response body** (``s2c``; one with a ``Content-Length`` up to ``SMALL_RESPONSE`` —
  larger or chunked bodies stream through undecided) before the host gets it: delayed, held back for ever
  (dropped), replaced by an error or a status, corrupted (``Content-Length`` follows the new
  body: the HTTP message stays well-formed, the JSON-RPC message inside is what breaks), or the
  connection reset;
- each **SSE event** (``s2c``; Streamable HTTP responses, GET streams and legacy HTTP+SSE
  streams alike): delayed, dropped, replaced, corrupted (the event stays an event; its data
  breaks), sent twice, held and sent after the next event (``reorder``; alone after
  ``wait`` when no event follows), the rest of the stream throttled, the connection reset, or
  the stream ended cleanly (``disconnect mode=end-stream after=N``: once the host has had N
  events on the stream, counted from its start, it ends as if the server had closed it — the
  event the rule fired on goes out only if it is within the N).

What is recorded: the message the peer really sent, on its usual channel (``http``/``sse``), as
always; every byte mcptape put on the wire in a peer's place as a frame on the ``inject``
channel, in the direction it travelled; and one ``inject.<action>`` finding per fired rule.
A dropped message has no inject frame, only the finding. The exchange's ``meta.injected`` lists
the rules that fired on it.

Delays use :meth:`Decision.delay_seconds` (a seeded jitter repeats with its seed).

Modules: this one (the entry, requests and JSON bodies), ``fault_events`` (event streams, and
the legacy GET streams injected answers ride), ``fault_core`` (what both share).

Limits (said, not hidden): an ``http`` rule can change the status only before the response
head went out — on a request, or on a JSON response; on an SSE event the head is gone, so the
connection is reset instead (and the finding says so). ``reorder`` on a JSON response body has
no second message in its exchange to swap with: it is noted as not applied. ``disconnect`` modes that name a process (``close-stdin``,
``kill``) reset the connection over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from mcp_proxy.frames import Direction
from mcp_proxy.relay.http.fault_core import (
    _ANSWERS,
    Decision,
    FaultEngine,
    _accepted,
    _answer_body,
    _Faults,
    _reset,
    _spawn,
    _throttle_s,
    injected_status,
)
from mcp_proxy.relay.http.fault_events import answer_on_stream, legacy_stream, respond_sse
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse, plain_response
from mcp_proxy.relay.http.response_record import after, finish_body, record_body
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE

if TYPE_CHECKING:
    from mcp_proxy.relay.http.exchange import Exchange
    from mcp_proxy.relay.http.forward import RequestHead
    from mcp_proxy.relay.http.response import ResponseHead
    from mcp_proxy.relay.http.server import HTTPRelay
    from mcp_proxy.relay.http.upstream import UpstreamReply

__all__ = ["handle", "injected_status"]


async def handle(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    rh: RequestHead,
    data: Any,
    body: bytes | None,
    method: str,
) -> RelayResponse:
    """Forward one exchange with the fault rules applied (the relay's path when rules exist)."""
    engine: FaultEngine = relay.config.faults
    f = _Faults(relay, ex, engine)
    try:
        return await _handle(relay, request, ex, rh, data, body, method, f)
    except asyncio.CancelledError:
        # The host left (or the relay stops) while a fault held the exchange — a delay, a
        # withheld answer: the exchange is still recorded, as the relay's own paths do.
        if not ex.finished:
            finish_body(ex)
            ex.finish(*relay.state.abort())
        f.place()
        raise


async def _handle(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    rh: RequestHead,
    data: Any,
    body: bytes | None,
    method: str,
    f: _Faults,
) -> RelayResponse:
    engine = f.engine
    decision = engine.decide("c2s", body) if body else None
    duplicate = False
    if decision is not None:
        action = decision.action
        legacy = ex.entry is not None and ex.entry.rule == RULE_LEGACY_SSE
        if action == "delay":
            f.fired(decision)
            await asyncio.sleep(decision.delay_seconds())
        elif action == "throttle":
            f.fired(decision)
            await asyncio.sleep(_throttle_s(decision.rule.settings, len(body or b"")))
        elif action == "drop":
            return await _drop_request(relay, request, ex, f, decision, legacy)
        elif action in _ANSWERS and action != "http" and _answer_body(decision) is None:
            f.fired(decision, applied=False, why="a notification: nothing to answer")
        elif action == "http" or (action in _ANSWERS and not legacy):
            return _answer_request(relay, ex, f, decision)
        elif action in _ANSWERS and legacy_stream(relay, ex) is not None:
            return await answer_on_stream(relay, ex, f, decision)
        elif action == "corrupt":
            assert body is not None
            data = decision.corrupted(body)
            f.fired(decision)
            f.inject(Direction.C2S, data)
            rh = _with_length(rh, len(body), len(data))
        elif action == "disconnect":
            f.fired(decision, mode=decision.rule.settings.get("mode"), http="connection reset")
            return _reset(relay, request, ex, f, "request")
        elif action == "duplicate":
            duplicate = True
            f.fired(decision)
        elif action == "reorder":
            # Held until the server has taken the host's next request (or ``wait`` passed).
            f.fired(decision)
            turn = asyncio.Event()
            relay.fault_held.append(turn)
            wait = float(decision.rule.settings.get("wait") or 1000) / 1000.0
            try:
                await asyncio.wait_for(turn.wait(), wait)
            except TimeoutError:
                pass
            finally:
                if turn in relay.fault_held:
                    relay.fault_held.remove(turn)
            f.inject(Direction.C2S, body or b"")  # where it really went: after the next one
        else:  # an answer on a legacy POST whose GET stream is gone: nothing to do here
            f.fired(decision, applied=False, why=f"{action} does not apply to this HTTP request")
    held = relay.fault_held
    waiting: list[asyncio.Event] = []
    if held and (decision is None or decision.action != "reorder"):
        # This request overtakes the held ones. They go once its response head has come back:
        # the server has then read it and taken it in hand. Releasing them as soon as it was
        # handed to the pool let a held request on another connection reach the server first.
        waiting = list(held)
        held.clear()
    try:
        resp = await relay.forward_request(request, ex, rh, data)
    finally:
        _release(waiting)
    if isinstance(resp, RelayResponse):
        f.place()
        return resp  # the relay answered (upstream unreachable, timed out…)
    if duplicate and body is not None:
        _send_again(relay, f, rh, body)
    complete = False
    try:
        head = relay.responses.response_head(ex, resp, method)
        f.flush()
        if head.is_sse and not head.no_body:
            r = await respond_sse(relay, request, ex, resp, head, method, f)
        elif head.small and ex.is_mcp:
            r = await _respond_json(relay, request, ex, resp, head, method, f)
        elif head.small:
            r = await relay.responses.respond_small(request, ex, resp, head, method)
        else:
            r = await relay.responses.respond_stream(request, ex, resp, head, method)
        complete = ex.outcome == "complete"
        return r
    finally:
        f.place()
        if complete:
            resp.release()
        else:
            resp.close()


def _with_length(rh: RequestHead, old: int, new: int) -> RequestHead:
    """The request head with its ``Content-Length`` made to fit a corrupted body."""
    if old == new:
        return rh
    import dataclasses

    head = rh.head
    for name in (b"Content-Length", b"content-length", b"Content-length"):
        needle = b"\r\n" + name + b": " + str(old).encode() + b"\r\n"
        if needle in head:
            head = head.replace(needle, b"\r\n" + name + b": " + str(new).encode() + b"\r\n", 1)
            break
    return dataclasses.replace(rh, head=head)


def _send_again(relay: HTTPRelay, f: _Faults, rh: RequestHead, body: bytes) -> None:
    """``duplicate`` on a request: the server gets it a second time; its answer is discarded.

    The copy goes on its own connection right after the original, as a host re-sending the
    same request would; what the server answers to it is read and dropped (the host asked
    once and gets one answer).
    """
    f.inject(Direction.C2S, body)
    pool = relay.upstream
    if pool is None:
        return

    async def again() -> None:
        try:
            resp = await pool.request(rh.head, body)
        except (aiohttp.ClientError, OSError, ValueError):
            return
        try:
            async with asyncio.timeout(30):
                await resp.read()
            resp.release()
        except Exception:
            resp.close()

    _spawn(relay, again())


async def _drop_request(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    f: _Faults,
    decision: Decision,
    legacy: bool,
) -> RelayResponse:
    """The server never sees the message.

    A request is left unanswered until the host gives up (closes: the handler is cancelled),
    as a server that lost it would leave it. A notification or a response — and any message
    of a legacy HTTP+SSE POST, whose answer rides the GET stream — is acknowledged ``202``,
    which is all a server ever says to those.
    """
    f.fired(decision)
    f.place()
    if decision.facts.is_request and not legacy:
        try:
            await asyncio.Future()
        except asyncio.CancelledError:
            ex.finish(*relay.state.abort())
            raise
    return _accepted(relay, ex, legacy)


def _release(waiting: list[asyncio.Event]) -> None:
    for turn in waiting:
        turn.set()


def _answer_request(
    relay: HTTPRelay, ex: Exchange, f: _Faults, decision: Decision
) -> RelayResponse:
    """Answer in the server's place; the request never reaches it."""
    if decision.action == "http":
        status, headers, body = injected_status(decision.rule.settings)
    else:
        status, body = 200, _answer_body(decision) or b""
        headers = [("Content-Type", "application/json")]
    f.fired(decision, status=status)
    f.place()
    r = plain_response(status, body)
    for name, value in headers:
        r.headers.add(name, value)
    ex.update(
        status=status,
        first_byte_at=time.time(),
        response_headers=[[k, v] for k, v in headers] + [["Content-Length", str(len(body))]],
    )
    ex.response_size = len(body)
    if body:
        f.inject(Direction.S2C, body)
    ex.finish("complete")
    return r


async def _respond_json(
    relay: HTTPRelay,
    request: FrontRequest,
    ex: Exchange,
    resp: UpstreamReply,
    head: ResponseHead,
    method: str,
    f: _Faults,
) -> RelayResponse:
    """A small MCP body: read whole, decided as one message, then sent (or not)."""
    sresp = head.sresp
    try:
        body = await resp.read()
    except (aiohttp.ClientError, OSError) as exc:
        if request.transport is not None:
            request.transport.close()
        ex.finish("upstream_error", f"response body cut short: {exc!r}")
        return sresp
    decision = f.engine.decide("s2c", body) if body else None
    out = body
    action = decision.action if decision is not None else None
    if decision is not None:
        s = decision.rule.settings
        if action == "delay":
            f.fired(decision)
            await asyncio.sleep(decision.delay_seconds())
        elif action == "throttle":
            f.fired(decision)
            await asyncio.sleep(_throttle_s(s, len(body)))
        elif action == "drop":
            f.fired(decision)
            record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            try:
                await asyncio.Future()
            except asyncio.CancelledError:
                ex.finish(*relay.state.abort())
                raise
        elif action == "http":
            record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            status, headers, new = injected_status(s)
            f.fired(decision, status=status, upstream_status=head.status)
            r = plain_response(status, new)
            for name, value in headers:
                r.headers.add(name, value)
            ex.raw_resp = None  # what the upstream said is not what the host got
            ex.later(
                status=status,
                response_headers=[[k, v] for k, v in headers] + [["Content-Length", str(len(new))]],
            )
            ex.response_size = len(new)
            if new:
                f.inject(Direction.S2C, new)
            ex.finish("complete")
            return r
        elif action in ("error", "tool-error"):
            answer = _answer_body(decision)
            if answer is None:
                f.fired(decision, applied=False, why="not a response: nothing to replace")
            else:
                out = answer
                f.fired(decision)
        elif action == "corrupt":
            out = decision.corrupted(body)
            f.fired(decision)
        elif action == "disconnect":
            f.fired(decision, mode=s.get("mode"), http="connection reset")
            record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            return _reset(relay, request, ex, f, "before the response")
        else:
            f.fired(decision, applied=False, why=f"{action} needs a second message (SSE events)")
    if out is not body:
        sresp.set_header("Content-Length", str(len(out)))
    try:
        await sresp.prepare(request)
        await relay.responses.deliver(sresp, out, ex, last=True)
    except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
        record_body(ex, body, head.ctype, head.encoding, True, complete=True)
        ex.finish("host_aborted", f"host went away while receiving: {exc!r}")
        return sresp
    if ex.body is not None:
        ex.body.settle()
    record_body(ex, body, head.ctype, head.encoding, True, complete=True)
    if out is not body:
        f.inject(Direction.S2C, out)
    after(ex, method, head.status)
    ex.finish("complete")
    return sresp
