"""Every hook verdict at every boundary, carried out by the relay's one path on a scripted
upstream: the request (pass, delay, replace, drop, answer, reset), a small JSON answer (pass,
replace, delay, drop, answer, reset) and each SSE event (pass, replace, delay, drop, end,
reset) — and that the hooks hear the response head, the stream's end and the exchange's end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.hooks import PASS, Act, Send, Verdict
from tests.relay.unit.fakes import FakeUpstream, Recorder, Relay, Script, host_request, until

pytestmark = pytest.mark.timeout(20)

REQ = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{}}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
SSE = [("Content-Type", "text/event-stream")]


def ev(data: bytes) -> bytes:
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"


class ScriptedHooks:
    """Hooks that answer each boundary from a function, and log what they were called with."""

    def __init__(
        self,
        request: Verdict = PASS,
        message: Verdict = PASS,
        event: Callable[[SSEEvent], Verdict] = lambda _: PASS,
    ) -> None:
        self.req, self.msg, self.ev = request, message, event
        self.log: list[tuple[str, Any]] = []

    async def request_body(self, ex: Exchange, head: bytes, body: bytes) -> Verdict:
        self.log.append(("request", body))
        return self.req

    def response_head(self, ex: Exchange, status: int) -> None:
        self.log.append(("head", status))

    async def message(self, ex: Exchange, body: bytes) -> Verdict:
        self.log.append(("message", body))
        return self.msg

    async def event(self, ex: Exchange, event: SSEEvent, send: Send) -> Verdict:
        self.log.append(("event", event.data))
        return self.ev(event)

    async def stream_end(self, ex: Exchange) -> None:
        self.log.append(("stream_end", None))

    def done(self, ex: Exchange) -> None:
        self.log.append(("done", ex.outcome))


async def _run(
    hooks: ScriptedHooks, script: Script, **kw: Any
) -> tuple[Any, Recorder, FakeUpstream]:
    up = FakeUpstream(script)
    rec = Recorder()
    async with Relay(up, rec) as r:
        r.relay.use_hooks(hooks)
        got = await host_request(r.port, body=REQ, **kw)
        await until(lambda: "outcome" in rec.exchange())
        await until(lambda: bool(hooks.log) and hooks.log[-1][0] == "done")
    return got, rec, up


def run(hooks: ScriptedHooks, script: Script, **kw: Any) -> tuple[Any, Recorder, FakeUpstream]:
    return asyncio.run(_run(hooks, script, **kw))


# ----------------------------------------------------------------------------- the request
def test_request_pass_forwards_and_every_boundary_is_heard() -> None:
    hooks = ScriptedHooks()
    got, _, up = run(hooks, Script(body=[RESULT]))
    assert got.body == RESULT and up.sent[0][1] == REQ
    assert [k for k, _ in hooks.log] == ["request", "head", "message", "done"]
    assert hooks.log[-1] == ("done", "complete")


def test_request_replace_goes_upstream_with_its_own_length() -> None:
    hooks = ScriptedHooks(request=Verdict(Act.REPLACE, data=b"{,}"))
    _, _, up = run(hooks, Script(body=[RESULT]))
    head, body = up.sent[0]
    assert body == b"{,}" and b"Content-Length: 3\r\n" in head


def test_request_delay_waits_then_forwards() -> None:
    hooks = ScriptedHooks(request=Verdict(Act.DELAY, seconds=0.2))

    async def go() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await _run(hooks, Script(body=[RESULT]))
        return loop.time() - t0

    assert asyncio.run(go()) >= 0.2


def test_request_answer_never_reaches_the_upstream() -> None:
    verdict = Verdict(Act.ANSWER, data=b"nope", status=429, headers=(("Retry-After", "7"),))
    got, rec, up = run(ScriptedHooks(request=verdict), Script(body=[RESULT]))
    assert got.status == 429 and got.body == b"nope" and ("Retry-After", "7") in got.headers
    assert up.sent == []
    row = rec.exchange()
    assert row["status"] == 429 and row["outcome"] == "complete"


def test_request_drop_leaves_it_unanswered_until_the_host_leaves() -> None:
    hooks = ScriptedHooks(request=Verdict(Act.DROP))

    async def go() -> tuple[Recorder, FakeUpstream]:
        up = FakeUpstream(Script(body=[RESULT]))
        rec = Recorder()
        async with Relay(up, rec) as r:
            r.relay.use_hooks(hooks)
            task = asyncio.ensure_future(host_request(r.port, body=REQ))
            await until(lambda: ("request", REQ) in hooks.log)
            task.cancel()  # the host gives up: its connection closes
            await until(lambda: "outcome" in rec.exchange())
        return rec, up

    rec, up = asyncio.run(go())
    assert up.sent == [] and rec.exchange()["outcome"] == "host_aborted"


def test_request_reset_cuts_the_host_connection() -> None:
    hooks = ScriptedHooks(request=Verdict(Act.RESET, why="request"))
    got, rec, up = run(hooks, Script(body=[RESULT]))
    assert got.raw == b"" and up.sent == []
    row = rec.exchange()
    assert row["outcome"] == "injected_reset" and "(request)" in row["error"]


# ----------------------------------------------------------------------------- a JSON answer
def test_message_replace_fits_the_length_and_the_real_one_is_recorded() -> None:
    got, rec, up = run(
        ScriptedHooks(message=Verdict(Act.REPLACE, data=b"{}")), Script(body=[RESULT])
    )
    assert got.body == b"{}" and ("Content-Length", "2") in got.headers
    assert [f.raw for f in rec.frames()] == [REQ, RESULT]
    assert up.replies[0].released


def test_message_answer_replaces_the_status() -> None:
    verdict = Verdict(Act.ANSWER, data=b"", status=503)
    got, rec, _ = run(ScriptedHooks(message=verdict), Script(body=[RESULT]))
    assert got.status == 503 and got.body == b""
    row = rec.exchange()
    assert row["status"] == 503 and row["outcome"] == "complete"
    assert [f.raw for f in rec.frames()] == [REQ, RESULT]


def test_message_delay_then_the_body() -> None:
    got, _, _ = run(ScriptedHooks(message=Verdict(Act.DELAY, seconds=0.05)), Script(body=[RESULT]))
    assert got.body == RESULT


def test_message_drop_withholds_it_until_the_host_leaves() -> None:
    hooks = ScriptedHooks(message=Verdict(Act.DROP))

    async def go() -> Recorder:
        up = FakeUpstream(Script(body=[RESULT]))
        rec = Recorder()
        async with Relay(up, rec) as r:
            r.relay.use_hooks(hooks)
            task = asyncio.ensure_future(host_request(r.port, body=REQ))
            await until(lambda: ("message", RESULT) in hooks.log)
            task.cancel()
            await until(lambda: "outcome" in rec.exchange())
        return rec

    rec = asyncio.run(go())
    assert rec.exchange()["outcome"] == "host_aborted"
    assert [f.raw for f in rec.frames()] == [REQ, RESULT]


def test_message_reset() -> None:
    hooks = ScriptedHooks(message=Verdict(Act.RESET, why="before the response"))
    got, rec, up = run(hooks, Script(body=[RESULT]))
    assert got.raw == b"" and rec.exchange()["outcome"] == "injected_reset"
    assert up.replies[0].closed


# ----------------------------------------------------------------------------- SSE events
def _stream(decide: Callable[[SSEEvent], Verdict], *events: bytes) -> tuple[Any, Recorder, Any]:
    hooks = ScriptedHooks(event=decide)
    got, rec, _ = run(hooks, Script(headers=SSE, body=list(events), length=False))
    return got, rec, hooks


def test_events_pass_replace_drop_and_delay() -> None:
    def decide(e: SSEEvent) -> Verdict:
        if e.data == b"1":
            return Verdict(Act.REPLACE, data=ev(b"one"))
        if e.data == b"2":
            return Verdict(Act.DROP)
        if e.data == b"3":
            return Verdict(Act.DELAY, seconds=0.01)
        return PASS

    got, rec, hooks = _stream(decide, ev(b"1"), ev(b"2"), ev(b"3"), ev(RESULT))
    assert got.body == ev(b"one") + ev(b"3") + ev(RESULT)
    # Recorded as the upstream sent them, whatever the host got.
    assert [f.raw for f in rec.frames()] == [REQ, b"1", b"2", b"3", RESULT]
    assert [k for k, _ in hooks.log][-2:] == ["stream_end", "done"]


def test_event_end_closes_the_stream_cleanly() -> None:
    got, rec, hooks = _stream(
        lambda e: Verdict(Act.END) if e.data == b"2" else PASS, ev(b"1"), ev(b"2"), ev(b"3")
    )
    assert got.body == ev(b"1") and got.raw.endswith(b"0\r\n\r\n")
    assert rec.exchange()["outcome"] == "complete"
    assert ("stream_end", None) not in hooks.log


def test_event_reset_cuts_the_host_after_the_head() -> None:
    got, rec, _ = _stream(
        lambda e: Verdict(Act.RESET, why="mid-stream") if e.data == b"2" else PASS,
        ev(b"1"),
        ev(b"2"),
        ev(b"3"),
    )
    assert got.status == 200 and not got.raw.endswith(b"0\r\n\r\n")
    assert rec.exchange()["outcome"] == "injected_reset"


def test_a_hook_may_send_on_the_stream_itself() -> None:
    """What a hook holds back (reorder) it sends later through the ``send`` it was given."""
    sends: list[Send] = []

    class Later(ScriptedHooks):
        async def event(self, ex: Exchange, event: SSEEvent, send: Send) -> Verdict:
            sends.append(send)
            return Verdict(Act.DROP) if event.data == b"1" else PASS

        async def stream_end(self, ex: Exchange) -> None:
            await sends[0](ev(b"1"))

    hooks = Later()
    got, _, _ = run(hooks, Script(headers=SSE, body=[ev(b"1"), ev(RESULT)], length=False))
    assert got.body == ev(RESULT) + ev(b"1")
