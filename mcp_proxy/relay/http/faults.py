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
  its way to the server, sent twice, held until the next host request has gone upstream
  (``reorder``, at most ``wait``), or its connection reset;
- a **JSON response body** (``s2c``) before the host gets it: delayed, held back for ever
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

Limits (said, not hidden): an ``http`` rule can change the status only before the response
head went out — on a request, or on a JSON response; on an SSE event the head is gone, so the
connection is reset instead (and the finding says so). ``reorder`` on a JSON response body has
no second message in its exchange to swap with: it is noted as not applied. ``disconnect`` modes that name a process (``close-stdin``,
``kill``) reset the connection over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.relay.http.common import quickack
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE
from mcp_proxy.relay.http.upstream import UpstreamResponse
from mcp_proxy.relay.http.wire import WireFrame

if TYPE_CHECKING:
    from mcp_proxy.relay.http.exchange import Exchange
    from mcp_proxy.relay.http.forward import RequestHead
    from mcp_proxy.relay.http.response import ResponseHead
    from mcp_proxy.relay.http.server import HTTPRelay

__all__ = ["handle", "injected_status"]

#: Answers in the server's place, by action.
_ANSWERS = ("error", "tool-error", "http")


def _throttle_s(settings: Any, size: int) -> float:
    bps = int(settings.get("bps", 0) or 0)
    return size / bps if bps > 0 else 0.0


