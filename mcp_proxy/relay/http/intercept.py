"""Intercept in the HTTP relay: a held message's verdict, carried out at the fault hooks.

An intercept rule's decision (action ``intercept``) reaches :class:`~mcp_proxy.relay.http.
faults.FaultHooks` like any fault's; these functions hold the message with the desk
(``intercept/desk.py``, through the ``holder`` it was given: the relay imports no store) and
turn the person's decision into the hooks' :class:`~mcp_proxy.relay.http.hooks.Verdict`:

==========  ================================================================================
decision    request body (c2s)         JSON response body (s2c)    SSE event (s2c)
==========  ================================================================================
forward     sent upstream as it was    sent to the host            sent in its place
edit        the edit goes upstream     the edit goes to the host   an event with the edit
answer      the host gets it (200)     — (not a request: sent)     — (sent unchanged)
drop        unanswered (a request) /   withheld                    skipped
            202 (a notification)
==========  ================================================================================

Holding awaits on the exchange's own task: a held request or response holds its exchange, a
held event holds the rest of its stream behind it (order kept), and other exchanges — separate
HTTP requests — pass it. What mcptape sent instead is an ``inject`` frame; each decision is an
``inject.intercept`` finding (who decided, how).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mcp_proxy.frames import Direction
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.hooks import PASS, Act, Verdict

if TYPE_CHECKING:
    from mcp_proxy.relay.http.faults import ExchangeFaults, FaultHooks, StreamFaults

__all__ = ["AsyncHolder", "held_event", "held_request", "held_response"]


class AsyncHolder(Protocol):
    """What the HTTP relay needs of :class:`mcp_proxy.intercept.desk.InterceptDesk`."""

    async def hold_async(
        self, session_id: str, direction: str, raw: bytes, decision: Any
    ) -> Any: ...

    def close(self) -> None: ...


async def _hold(hooks: FaultHooks, f: ExchangeFaults, direction: str, raw: bytes, d: Any) -> Any:
    holder = hooks.holder
    assert holder is not None
    entry = f.ex.entry
    verdict = await holder.hold_async(entry.session_id if entry else "", direction, raw, d)
    return verdict


def _noted(f: ExchangeFaults, d: Any, verdict: Any, **more: Any) -> None:
    f.fired(d, intercept=verdict.id, decision=verdict.decision, by=verdict.by, **more)


async def held_request(hooks: FaultHooks, f: ExchangeFaults, d: Any, body: bytes) -> Verdict:
    """A request body an intercept rule matched, before it goes upstream."""
    verdict = await _hold(hooks, f, "c2s", body, d)
    decision = verdict.decision
    if decision == "edit":
        _noted(f, d, verdict, sent="c2s")
        f.inject(Direction.C2S, verdict.payload)
        return Verdict(Act.REPLACE, data=verdict.payload)
    if decision == "answer":
        _noted(f, d, verdict, sent="s2c", status=200)
        f.place()
        f.inject(Direction.S2C, verdict.payload)
        headers = (("Content-Type", "application/json"),)
        return Verdict(Act.ANSWER, data=verdict.payload, status=200, headers=headers)
    if decision == "drop":
        _noted(f, d, verdict, sent=None)
        f.place()
        if d.facts.is_request:
            return Verdict(Act.DROP)  # unanswered until the host gives up
        return hooks.accepted(f.ex, False)
    _noted(f, d, verdict, sent="c2s")
    return PASS


async def held_response(hooks: FaultHooks, f: ExchangeFaults, d: Any, body: bytes) -> Verdict:
    """A JSON response body an intercept rule matched, before the host gets it."""
    verdict = await _hold(hooks, f, "s2c", body, d)
    decision = verdict.decision
    if decision == "edit":
        _noted(f, d, verdict, sent="s2c")
        f.inject(Direction.S2C, verdict.payload)
        return Verdict(Act.REPLACE, data=verdict.payload)
    if decision == "drop":
        _noted(f, d, verdict, sent=None)
        return Verdict(Act.DROP)
    if decision == "answer":  # a response is not answered: it goes on as it came
        _noted(f, d, verdict, sent="s2c", applied=False, why="a response cannot be answered")
        return PASS
    _noted(f, d, verdict, sent="s2c")
    return PASS


async def held_event(
    hooks: FaultHooks, f: ExchangeFaults, st: StreamFaults, d: Any, ev: SSEEvent
) -> Verdict:
    """One SSE event an intercept rule matched: the rest of its stream waits behind it."""
    from mcp_proxy.relay.http.faults import event_bytes

    verdict = await _hold(hooks, f, "s2c", ev.data, d)
    decision = verdict.decision
    if decision == "edit":
        _noted(f, d, verdict, sent="s2c")
        f.inject(Direction.S2C, verdict.payload, sse=ev)
        return hooks.deliver(f, st, ev, event_bytes(ev, verdict.payload))
    if decision == "drop":
        _noted(f, d, verdict, sent=None)
        return Verdict(Act.DROP)
    if decision == "answer":  # the host's answer to a server request needs a POST upstream
        _noted(f, d, verdict, sent="s2c", applied=False, why="answered only on stdio so far")
    else:
        _noted(f, d, verdict, sent="s2c")
    return hooks.deliver(f, st, ev, ev.raw)
