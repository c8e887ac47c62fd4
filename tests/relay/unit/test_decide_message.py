"""The one whole-answer decision both front ends share (``relay/http/response.py``:
``decide_message``), with each front end's real side — the reverse relay's ``RelayWhole`` on its
:class:`~mcp_proxy.relay.http.exchange.Exchange`, the lean engine's ``TapeSide`` on its
:class:`~mcp_proxy.forward.exchange.TapeExchange` — a fake host connection and scripted hooks:
every verdict on a small JSON answer (pass, replace, delay, drop, answer, reset), what the host
gets and what is recorded (the body as the upstream sent it, before the hooks decide)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_proxy.forward.exchange import RequestHead
from mcp_proxy.forward.tape import ForwardTape
from mcp_proxy.forward.verdicts import TapeSide, Taping
from mcp_proxy.framing import SSEEvent
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.exchange import Exchange, ExchangeContext
from mcp_proxy.relay.http.front import RelayResponse
from mcp_proxy.relay.http.hooks import Act, HookExchange, Send, Verdict
from mcp_proxy.relay.http.response import (
    RelayWhole,
    ResponseHead,
    WholeSide,
    decide_message,
)
from mcp_proxy.relay.http.sessions import SessionRouter
from tests.relay.unit.fakes import Recorder, until

pytestmark = pytest.mark.timeout(20)

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'
OTHER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"edited"}]}}'
JSON = (b"Content-Type", b"application/json")
LENGTH = (b"Content-Length", str(len(RESULT)).encode())


class Transport:
    """The host's connection: aborted by a reset."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Hooks:
    """Answers a whole body with ``verdict``; notes what the exchange had recorded by then."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.seen: list[bytes] = []
        self.recorded_before: list[bytes] | None = None

    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        raise AssertionError("not a boundary of a whole answer")

    def response_head(self, ex: HookExchange, status: int) -> None:
        raise AssertionError("not a boundary of a whole answer")

    async def message(self, ex: HookExchange, body: bytes) -> Verdict:
        self.seen.append(body)
        self.recorded_before = [f.raw for f in ex.pending]  # type: ignore[attr-defined]
        return self.verdict

    async def event(self, ex: HookExchange, e: SSEEvent, send: Send) -> Verdict:
        raise AssertionError("not a boundary of a whole answer")

    async def stream_end(self, ex: HookExchange) -> None:
        raise AssertionError("not a boundary of a whole answer")

    def done(self, ex: HookExchange) -> None:
        raise AssertionError("not a boundary of a whole answer")


@dataclass
class Case:
    """One front end's side on one exchange, and how to read what it recorded."""

    ex: Any
    side: WholeSide
    sresp: RelayResponse
    transport: Transport
    outcome: Callable[[], str | None]
    status: Callable[[], int | None]


def relay_case() -> Case:
    rec = Recorder()
    router = SessionRouter(rec, name=None, upstream="http://up.test/mcp", idle_cut=300)
    ctx = ExchangeContext(rec, router, Redactor(), "http://up.test", "http://127.0.0.1:1")
    ex = Exchange(ctx, {"method": "POST", "started_at": 1.0}, {})
    ex.is_mcp = True
    transport = Transport()
    request: Any = SimpleNamespace(transport=transport)
    sresp = RelayResponse(status=200, reason="OK", raw=[JSON, LENGTH], has_length=True)
    head = ResponseHead(200, sresp, "application/json", "", False, False, True, None)
    return Case(
        ex,
        RelayWhole(request, ex, head),
        sresp,
        transport,
        lambda: ex.outcome,
        lambda: ex.late.get("status"),
    )


def tape_case() -> Case:
    rec = Recorder()
    tape = ForwardTape(rec)  # type: ignore[arg-type]
    head = RequestHead("POST", "http://up.test/mcp", [JSON], "HTTP/1.1", 1.0)
    ex = tape.request(head, CALL)
    assert ex is not None
    transport = Transport()
    request: Any = SimpleNamespace(transport=transport)
    sresp = RelayResponse(status=200, reason="OK", raw=[JSON, LENGTH], has_length=True)
    side = TapeSide(request, sresp, Taping(), ex)
    return Case(
        ex,
        side,
        sresp,
        transport,
        lambda: rec.exchange().get("outcome"),
        lambda: rec.exchange().get("status"),
    )