def injected_status(settings: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body of an ``http`` rule, as the host is to get them.

    ``header=Name:value`` settings are sent as given, in order. A body that looks like JSON
    is labelled ``application/json`` unless a header says otherwise; no body is an empty one.
    """
    status = int(settings["status"])
    headers: list[tuple[str, str]] = []
    for h in settings.get("header") or []:
        name, _, value = str(h).partition(":")
        headers.append((name.strip(), value.strip()))
    body_setting = settings.get("body")
    if body_setting is None:
        body = b""
    elif isinstance(body_setting, bytes):
        body = body_setting
    elif isinstance(body_setting, str):
        body = body_setting.encode()
    else:
        body = json.dumps(body_setting, separators=(",", ":")).encode()
    named = {n.lower() for n, _ in headers}
    if body and "content-type" not in named:
        ctype = "application/json" if body.lstrip()[:1] in (b"{", b"[") else "text/plain"
        headers.append(("Content-Type", ctype))
    return status, headers, body


class Decision(Protocol):
    """What this module needs of ``mcp_proxy.faults.engine.Decision``.

    Relays do not import the faults package (tests/test_layers.py): the engine is handed in
    through ``RelayConfig.faults`` and its decisions carry what a transport needs.
    """

    @property
    def rule(self) -> Any: ...
    @property
    def facts(self) -> Any: ...
    @property
    def direction(self) -> str: ...
    @property
    def action(self) -> str: ...
    def finding(self) -> dict[str, Any]: ...
    def replacement(self, raw: bytes) -> bytes | None: ...
    def corrupted(self, raw: bytes) -> bytes: ...
    def delay_seconds(self) -> float: ...


class FaultEngine(Protocol):
    """What this module needs of ``mcp_proxy.faults.engine.FaultEngine``."""

    def decide(self, direction: str, raw: bytes) -> Decision | None: ...


def _answer_body(decision: Decision) -> bytes | None:
    """The JSON-RPC message an ``error``/``tool-error`` rule answers with (no line end), or
    None when there is nothing to answer (a notification)."""
    answer = decision.replacement(b"")
    return answer.rstrip(b"\r\n") if answer is not None else None


@dataclass
class _Faults:
    """What one exchange's faults owe the recording (findings wait until it has a session)."""

    relay: HTTPRelay
    ex: Exchange
    engine: FaultEngine
    pending: list[tuple[Decision, dict[str, Any]]] = field(default_factory=list)

    def fired(self, decision: Decision, **note: Any) -> None:
        """A rule fired: noted in the exchange's meta, its finding handed over when placed."""
        self.ex.meta.setdefault("injected", []).append(
            {"rule": decision.rule.describe(), "direction": decision.direction, **note}
        )
        self.pending.append((decision, note))
        self.flush()

    def flush(self) -> None:
        ex = self.ex
        if not self.pending or ex.entry is None:
            return
        rec = self.relay.recorder
        add = getattr(rec, "add_finding", None)
        for decision, note in self.pending:
            finding = decision.finding()
            detail = dict(finding.get("detail") or {})
            detail.update(note)
            finding["detail"] = json.dumps(detail, default=str, ensure_ascii=False)
            if add is not None:
                add(ex.entry.session_id, **finding)
        self.pending = []

    def place(self) -> None:
        """Place the exchange (its session decides where the findings go) and flush them."""
        if self.ex.entry is None:
            self.ex.attach_fallback()
        self.flush()

    def inject(self, direction: Direction, raw: bytes, *, sse: SSEEvent | None = None) -> None:
        """Bytes mcptape put on the wire in a peer's place: an ``inject`` frame.

        Like an ``sse`` frame, an injected event is recorded as its data, its type and id in
        their own columns (``sse``: the event it stands in for).
        """
        self.ex.frame(
            WireFrame(
                direction,
                Channel.INJECT,
                raw,
                time.monotonic_ns(),
                time.time(),
                True,
                sse_id=sse.id if sse is not None else None,
                sse_event=sse.event if sse is not None else None,
            )
        )


# ---------------------------------------------------------------------------- the request
async def handle(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    rh: RequestHead,
    data: Any,
    body: bytes | None,
    method: str,
    path: str,
) -> web.StreamResponse:
    """Forward one exchange with the fault rules applied (the relay's path when rules exist)."""
    engine: FaultEngine = relay.config.faults
    f = _Faults(relay, ex, engine)
    try:
        return await _handle(relay, request, ex, rh, data, body, method, path, f)
    except asyncio.CancelledError:
        # The host left (or the relay stops) while a fault held the exchange — a delay, a
        # withheld answer: the exchange is still recorded, as the relay's own paths do.
        if not ex.finished:
            relay._finish_request_body(ex)
            ex.finish(relay._abort_outcome(), relay._abort_error())
        f.place()
        raise


async def _handle(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    rh: RequestHead,
    data: Any,
    body: bytes | None,
    method: str,
    path: str,
    f: _Faults,
) -> web.StreamResponse:
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
        elif action in _ANSWERS and _legacy_stream(relay, ex) is not None:
            return await _answer_on_stream(relay, ex, f, decision)
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
            # Held until the next message from a host has gone upstream (or ``wait`` passed).
            f.fired(decision)
            turn = asyncio.Event()
            _held_requests(relay).append(turn)
            wait = float(decision.rule.settings.get("wait") or 1000) / 1000.0
            try:
                await asyncio.wait_for(turn.wait(), wait)
            except TimeoutError:
                pass
            finally:
                if turn in _held_requests(relay):
                    _held_requests(relay).remove(turn)
            f.inject(Direction.C2S, body or b"")  # where it really went: after the next one
        else:  # an answer on a legacy POST whose GET stream is gone: nothing to do here
            f.fired(decision, applied=False, why=f"{action} does not apply to this HTTP request")
    held = relay.__dict__.get("_fault_held")
    if held and (decision is None or decision.action != "reorder"):
        # This request overtakes the held ones: they go once it has been written upstream.
        waiting = list(held)
        held.clear()
        asyncio.get_running_loop().call_soon(_release, waiting)
    resp = await relay._forward(request, ex, rh, data)
    if not isinstance(resp, UpstreamResponse):
        f.place()
        return resp  # the relay answered (upstream unreachable, timed out…)
    if duplicate and body is not None:
        _send_again(relay, f, rh, body)
    complete = False
    try:
        head = relay._response_head(ex, resp, method)
        f.flush()
        if head.is_sse and not head.no_body:
            r = await _respond_sse(relay, request, ex, resp, head, method, path, f)
        elif head.small and ex.is_mcp:
            r = await _respond_json(relay, request, ex, resp, head, method, path, f)
        elif head.small:
            r = await relay._respond_small(request, ex, resp, head, method, path)
        else:
            r = await relay._respond_stream(request, ex, resp, head, method, path)
        complete = ex.outcome == "complete"
        return r
    finally:
        f.place()
        if ex.handed_off:
            pass
        elif complete:
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
    pool = relay._pool
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

    task = asyncio.ensure_future(again())
    relay._tails.add(task)  # type: ignore[arg-type]
    task.add_done_callback(relay._tails.discard)  # type: ignore[arg-type]


async def _drop_request(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    f: _Faults,
    decision: Decision,
    legacy: bool,
) -> web.StreamResponse:
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
            ex.finish(relay._abort_outcome(), relay._abort_error())
            raise
    return _accepted(relay, ex, legacy)


def _accepted(relay: HTTPRelay, ex: Exchange, legacy: bool) -> web.StreamResponse:
    """``202`` as the server says it: empty (Streamable HTTP) or ``Accepted`` (legacy SSE).

    Not a JSON-RPC message, so (as for the server's own ``Accepted``) it is kept in the
    exchange's meta rather than as a frame.
    """
    body = b"Accepted" if legacy else b""
    headers = {"Content-Type": "text/plain; charset=utf-8"} if legacy else {}
    ex.update(
        status=202,
        first_byte_at=time.time(),
        response_headers=[[k, v] for k, v in headers.items()]
        + [["Content-Length", str(len(body))]],
    )
    ex.response_size = len(body)
    if body:
        ex.meta["response_body"] = relay.meta_body(body, headers["Content-Type"])
    ex.finish("complete")
    return web.Response(status=202, body=body, headers=headers)


def _release(waiting: list[asyncio.Event]) -> None:
    for turn in waiting:
        turn.set()


def _held_requests(relay: HTTPRelay) -> list[asyncio.Event]:
    """Requests a ``reorder`` rule holds until the next request has gone upstream."""
    held: list[asyncio.Event] | None = relay.__dict__.get("_fault_held")
    if held is None:
        held = relay.__dict__["_fault_held"] = []
    return held


def _legacy_streams(relay: HTTPRelay) -> dict[str, tuple[Exchange, _Stream, _Faults]]:
    """Open legacy HTTP+SSE GET streams under faults, by session key (answers ride them)."""
    streams: dict[str, tuple[Exchange, _Stream, _Faults]] | None = relay.__dict__.get(
        "_fault_streams"
    )
    if streams is None:
        streams = relay.__dict__["_fault_streams"] = {}
    return streams


def _legacy_stream(relay: HTTPRelay, ex: Exchange) -> tuple[Exchange, _Stream, _Faults] | None:
    if ex.entry is None or ex.entry.rule != RULE_LEGACY_SSE:
        return None
    return _legacy_streams(relay).get(ex.entry.key)


async def _answer_on_stream(
    relay: HTTPRelay, ex: Exchange, f: _Faults, decision: Decision
) -> web.StreamResponse:
    """Legacy HTTP+SSE: the POST is acknowledged ``202 Accepted`` and the answer goes out on
    the session's GET stream — where a legacy server sends every answer; the server never sees
    the request."""
    found = _legacy_stream(relay, ex)
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


def _answer_request(
    relay: HTTPRelay, ex: Exchange, f: _Faults, decision: Decision
) -> web.StreamResponse:
    """Answer in the server's place; the request never reaches it."""
    if decision.action == "http":
        status, headers, body = injected_status(decision.rule.settings)
    else:
        status, body = 200, _answer_body(decision) or b""
        headers = [("Content-Type", "application/json")]
    f.fired(decision, status=status)
    f.place()
    r = web.Response(status=status, body=body)
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


def _reset(
    relay: HTTPRelay, request: web.BaseRequest, ex: Exchange, f: _Faults, where: str
) -> web.StreamResponse:
    """Reset the host's connection: it sees the server go away (no response, or half of one)."""
    f.place()
    transport = request.transport
    if transport is not None:
        transport.abort()
    ex.finish("injected_reset", f"mcptape reset the host's connection ({where})")
    # Nothing more reaches the host: aiohttp finds the transport closed and writes nothing.
    return web.Response(status=500)


# ---------------------------------------------------------------------------- JSON responses
async def _respond_json(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    resp: UpstreamResponse,
    head: ResponseHead,
    method: str,
    path: str,
    f: _Faults,
) -> web.StreamResponse:
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
            relay._record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            try:
                await asyncio.Future()
            except asyncio.CancelledError:
                ex.finish(relay._abort_outcome(), relay._abort_error())
                raise
        elif action == "http":
            relay._record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            status, headers, new = injected_status(s)
            f.fired(decision, status=status, upstream_status=head.status)
            r = web.Response(status=status, body=new)
            for name, value in headers:
                r.headers.add(name, value)
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
            relay._record_body(ex, body, head.ctype, head.encoding, True, complete=True)
            return _reset(relay, request, ex, f, "before the response")
        else:
            f.fired(decision, applied=False, why=f"{action} needs a second message (SSE events)")
    if out is not body:
        sresp._headers["Content-Length"] = str(len(out))
    try:
        await sresp.prepare(request)
        await relay._deliver(sresp, out, ex, last=True)
    except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
        relay._record_body(ex, body, head.ctype, head.encoding, True, complete=True)
        ex.finish("host_aborted", f"host went away while receiving: {exc!r}")
        return sresp
    await relay._settle_request_body(request, ex)
    relay._record_body(ex, body, head.ctype, head.encoding, True, complete=True)
    if out is not body:
        f.inject(Direction.S2C, out)
    relay._after(ex, method, head.status, path)
    ex.finish("complete")
    return sresp


# ---------------------------------------------------------------------------- event streams
@dataclass
class _Stream:
    """One event stream under faults: what is held back, and how the rest is to go."""

    sresp: web.StreamResponse
    bps: int = 0  # a throttle rule fired: the rest of the stream at this rate
    held: list[SSEEvent] = field(default_factory=list)  # reorder: sent after the next event
    end_after: int | None = None  # end-stream: events still to deliver before the end
    delivered: int = 0  # events (not comments) the host got on this stream
    timer: asyncio.TimerHandle | None = None  # reorder: sends what is held after ``wait``
    responded: bool = False
    key: str | None = None  # a legacy GET stream: its session (answers are injected into it)


def _event_bytes(ev: SSEEvent, data: bytes) -> bytes:
    """An event like ``ev`` (same type and id) carrying ``data`` (one ``data:`` line per line)."""
    lines = []
    if ev.id is not None:
        lines.append(b"id: " + ev.id.encode())
    if ev.event is not None:
        lines.append(b"event: " + ev.event.encode())
    for line in data.split(b"\n"):
        lines.append(b"data: " + line)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _respond_sse(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    resp: UpstreamResponse,
    head: ResponseHead,
    method: str,
    path: str,
    f: _Faults,
) -> web.StreamResponse:
    """An event stream, event by event: each is decided, then delivered (or not)."""
    st = _Stream(head.sresp)
    try:
        return await _pump_events(relay, request, ex, resp, head, method, path, f, st)
    finally:
        if st.timer is not None:
            st.timer.cancel()
        _forget(relay, st)


async def _pump_events(
    relay: HTTPRelay,
    request: web.BaseRequest,
    ex: Exchange,
    resp: UpstreamResponse,
    head: ResponseHead,
    method: str,
    path: str,
    f: _Faults,
    st: _Stream,
) -> web.StreamResponse:
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
                relay._sse_events(ex, [rest], True, complete=False)
                await _send(relay, ex, st, rest.raw)
            await _flush_held(relay, ex, f, st)
        relay._finish_request_body(ex)
        await sresp.write_eof()
    except asyncio.CancelledError:
        if st.responded and not relay._stopping:
            ex.meta["host_closed_after_response"] = True
            relay._finish_request_body(ex)
            ex.finish("complete")
        else:
            relay._finish_request_body(ex)
            ex.finish(relay._abort_outcome(), relay._abort_error())
        raise
    except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
        if st.responded:
            ex.meta["host_closed_after_response"] = True
        else:
            outcome, error = "host_aborted", f"host went away: {exc!r}"
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        outcome, error = "upstream_error", f"upstream failed mid-response: {exc!r}"
        if request.transport is not None:
            request.transport.close()
    if outcome == "complete":
        await relay._settle_request_body(request, ex)
        relay._after(ex, method, head.status, path)
    relay._finish_request_body(ex)
    ex.finish(outcome, error)
    return sresp


def _forget(relay: HTTPRelay, st: _Stream) -> None:
    if st.key is not None:
        streams = _legacy_streams(relay)
        if streams.get(st.key, (None, None))[1] is st:
            del streams[st.key]


async def _send(relay: HTTPRelay, ex: Exchange, st: _Stream, raw: bytes) -> None:
    if st.bps:
        await asyncio.sleep(len(raw) / st.bps)
    await relay._deliver(st.sresp, raw, ex)  # type: ignore[arg-type]


def _is_response(ev: SSEEvent) -> bool:
    head = ev.data[:160]
    return b'"method"' not in head and (b'"result"' in head or b'"error"' in head)


async def _event(
    relay: HTTPRelay, request: web.BaseRequest, ex: Exchange, f: _Faults, st: _Stream, ev: SSEEvent
) -> bool:
    """Decide and deliver one event; False once the stream is to end here."""
    if ev.comment_only or not ev.data or ev.event == "endpoint":
        plain = ev.raw
        if ev.event == "endpoint":
            plain = relay._maybe_rewrite_endpoint(ex, ev, plain)
        relay._sse_events(ex, [ev], True)
        if not ev.comment_only:
            st.delivered += 1
        await _send(relay, ex, st, plain)
        if ev.event == "endpoint" and ex.entry is not None and ex.entry.rule == RULE_LEGACY_SSE:
            st.key = ex.entry.key
            _legacy_streams(relay)[st.key] = (ex, st, f)
        return True
    decision = f.engine.decide("s2c", ev.data)
    relay._sse_events(ex, [ev], True)  # what the server sent, on its usual channel
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


def _spawn(relay: HTTPRelay, coro: Any) -> None:
    """Run ``coro`` as a task the relay waits for at shutdown; a write that fails (the host
    left) ends it quietly."""

    async def guarded() -> None:
        try:
            await coro
        except (ConnectionError, aiohttp.ClientConnectionResetError, RuntimeError):
            pass

    task = asyncio.ensure_future(guarded())
    relay._tails.add(task)  # type: ignore[arg-type]
    task.add_done_callback(relay._tails.discard)  # type: ignore[arg-type]
