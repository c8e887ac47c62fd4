"""FaultHooks without a relay: the fault engine's decisions become the verdicts the relay's one
path carries out, and what mcptape puts on the wire is noted (inject frames, findings)."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_proxy.faults import FaultEngine, parse_rule
from mcp_proxy.frames import Channel
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.exchange import Exchange, ExchangeContext
from mcp_proxy.relay.http.faults import FaultHooks
from mcp_proxy.relay.http.hooks import Act, Verdict
from mcp_proxy.relay.http.response import RelayState
from mcp_proxy.relay.http.sessions import RULE_MCP_SESSION, SessionRouter
from tests.relay.unit.fakes import Recorder

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}'
LOG = b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{}}'


def sse(data: bytes) -> SSEEvent:
    (ev,) = SSEParser().feed(b"event: message\r\ndata: " + data + b"\r\n\r\n")
    return ev


def rig(*rules: str) -> tuple[FaultHooks, Exchange, Recorder]:
    rec = Recorder()
    router = SessionRouter(rec, name=None, upstream="http://up.test/mcp", idle_cut=300)
    ctx = ExchangeContext(rec, router, Redactor(), "http://up.test", "http://127.0.0.1:1")
    hooks = FaultHooks(
        FaultEngine([parse_rule(r) for r in rules]), RelayState(ctx, set()).spawn, lambda _ex: None
    )
    ex = Exchange(ctx, {"method": "POST", "started_at": 1.0}, {})
    ex.attach_key(router.mcp_key("s"), RULE_MCP_SESSION, grouping={"mcp_session_id": "s"})
    return hooks, ex, rec


def injected(ex: Exchange) -> list[bytes]:
    return [f.raw for f in ex.pending if f.channel is Channel.INJECT]


def codes(rec: Recorder) -> list[str]:
    return [f["code"] for f in rec.findings]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_no_rule_passes() -> None:
    hooks, ex, rec = rig()
    assert run(hooks.request_body(ex, b"", CALL)).act is Act.PASS
    assert run(hooks.message(ex, RESULT)).act is Act.PASS
    assert rec.findings == []


def test_corrupt_request_is_replaced_and_injected() -> None:
    hooks, ex, rec = rig("corrupt mode=invalid-json direction=c2s method=tools/call")
    v = run(hooks.request_body(ex, b"", CALL))
    assert v.act is Act.REPLACE and v.data == CALL.replace(b"{", b"{,", 1)
    assert injected(ex) == [v.data] and codes(rec) == ["inject.corrupt"]


def test_dropped_request_hangs_a_dropped_notification_is_accepted() -> None:
    hooks, ex, _ = rig("drop direction=c2s")
    assert run(hooks.request_body(ex, b"", CALL)).act is Act.DROP
    v = run(hooks.request_body(ex, b"", NOTE))
    assert (v.act, v.status, v.data) == (Act.ANSWER, 202, b"")


def test_error_answers_in_the_servers_place() -> None:
    hooks, ex, rec = rig("error code=-32001 message=boom direction=c2s method=tools/call")
    v = run(hooks.request_body(ex, b"", CALL))
    assert v.act is Act.ANSWER and v.status == 200 and b"-32001" in (v.data or b"")
    assert injected(ex) == [v.data] and codes(rec) == ["inject.error"]


def test_http_status_on_the_answer_and_reset() -> None:
    hooks, ex, _ = rig("http status=503 direction=s2c")
    run(hooks.request_body(ex, b"", CALL))
    hooks.response_head(ex, 200)
    v = run(hooks.message(ex, RESULT))
    assert (v.act, v.status) == (Act.ANSWER, 503)
    assert ex.meta["injected"][0]["upstream_status"] == 200
    hooks, ex, _ = rig("disconnect mode=reset direction=s2c")
    assert run(hooks.message(ex, RESULT)) == Verdict(Act.RESET, why="before the response")


def test_reorder_holds_an_event_until_the_next() -> None:
    hooks, ex, rec = rig("reorder direction=s2c method=notifications/message")
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async def go() -> tuple[Verdict, Verdict]:
        first = await hooks.event(ex, sse(LOG), send)
        second = await hooks.event(ex, sse(RESULT), send)
        return first, second

    first, second = run(go())
    assert first.act is Act.DROP
    assert second.act is Act.REPLACE and second.data == sse(RESULT).raw + sse(LOG).raw
    assert injected(ex) == [LOG] and ex.responded and codes(rec) == ["inject.reorder"]


def test_a_request_that_overtook_a_held_one_is_recorded_before_it_goes() -> None:
    """``reorder`` of a request: the one that overtook it is handed to the recorder before the
    held one is released, so the recording keeps the order in which the server got them (the
    held one's inject frame once came first now and then: test_reorder_requests)."""
    hooks, held, rec = rig("reorder direction=c2s method=tools/call nth=1 wait=5000")
    other = Exchange(held.ctx, {"method": "POST", "started_at": 2.0}, {})
    other.attach_key(held.entry.key, RULE_MCP_SESSION, grouping={"mcp_session_id": "s"})
    order: list[str] = []

    async def go() -> None:
        waiting = asyncio.ensure_future(hooks.request_body(held, b"", CALL))
        await asyncio.sleep(0)  # (a turn of the loop: the held request waits for its turn)
        assert (await hooks.request_body(other, b"", CALL)).act is Act.PASS
        hooks.response_head(other, 200)
        order.append("registered" if other.local_id is not None else "not registered")
        assert (await waiting).act is Act.PASS
        order.append("released")

    run(go())
    assert order == ["registered", "released"]
    assert codes(rec) == ["inject.reorder"]


def test_end_stream_after_n_events() -> None:
    hooks, ex, _ = rig("disconnect mode=end-stream after=2 direction=s2c")

    async def send(data: bytes) -> None:
        pass

    async def go() -> list[Act]:
        return [(await hooks.event(ex, sse(LOG), send)).act for _ in range(4)]

    assert run(go()) == [Act.REPLACE, Act.REPLACE, Act.END, Act.END]


def test_throttle_paces_the_rest_of_the_stream() -> None:
    hooks, ex, _ = rig("throttle bps=1000 direction=s2c nth=1")

    async def send(data: bytes) -> None:
        pass

    async def go() -> list[Verdict]:
        return [await hooks.event(ex, sse(LOG), send) for _ in range(2)]

    for v in run(go()):
        assert v.act is Act.DELAY and v.seconds == len(sse(LOG).raw) / 1000


def test_done_hands_over_and_forgets() -> None:
    hooks, ex, _ = rig("delay ms=10 direction=c2s")
    run(hooks.request_body(ex, b"", CALL))
    assert ex in hooks.exchanges
    hooks.done(ex)
    assert ex not in hooks.exchanges