SIDES = pytest.mark.parametrize("make", [relay_case, tape_case], ids=["relay", "tape"])


def decide(case: Case, verdict: Verdict) -> tuple[bytes | RelayResponse, Hooks]:
    hooks = Hooks(verdict)

    async def main() -> bytes | RelayResponse:
        return await decide_message(hooks, case.ex, case.side, case.sresp, RESULT)

    out = asyncio.run(main())
    # what the upstream sent is recorded first, then decided
    assert hooks.seen == [RESULT]
    assert hooks.recorded_before is not None and hooks.recorded_before[-1:] == [RESULT]
    return out, hooks


def length(sresp: RelayResponse) -> list[str]:
    return [v for k, v in sresp.headers.items() if k.lower() == "content-length"]


@SIDES
def test_pass_sends_the_body_as_it_came(make: Callable[[], Case]) -> None:
    case = make()
    out, _ = decide(case, Verdict(Act.PASS))
    assert out == RESULT
    assert length(case.sresp) == [str(len(RESULT))]  # the upstream's, as it came
    assert case.outcome() is None  # the front end sends it and ends the exchange


@SIDES
def test_replace_sends_other_bytes_with_their_length(make: Callable[[], Case]) -> None:
    case = make()
    out, _ = decide(case, Verdict(Act.REPLACE, data=OTHER))
    assert out == OTHER
    assert length(case.sresp) == [str(len(OTHER))]


@SIDES
def test_a_replacement_of_the_same_size_keeps_the_head(make: Callable[[], Case]) -> None:
    case = make()
    same = RESULT.replace(b"[]", b"{}")
    out, _ = decide(case, Verdict(Act.REPLACE, data=same))
    assert out == same
    assert length(case.sresp) == [str(len(RESULT))]


@SIDES
def test_delay_sends_the_body_after_its_seconds(make: Callable[[], Case]) -> None:
    case = make()

    async def main() -> tuple[bytes | RelayResponse, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await decide_message(
            Hooks(Verdict(Act.DELAY, seconds=0.05)), case.ex, case.side, case.sresp, RESULT
        )
        return out, loop.time() - t0

    out, took = asyncio.run(main())
    assert out == RESULT
    assert took >= 0.05


@SIDES
def test_drop_withholds_the_body_until_the_host_gives_up(make: Callable[[], Case]) -> None:
    case = make()
    hooks = Hooks(Verdict(Act.DROP))

    async def main() -> bool:
        task = asyncio.ensure_future(decide_message(hooks, case.ex, case.side, case.sresp, RESULT))
        await until(lambda: bool(hooks.seen))
        done, _ = await asyncio.wait({task}, timeout=0.05)
        task.cancel()  # the host gave up
        with pytest.raises(asyncio.CancelledError):
            await task
        return bool(done)

    assert asyncio.run(main()) is False
    assert not case.transport.aborted


@SIDES
def test_answer_replaces_the_response_and_is_recorded(make: Callable[[], Case]) -> None:
    case = make()
    verdict = Verdict(Act.ANSWER, data=OTHER, status=503, headers=(("X-A", "1"),))
    out, _ = decide(case, verdict)
    assert isinstance(out, RelayResponse)
    assert (out.status, out.body) == (503, OTHER)
    assert case.status() == 503
    assert case.outcome() == "complete"
    assert not case.transport.aborted


@SIDES
@pytest.mark.parametrize("act", [Act.RESET, Act.END])
def test_reset_aborts_the_host_and_is_recorded(make: Callable[[], Case], act: Act) -> None:
    case = make()
    out, _ = decide(case, Verdict(act, why="at the response"))
    assert isinstance(out, RelayResponse)
    assert case.transport.aborted
    assert case.outcome() == "injected_reset"
