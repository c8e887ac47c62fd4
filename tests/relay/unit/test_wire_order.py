"""Request frames keep the host's wire order across a session's concurrent exchanges.

An exchange is held (row and frames in memory) until it registers — a moment after its request
went upstream — or finishes. Whichever of them puts something in the recording first must put
the held requests that came before it ahead of itself, and never one that came after it: that
one is still the later exchange's to record (regression: an earlier exchange registering on its
timer flushed a later one still in flight ahead of itself — an intercepted request, held then
dropped, was recorded after the next ``tools/call``; a quick exchange's one record likewise).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mcp_proxy.faults import FaultEngine
from mcp_proxy.faults.rules import parse_intercept_rule
from mcp_proxy.frames import Direction
from mcp_proxy.intercept.desk import Verdict as Decided
from mcp_proxy.relay.http import exchange
from tests.relay.unit.fakes import (
    FakeReply,
    FakeUpstream,
    Recorder,
    Relay,
    Script,
    host_request,
    until,
)

H = {"Mcp-Session-Id": "s", "Accept": "application/json, text/event-stream"}


def call(rid: int, name: str) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%b"}}' % (
        rid,
        name.encode(),
    )


def result(rid: int) -> Script:
    return Script(body=[b'{"jsonrpc":"2.0","id":%d,"result":{}}' % rid])


class GatedUpstream:
    """A :class:`FakeUpstream` whose answer to a request naming a gated tool waits for its gate
    (the request is in flight, upstream, until the test opens it)."""

    def __init__(self, inner: FakeUpstream, *gated: str) -> None:
        self.inner = inner
        self.gates = {name.encode(): asyncio.Event() for name in gated}
        #: The gated tools whose request reached the upstream, in order.
        self.arrived: list[bytes] = []

    async def request(
        self, head: bytes, body: bytes | AsyncIterator[bytes] | None, **kw: Any
    ) -> FakeReply:
        reply = await self.inner.request(head, body, **kw)
        sent = self.inner.sent[-1][1]
        for name, gate in self.gates.items():
            if b'"name":"%b"' % name in sent:
                self.arrived.append(name)
                await gate.wait()
        return reply

    async def close(self) -> None:
        await self.inner.close()


class Holder:
    """The intercept desk: each held message waits for the test's decision."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[Decided]] = []

    async def hold_async(self, session_id: str, direction: str, raw: bytes, d: Any) -> Decided:
        decided: asyncio.Future[Decided] = asyncio.get_running_loop().create_future()
        self.waiting.append(decided)
        return await decided

    def close(self) -> None:
        pass


def requests(rec: Recorder) -> list[bytes]:
    """The tools called, in the order their request frames were recorded."""
    out = []
    for f in rec.frames():
        if f.direction is Direction.C2S and b'"method":"tools/call"' in f.raw:
            out.append(f.raw.split(b'"name":"')[1].split(b'"')[0])
    return out


def recorded_by(rec: Recorder, name: bytes) -> str:
    """How the exchange calling ``name`` went to the recorder: ``record_exchange`` (one
    record) or ``new_exchange`` (registered, then its frames)."""
    for i, (kind, data) in enumerate(rec.calls):
        if kind == "record_exchange" and any(name in f.raw for f in data[0]):
            return kind
        if kind == "put" and name in data.raw:
            return str(rec.calls[i - 1][0])
    raise AssertionError(f"{name!r} not recorded")


def until_true(predicate: Callable[[], bool]) -> Any:
    return until(predicate, within=10.0)


@pytest.mark.parametrize("decision", ["drop", None])
def test_a_held_request_goes_ahead_of_a_later_one_in_flight(decision: str | None) -> None:
    """``echo`` is held by an intercept rule (dropped, or still undecided); ``add`` comes after
    it and is upstream when ``echo`` registers on its timer: ``echo``'s request is recorded
    first, and ``add`` (still in flight) is not dragged ahead of it."""

    async def go() -> Recorder:
        rec = Recorder()
        holder = Holder()
        up = GatedUpstream(FakeUpstream(result(2)), "add")
        engine = FaultEngine([parse_intercept_rule("method=tools/call name=echo")])
        async with Relay(up, rec, faults=engine, intercepts=holder) as r:  # type: ignore[arg-type]
            echo = asyncio.create_task(host_request(r.port, body=call(1, "echo"), headers=H))
            await until_true(lambda: bool(holder.waiting))
            if decision is not None:
                holder.waiting[0].set_result(Decided(1, decision, None, "tester"))
                await until_true(lambda: len(rec.findings) == 1)
            add = asyncio.create_task(host_request(r.port, body=call(2, "add"), headers=H))
            await until_true(lambda: up.arrived == [b"add"])
            # echo's timer registers it while add is upstream
            await until_true(lambda: b"echo" in requests(rec))
            up.gates[b"add"].set()
            assert (await add).status == 200
            echo.cancel()
            with pytest.raises(asyncio.CancelledError):
                await echo
        return rec

    rec = asyncio.run(go())
    assert requests(rec) == [b"echo", b"add"]  # as the host sent them
    assert recorded_by(rec, b"echo") == "new_exchange"
    # (how add goes to the recorder is left open: on a loaded machine its own register timer
    # may fire while it waits upstream; test_a_quick_exchange_does_not_hand_a_later_one_over_
    # first pins the one-record hand-over with the timer out of the way)


def test_a_quick_exchange_does_not_hand_a_later_one_over_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two concurrent calls, neither old enough to register: the first to arrive finishes
    first and is handed over as one record — the second, still upstream, stays held (it was
    flushed ahead of the first)."""
    monkeypatch.setattr(exchange, "REGISTER_AFTER", 60.0)  # only the finishes record

    async def go() -> Recorder:
        rec = Recorder()
        up = GatedUpstream(FakeUpstream(result(1), result(2)), "first", "second")
        async with Relay(up, rec) as r:  # type: ignore[arg-type]
            first = asyncio.create_task(host_request(r.port, body=call(1, "first"), headers=H))
            await until_true(lambda: up.arrived == [b"first"])
            second = asyncio.create_task(host_request(r.port, body=call(2, "second"), headers=H))
            await until_true(lambda: up.arrived == [b"first", b"second"])
            up.gates[b"first"].set()
            assert (await first).status == 200
            await until_true(lambda: b"first" in requests(rec))
            up.gates[b"second"].set()
            assert (await second).status == 200
        return rec

    rec = asyncio.run(go())
    assert requests(rec) == [b"first", b"second"]
    assert recorded_by(rec, b"first") == recorded_by(rec, b"second") == "record_exchange"
