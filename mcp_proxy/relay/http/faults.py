"""Fault injection in the HTTP relay: a :class:`~mcp_proxy.relay.http.hooks.Hooks` implementation.

:class:`~mcp_proxy.faults.engine.FaultEngine` decides, message by message, which rule fires;
:class:`FaultHooks` turns each decision into a :class:`~mcp_proxy.relay.http.hooks.Verdict` the
relay's one path carries out, so that the host sees exactly what a failing server would have
sent it. It is installed only when the relay has fault rules (``RelayConfig.faults``); with no
rules the relay pays one ``if`` per boundary and never imports this module.

Where each message is decided:

- the **request body** (``c2s``, a body read whole — bodies over ``SMALL_BODY`` stream through
  undecided) before it goes upstream: delayed or throttled, dropped (a request is left
  unanswered; a notification or response is acknowledged ``202`` as a server that lost it
  would), answered in the server's place (a JSON-RPC error, an ``isError`` tool result, or an
  HTTP status with headers — the server never sees the request; on a legacy HTTP+SSE POST the
  answer rides the session's GET stream), corrupted on its way to the server (its
  ``Content-Length`` follows), sent twice, held until the server has taken the next host
  request (``reorder``, at most ``wait``), or its connection reset;
- a **JSON response body** (``s2c``; one with a ``Content-Length`` up to ``SMALL_RESPONSE``)
  before the host gets it: delayed, withheld for ever (dropped), replaced by an error or a
  status, corrupted (``Content-Length`` follows the new body), or the connection reset;
- each **SSE event** (``s2c``; Streamable HTTP responses, GET streams and legacy streams
  alike): delayed, dropped, replaced, corrupted (the event stays an event; its data breaks),
  sent twice, held and sent after the next event (``reorder``; alone after ``wait`` when no
  event follows), the rest of the stream throttled, the connection reset, or the stream ended
  cleanly (``disconnect mode=end-stream after=N``: once the host has had N events on the
  stream, counted from its start; the event the rule fired on goes out only if within the N).

What is recorded: the message the peer really sent, on its usual channel (``http``/``sse``), as
always; every byte mcptape put on the wire in a peer's place as a frame on the ``inject``
channel, in the direction it travelled; and one ``inject.<action>`` finding per fired rule.
A dropped message has no inject frame, only the finding. The exchange's ``meta.injected`` lists
the rules that fired on it. Delays use :meth:`Decision.delay_seconds` (a seeded jitter repeats).

Limits (said, not hidden): an ``http`` rule can change the status only before the response head
went out; on an SSE event the connection is reset instead (and the finding says so).
``reorder`` on a JSON response body has no second message to swap with: noted as not applied.
``disconnect`` modes that name a process (``close-stdin``, ``kill``) reset the connection.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from mcp_proxy.faults.engine import Decision, FaultEngine
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.common import meta_body
from mcp_proxy.relay.http.hooks import PASS, Act, HookExchange, Send, Verdict
from mcp_proxy.relay.http.intercept import AsyncHolder, held_event, held_request, held_response
from mcp_proxy.relay.http.response_record import has_response
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE
from mcp_proxy.relay.http.upstream import Upstream

__all__ = ["FaultHooks", "event_bytes", "injected_status"]

ANSWERS = ("error", "tool-error", "http")


def throttle_seconds(settings: Any, size: int) -> float:
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


def answer_body(decision: Decision) -> bytes | None:
    """The JSON-RPC message an ``error``/``tool-error`` rule answers with (no line end), or
    None when there is nothing to answer (a notification)."""
    answer = decision.replacement(b"")
    return answer.rstrip(b"\r\n") if answer is not None else None


def event_bytes(ev: SSEEvent, data: bytes) -> bytes:
    """An event like ``ev`` (same type and id) carrying ``data`` (one ``data:`` line per line)."""
    lines = []
    if ev.id is not None:
        lines.append(b"id: " + ev.id.encode())
    if ev.event is not None:
        lines.append(b"event: " + ev.event.encode())
    for line in data.split(b"\n"):
        lines.append(b"data: " + line)
    return b"\r\n".join(lines) + b"\r\n\r\n"


@dataclass
class StreamFaults:
    """One event stream under faults: what is held back, and how the rest is to go."""

    send: Send
    bps: int = 0  # a throttle rule fired: the rest of the stream at this rate
    held: list[SSEEvent] = field(default_factory=list)  # reorder: sent after the next event
    end_after: int | None = None  # end-stream: events still to deliver before the end
    delivered: int = 0  # events (not comments) the host got on this stream
    timer: asyncio.TimerHandle | None = None  # reorder: sends what is held after ``wait``
    key: str | None = None  # a legacy GET stream: its session (answers are injected into it)

    def pace(self, out: bytes) -> Verdict:
        """Send ``out`` — at the throttled rate once a throttle rule fired."""
        if self.bps:
            return Verdict(Act.DELAY, data=out, seconds=len(out) / self.bps)
        return Verdict(Act.REPLACE, data=out)


@dataclass
class ExchangeFaults:
    """What one exchange's faults owe (findings wait until it has a session) and hold."""

    ex: HookExchange
    pending: list[tuple[Decision, dict[str, Any]]] = field(default_factory=list)
    #: Requests held by ``reorder`` that this one overtook: released once its head is back.
    waiting: list[asyncio.Event] = field(default_factory=list)
    #: ``duplicate``: the head and body to send again once the original was taken.
    again: tuple[bytes, bytes] | None = None
    status: int = 0
    stream: StreamFaults | None = None

    def fired(self, decision: Decision, /, **note: Any) -> None:
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
        for decision, note in self.pending:
            finding = decision.finding(note.get("decision"), note.get("by"))
            detail = dict(finding.get("detail") or {})
            detail.update(note)
            finding["detail"] = json.dumps(detail, default=str, ensure_ascii=False)
            ex.add_finding(ex.entry.session_id, **finding)
        self.pending = []

    def place(self) -> None:
        """Place the exchange (its session decides where the findings go) and flush them."""
        if self.ex.entry is None:
            self.ex.attach_fallback()
        self.flush()

    def inject(self, direction: Direction, raw: bytes, *, sse: SSEEvent | None = None) -> None:
        """Bytes mcptape put on the wire in a peer's place: an ``inject`` frame (an injected
        event recorded as its data, its type and id in their own columns)."""
        self.ex.frame(
            Frame(
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

    def release(self) -> None:
        for turn in self.waiting:
            turn.set()
        self.waiting = []


class FaultHooks:
    """Carries out the fault engine's decisions at the relay's hooks (see the module docs)."""

    def __init__(
        self,
        engine: FaultEngine,
        keep: Callable[[asyncio.Task[None]], None],
        upstream: Callable[[HookExchange], Upstream | None],
        holder: AsyncHolder | None = None,
    ) -> None:
        """``keep``: keeps a task the relay waits for when it stops; ``upstream``: where an
        exchange's request went (``duplicate`` sends it there again; None: nowhere)."""
        self.engine = engine
        #: Intercept: where a message an ``intercept`` rule matched waits for a person.
        self.holder = holder
        self.keep = keep
        self.upstream = upstream
        self.exchanges: dict[HookExchange, ExchangeFaults] = {}
        #: Requests a ``reorder`` rule holds until the server has taken the next request.
        self.held: list[asyncio.Event] = []
        #: Open legacy HTTP+SSE GET streams, by session key (injected answers ride them).
        self.legacy: dict[str, ExchangeFaults] = {}

    def of(self, ex: HookExchange) -> ExchangeFaults:
        f = self.exchanges.get(ex)
        if f is None:
            f = self.exchanges[ex] = ExchangeFaults(ex)
        return f

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as a task the relay waits for at shutdown; a write that fails (the
        host left) ends it quietly."""

        async def guarded() -> None:
            try:
                await coro
            except (ConnectionError, aiohttp.ClientConnectionResetError, RuntimeError):
                pass

        self.keep(asyncio.ensure_future(guarded()))

    # ------------------------------------------------------------------ the request
    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        f = self.of(ex)
        decision = self.engine.decide("c2s", body) if body else None
        verdict = PASS if decision is None else await self.decide_request(f, decision, head, body)
        if verdict.act in (Act.PASS, Act.DELAY, Act.REPLACE):
            if decision is None or decision.action != "reorder":
                # This request overtakes the held ones. They go once its response head has
                # come back: the server has then read it and taken it in hand.
                f.waiting, self.held[:] = list(self.held), []
        return verdict

    async def decide_request(
        self, f: ExchangeFaults, decision: Decision, head: bytes, body: bytes
    ) -> Verdict:
        ex = f.ex
        action = decision.action
        settings = decision.rule.settings
        legacy = ex.entry is not None and ex.entry.rule == RULE_LEGACY_SSE
        if action == "intercept" and self.holder is not None:
            return await held_request(self, f, decision, body)
        if action == "delay":
            f.fired(decision)
            return Verdict(Act.DELAY, seconds=decision.delay_seconds())
        if action == "throttle":
            f.fired(decision)
            return Verdict(Act.DELAY, seconds=throttle_seconds(settings, len(body)))
        if action == "drop":
            f.fired(decision)
            f.place()
            if decision.facts.is_request and not legacy:
                return Verdict(Act.DROP)  # unanswered until the host gives up
            return self.accepted(ex, legacy)
        if action in ANSWERS and action != "http" and answer_body(decision) is None:
            f.fired(decision, applied=False, why="a notification: nothing to answer")
            return PASS
        if action == "http" or (action in ANSWERS and not legacy):
            return self.answer(f, decision)
        if action in ANSWERS and ex.entry is not None and ex.entry.key in self.legacy:
            return await self.answer_on_stream(f, decision, self.legacy[ex.entry.key])
        if action == "corrupt":
            data = decision.corrupted(body)
            f.fired(decision)
            f.inject(Direction.C2S, data)
            return Verdict(Act.REPLACE, data=data)
        if action == "disconnect":
            f.fired(decision, mode=settings.get("mode"), http="connection reset")
            f.place()
            return Verdict(Act.RESET, why="request")
        if action == "duplicate":
            f.fired(decision)
            f.again = (head, body)
            return PASS
        if action == "reorder":
            f.fired(decision)
            await self.hold(float(settings.get("wait") or 1000) / 1000.0)
            f.inject(Direction.C2S, body)  # where it really went: after the next one
            return PASS
        # an answer on a legacy POST whose GET stream is gone: nothing to do here
        f.fired(decision, applied=False, why=f"{action} does not apply to this HTTP request")
        return PASS

    async def hold(self, wait: float) -> None:
        """Until the server has taken the host's next request (or ``wait`` passed)."""
        turn = asyncio.Event()
        self.held.append(turn)
        try:
            await asyncio.wait_for(turn.wait(), wait)
        except TimeoutError:
            pass
        finally:
            if turn in self.held:
                self.held.remove(turn)

    def answer(self, f: ExchangeFaults, decision: Decision) -> Verdict:
        """Answer in the server's place; the request never reaches it."""
        if decision.action == "http":
            status, headers, body = injected_status(decision.rule.settings)
        else:
            status, body = 200, answer_body(decision) or b""
            headers = [("Content-Type", "application/json")]
        f.fired(decision, status=status)
        f.place()
        if body:
            f.inject(Direction.S2C, body)
        return Verdict(Act.ANSWER, data=body, status=status, headers=tuple(headers))

    def accepted(self, ex: HookExchange, legacy: bool) -> Verdict:
        """``202`` as the server says it: empty (Streamable HTTP) or ``Accepted`` (legacy SSE);
        not a JSON-RPC message, so kept in the exchange's meta rather than as a frame."""
        if not legacy:
            return Verdict(Act.ANSWER, data=b"", status=202)
        ctype = "text/plain; charset=utf-8"
        ex.meta["response_body"] = meta_body(ex.redactor, b"Accepted", ctype)
        return Verdict(Act.ANSWER, data=b"Accepted", status=202, headers=(("Content-Type", ctype),))

    async def answer_on_stream(
        self, f: ExchangeFaults, decision: Decision, gf: ExchangeFaults
    ) -> Verdict:
        """Legacy HTTP+SSE: the POST is acknowledged ``202 Accepted`` and the answer goes out on
        the session's GET stream — where a legacy server sends every answer."""
        answer = answer_body(decision) or b""
        ev = SSEEvent(raw=b"", data=answer, event="message")
        f.fired(decision, on="the legacy GET stream")
        f.place()
        verdict = self.accepted(f.ex, True)
        st = gf.stream
        assert st is not None
        try:
            out = event_bytes(ev, answer)
            if st.bps:
                await asyncio.sleep(len(out) / st.bps)
            await st.send(out)
        except (ConnectionError, aiohttp.ClientConnectionResetError, RuntimeError):
            return verdict  # the GET stream is gone: the host hears nothing more
        gf.inject(Direction.S2C, answer, sse=ev)
        return verdict

    def response_head(self, ex: HookExchange, status: int) -> None:
        f = self.of(ex)
        f.status = status
        if f.waiting:
            # The requests it overtook go now, after it: its own request is recorded first,
            # so that the recording keeps the order in which the server got them.
            ex.register()
        f.release()
        f.flush()
        if f.again is not None:
            head, body = f.again
            f.again = None
            f.inject(Direction.C2S, body)
            self.spawn(self.send_again(ex, head, body))

    async def send_again(self, ex: HookExchange, head: bytes, body: bytes) -> None:
        """``duplicate``: the server gets the request a second time, on its own connection,
        as a host re-sending it would; its answer is read and dropped."""
        upstream = self.upstream(ex)
        if upstream is None:
            return
        try:
            resp = await upstream.request(head, body)
        except (aiohttp.ClientError, OSError, ValueError):
            return
        try:
            async with asyncio.timeout(30):
                await resp.read()
            resp.release()
        except Exception:
            resp.close()

    # ------------------------------------------------------------------ the response
    async def message(self, ex: HookExchange, body: bytes) -> Verdict:
        f = self.of(ex)
        decision = self.engine.decide("s2c", body) if body else None
        if decision is None:
            return PASS
        action = decision.action
        s = decision.rule.settings
        if action == "intercept" and self.holder is not None:
            return await held_response(self, f, decision, body)
        if action == "delay":
            f.fired(decision)
            return Verdict(Act.DELAY, seconds=decision.delay_seconds())
        if action == "throttle":
            f.fired(decision)
            return Verdict(Act.DELAY, seconds=throttle_seconds(s, len(body)))
        if action == "drop":
            f.fired(decision)
            return Verdict(Act.DROP)
        if action == "http":
            status, headers, new = injected_status(s)
            f.fired(decision, status=status, upstream_status=f.status)
            if new:
                f.inject(Direction.S2C, new)
            return Verdict(Act.ANSWER, data=new, status=status, headers=tuple(headers))
        if action in ("error", "tool-error"):
            answer = answer_body(decision)
            if answer is None:
                f.fired(decision, applied=False, why="not a response: nothing to replace")
                return PASS
            f.fired(decision)
            f.inject(Direction.S2C, answer)
            return Verdict(Act.REPLACE, data=answer)
        if action == "corrupt":
            out = decision.corrupted(body)
            f.fired(decision)
            f.inject(Direction.S2C, out)
            return Verdict(Act.REPLACE, data=out)
        if action == "disconnect":
            f.fired(decision, mode=s.get("mode"), http="connection reset")
            f.place()
            return Verdict(Act.RESET, why="before the response")
        f.fired(decision, applied=False, why=f"{action} needs a second message (SSE events)")
        return PASS

    async def event(self, ex: HookExchange, ev: SSEEvent, send: Send) -> Verdict:
        """Decide one event (already recorded as the upstream sent it)."""
        f = self.of(ex)
        st = f.stream
        if st is None:
            st = f.stream = StreamFaults(send)
        if ev.comment_only or not ev.data or ev.event == "endpoint":
            if not ev.comment_only:
                st.delivered += 1
            if ev.event == "endpoint" and ex.entry is not None:
                if ex.entry.rule == RULE_LEGACY_SSE:
                    st.key = ex.entry.key
                    self.legacy[st.key] = f
            if st.bps:  # the relay sends the event as it has it (an endpoint rewritten)
                return Verdict(Act.DELAY, seconds=len(ev.raw) / st.bps)
            return PASS
        decision = self.engine.decide("s2c", ev.data)
        if st.end_after is not None:
            if st.end_after <= 0:
                return Verdict(Act.END)
            st.end_after -= 1
        if decision is None:
            return self.deliver(f, st, ev, ev.raw)
        action = decision.action
        s = decision.rule.settings
        if action == "intercept" and self.holder is not None:
            return await held_event(self, f, st, decision, ev)
        if action == "delay":
            f.fired(decision)
            then = self.deliver(f, st, ev, ev.raw)
            return Verdict(
                Act.DELAY, data=then.data, seconds=decision.delay_seconds() + then.seconds
            )
        if action == "throttle":
            f.fired(decision, bps=s.get("bps"))
            st.bps = int(s.get("bps") or 0)
            return self.deliver(f, st, ev, ev.raw)
        if action == "drop":
            f.fired(decision)
            return Verdict(Act.DROP)
        if action in ("error", "tool-error"):
            answer = answer_body(decision)
            if answer is None:
                f.fired(decision, applied=False, why="a notification: nothing to replace")
                return self.deliver(f, st, ev, ev.raw)
            f.fired(decision)
            f.inject(Direction.S2C, answer, sse=ev)
            return self.deliver(f, st, ev, event_bytes(ev, answer))
        if action == "corrupt":
            data = decision.corrupted(ev.data)
            f.fired(decision)
            f.inject(Direction.S2C, data, sse=ev)
            return self.deliver(f, st, ev, event_bytes(ev, data))
        if action == "duplicate":
            f.fired(decision)
            verdict = self.deliver(f, st, ev, ev.raw + ev.raw)
            st.delivered += 1
            f.inject(Direction.S2C, ev.data, sse=ev)
            return verdict
        if action == "reorder":
            f.fired(decision)
            st.held.append(ev)
            if st.timer is None:  # no next event within ``wait``: it goes out alone
                wait = float(s.get("wait") or 1000) / 1000.0
                st.timer = asyncio.get_running_loop().call_later(
                    wait, lambda: self.spawn(self.flush_held(f))
                )
            return Verdict(Act.DROP)
        if action == "disconnect":
            mode = s.get("mode")
            if mode != "end-stream":
                f.fired(decision, mode=mode, http="connection reset")
                f.place()
                return Verdict(Act.RESET, why="mid-stream")
            # ``after=N``: the stream ends once the host has had N events on it (counted from
            # its start); the event the rule fired on goes out only if it is within the N.
            after = int(s.get("after") or 0)
            if st.end_after is not None:
                # The stream is already ending: a later firing changes nothing (no finding).
                return self.deliver(f, st, ev, ev.raw)
            f.fired(decision, mode=mode, after=after)
            if after - st.delivered <= 0:
                return Verdict(Act.END)
            st.end_after = after - st.delivered - 1
            return self.deliver(f, st, ev, ev.raw)
        # http: the head is gone, a status cannot follow it
        f.fired(decision, applied=False, http="connection reset", why="the head was already sent")
        f.place()
        return Verdict(Act.RESET, why="mid-stream: a status cannot follow the head")

    def deliver(self, f: ExchangeFaults, st: StreamFaults, ev: SSEEvent, out: bytes) -> Verdict:
        """``out`` goes to the host, and after it whatever ``reorder`` held back."""
        if has_response([ev]):
            f.ex.responded = True
        st.delivered += 1
        out += self.take_held(f, st)
        return st.pace(out)

    def take_held(self, f: ExchangeFaults, st: StreamFaults) -> bytes:
        """What ``reorder`` held, now on its way (on the inject channel, where the host got it)."""
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None
        out = b""
        while st.held:
            held = st.held.pop(0)
            if has_response([held]):
                f.ex.responded = True
            st.delivered += 1
            out += held.raw
            f.inject(Direction.S2C, held.data, sse=held)
        return out

    async def flush_held(self, f: ExchangeFaults) -> None:
        st = f.stream
        if st is None or not st.held:
            return
        out = self.take_held(f, st)
        if st.bps:
            await asyncio.sleep(len(out) / st.bps)
        await st.send(out)

    async def stream_end(self, ex: HookExchange) -> None:
        """The upstream ended the stream: what is held goes out before the end."""
        f = self.exchanges.get(ex)
        if f is not None:
            await self.flush_held(f)

    def done(self, ex: HookExchange) -> None:
        f = self.exchanges.pop(ex, None)
        if f is None:
            return
        f.release()
        f.place()
        st = f.stream
        if st is not None:
            if st.timer is not None:
                st.timer.cancel()
            if st.key is not None and self.legacy.get(st.key) is f:
                del self.legacy[st.key]
