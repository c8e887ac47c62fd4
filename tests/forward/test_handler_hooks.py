"""The lean forward engine's handler carrying out hook verdicts, driven with fakes: a scripted
upstream at the pool seam (``tests.relay.unit.fakes.FakeUpstream``), a scripted
:class:`~mcp_proxy.relay.http.hooks.Hooks`, the handler's real front server on 127.0.0.1 taking
absolute-form proxy requests, and a recorder that keeps every call. Each verdict at each
boundary: what the host gets, what the upstream gets, what is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcp_proxy.forward import handler as handler_module
from mcp_proxy.forward.handler import RequestHandler, TunnelFront
from mcp_proxy.forward.tape import ForwardTape
from mcp_proxy.frames import Channel
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.front import FrontServer, ignore
from mcp_proxy.relay.http.hooks import PASS, Act, HookExchange, Send, Verdict
from tests.relay.unit.fakes import (
    FakeBody,
    FakeReply,
    FakeUpstream,
    Recorder,
    Script,
    host_request,
    until,
)

pytestmark = pytest.mark.timeout(30)

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'
OTHER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"edited"}]}}'
SSE = [("Content-Type", "text/event-stream")]
HEADERS = {"Host": "up.test", "Accept": "application/json, text/event-stream"}


def event(n: int) -> bytes:
    return b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"n":%d}}\n\n' % n


class Body(FakeBody):
    """The fake body with what the lean engine reads of aiohttp's: ``readany``, and
    ``is_eof`` as aiohttp means it (the end arrived: no pause or break left to come)."""

    def is_eof(self) -> bool:
        return all(isinstance(s, bytes) for s in self.steps)

    async def readany(self) -> bytes:
        return await self.next_chunk()


class Upstream(FakeUpstream):
    async def request(self, *args: Any, **kw: Any) -> FakeReply:
        reply = await super().request(*args, **kw)
        reply.content = Body(list(reply.content.steps))
        return reply


@dataclass
class Scripted:
    """Hooks that return scripted verdicts and keep what they were called with."""

    request: Verdict = PASS
    response: Verdict = PASS
    events: list[Verdict] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        self.calls.append("request_body")
        return self.request

    def response_head(self, ex: HookExchange, status: int) -> None:
        self.calls.append(f"response_head {status}")

    async def message(self, ex: HookExchange, body: bytes) -> Verdict:
        self.calls.append("message")
        return self.response

    async def event(self, ex: HookExchange, ev: SSEEvent, send: Send) -> Verdict:
        self.calls.append("event")
        return self.events.pop(0) if self.events else PASS

    async def stream_end(self, ex: HookExchange) -> None:
        self.calls.append("stream_end")

    def done(self, ex: HookExchange) -> None:
        self.calls.append("done")


@dataclass
class Rig:
    port: int
    upstream: Upstream
    recorder: Recorder
    handler: RequestHandler

    async def post(self, body: bytes = CALL, **kw: Any) -> Any:
        return await host_request(
            self.port, "POST", "http://up.test/mcp", body, dict(HEADERS), **kw
        )


class CountingFront(TunnelFront):
    """The host connection, keeping each write to the host and when it was made."""

    writes: list[tuple[float, bytes]]

    def write_raw(self, data: bytes) -> None:
        self.writes.append((time.monotonic(), data))
        super().write_raw(data)


@contextlib.asynccontextmanager
async def rig(
    hooks: Scripted | None, *scripts: Script, writes: list[tuple[float, bytes]] | None = None
) -> AsyncIterator[Rig]:
    """``writes``: where each write to the host is kept, with its time."""
    recorder = Recorder()
    tape = ForwardTape(recorder)  # type: ignore[arg-type]
    upstream = Upstream(*scripts)
    tails: set[asyncio.Task[None]] = set()
    handler = RequestHandler(tape, lambda _target: upstream, tails.add)  # type: ignore[arg-type,return-value]
    handler.hooks = hooks
    front = FrontServer(handler.handle if hooks is None else handler.handle_hooked, ignore)
    loop = asyncio.get_running_loop()

    def connection() -> TunnelFront:
        if writes is None:
            return TunnelFront(front, None)
        conn = CountingFront(front, None)
        conn.writes = writes
        return conn

    server = await loop.create_server(connection, "127.0.0.1", 0)
    try:
        yield Rig(server.sockets[0].getsockname()[1], upstream, recorder, handler)
    finally:
        await front.close(1.0)
        server.close()
        tape.close()


def frames(rec: Recorder, channel: Channel | None = None) -> list[bytes]:
    return [f.raw for f in rec.frames() if channel is None or f.channel is channel]


async def test_request_answered_in_the_upstreams_place() -> None:
    verdict = Verdict(Act.ANSWER, data=RESULT, status=200, headers=(("X-A", "1"),))
    hooks = Scripted(request=verdict)
    async with rig(hooks) as r:
        got = await r.post()
        await until(lambda: "done" in hooks.calls)
    assert (got.status, got.body) == (200, RESULT)
    assert ("X-A", "1") in got.headers
    assert r.upstream.sent == []  # the server never saw it
    assert frames(r.recorder) == [CALL]  # as the host sent it (the hook records its answer)
    row = r.recorder.exchange()
    assert (row["status"], row["outcome"], row["response_size"]) == (200, "complete", len(RESULT))
    assert hooks.calls == ["request_body", "done"]


async def test_request_replaced_goes_upstream_with_its_length() -> None:
    new = CALL.replace(b'"x"', b'"longer-name"')
    hooks = Scripted(request=Verdict(Act.REPLACE, data=new))
    async with rig(hooks, Script(body=[RESULT])) as r:
        got = await r.post()
    assert (got.status, got.body) == (200, RESULT)
    ((head, sent),) = r.upstream.sent
    assert sent == new and b"Content-Length: %d\r\n" % len(new) in head
    assert hooks.calls == ["request_body", "response_head 200", "message", "done"]


async def test_a_dropped_request_waits_until_the_host_leaves() -> None:
    hooks = Scripted(request=Verdict(Act.DROP))
    async with rig(hooks) as r:
        task = asyncio.create_task(r.post())
        await until(lambda: "request_body" in hooks.calls)
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await until(lambda: "done" in hooks.calls)
        await until(lambda: r.recorder.exchange().get("outcome") is not None)
    assert r.upstream.sent == []
    assert r.recorder.exchange()["outcome"] == "host_aborted"


@pytest.mark.parametrize("late", [False, True])
async def test_a_json_response_replaced_recorded_as_the_upstream_sent_it(late: bool) -> None:
    """``late``: the body comes a moment after the head (not whole with it): still read whole
    and decided as one message."""
    hooks = Scripted(response=Verdict(Act.REPLACE, data=OTHER))
    body: list[bytes | float] = [0.02, RESULT] if late else [RESULT]
    async with rig(hooks, Script(body=body)) as r:  # type: ignore[arg-type]
        got = await r.post()
    assert got.body == OTHER
    assert ("Content-Length", str(len(OTHER))) in got.headers
    assert frames(r.recorder) == [CALL, RESULT]  # the hook records what it sent instead
    assert r.recorder.exchange()["response_size"] == len(OTHER)


async def test_a_response_reset_aborts_the_host() -> None:
    hooks = Scripted(response=Verdict(Act.RESET, why="before the response"))
    async with rig(hooks, Script(body=[RESULT])) as r:
        got = await r.post()
        await until(lambda: r.recorder.exchange().get("outcome") is not None)
    assert got.raw == b""
    assert r.recorder.exchange()["outcome"] == "injected_reset"


@pytest.mark.parametrize("pause", [False, True])
async def test_events_dropped_replaced_then_the_stream_ended(pause: bool) -> None:
    """Each SSE event decided: the first dropped, the second replaced, the third ends the
    stream cleanly (a reply's rest unread: closed, not reused). ``pause``: the stream comes
    in pieces rather than whole at once (one chunk, read to its end: the connection serves
    on) — both on the one streaming copy."""
    body: list[bytes | float] = [event(1), 0.01, event(2), event(3), event(4)]
    if not pause:
        body = [b"".join(event(n) for n in range(1, 5))]
    instead = b"data: instead\n\n"
    verdicts = [Verdict(Act.DROP), Verdict(Act.REPLACE, data=instead), Verdict(Act.END)]
    hooks = Scripted(events=verdicts)
    script = Script(headers=SSE, body=body, length=False)  # type: ignore[arg-type]
    async with rig(hooks, script) as r:
        got = await r.post()
        await until(lambda: "done" in hooks.calls)
    assert got.body == instead
    # streamed: the rest is not read, the connection not reused; whole: it was read already
    reply = r.upstream.replies[0]
    assert reply.closed if pause else reply.released
    assert hooks.calls.count("event") == 3 and "stream_end" not in hooks.calls
    # what the upstream sent is recorded, up to where the stream was ended
    assert len(frames(r.recorder, Channel.SSE)) == 3


async def test_events_passed_and_delayed_reach_the_host_in_order() -> None:
    verdicts = [Verdict(Act.DELAY, seconds=0.01), PASS]
    hooks = Scripted(events=verdicts)
    script = Script(headers=SSE, body=[event(1), 0.01, event(2)], length=False)
    async with rig(hooks, script) as r:
        got = await r.post()
        await until(lambda: "done" in hooks.calls)
    assert got.body == event(1) + event(2)
    assert hooks.calls[-2:] == ["stream_end", "done"]
    assert r.upstream.replies[0].released


async def test_an_event_streams_head_goes_out_with_its_first_event(monkeypatch: Any) -> None:
    """A server writes an event stream's head a moment before its first event: the head waits
    for it (HEAD_HOLD, here long enough for a loaded machine) and both go to the host in one
    write — one TLS record and one wake-up of the host instead of two, as the reverse relay
    does. The head used to go alone at once."""
    monkeypatch.setattr(handler_module, "HEAD_HOLD", 5.0, raising=False)
    writes: list[tuple[float, bytes]] = []
    script = Script(headers=SSE, body=[0.0, event(1), 0.05, event(2)], length=False)
    async with rig(None, script, writes=writes) as r:
        got = await r.post()
    assert got.status == 200 and got.body == event(1) + event(2)
    first = writes[0][1]
    assert first.startswith(b"HTTP/1.1 200 ") and event(1) in first, writes
    assert len(writes) == 2, writes  # the head with event 1; event 2 with the stream's end
    assert len(frames(r.recorder, Channel.SSE)) == 2  # both events recorded


async def test_a_quiet_event_streams_head_goes_alone_after_the_hold() -> None:
    """The head waits HEAD_HOLD at most: a stream whose first event is late still shows its
    head to the host long before that event."""
    writes: list[tuple[float, bytes]] = []
    script = Script(headers=SSE, body=[0.5, event(1)], length=False)
    async with rig(None, script, writes=writes) as r:
        t0 = time.monotonic()
        got = await r.post()
    assert got.body == event(1)
    (t_head, head), (t_event, rest) = writes
    assert head.startswith(b"HTTP/1.1 200 ") and b"data:" not in head
    assert event(1) in rest and t_head - t0 < 0.4 <= t_event - t0, writes


async def test_a_small_answer_whose_body_is_late_goes_whole_in_one_write() -> None:
    """A small JSON answer with a length whose body comes well after its head (longer than
    HEAD_HOLD): read whole and sent in one write, as the reverse relay sends it — the head
    used to go alone after the hold, then the body."""
    writes: list[tuple[float, bytes]] = []
    async with rig(None, Script(body=[0.05, RESULT]), writes=writes) as r:
        got = await r.post()
        await until(lambda: r.recorder.exchange().get("outcome") is not None)
    assert (got.status, got.body) == (200, RESULT)
    assert len(writes) == 1 and writes[0][1].endswith(RESULT), writes
    assert frames(r.recorder) == [CALL, RESULT]
    assert r.recorder.exchange()["outcome"] == "complete"
    assert r.upstream.replies[0].released


async def test_no_hooks_no_calls() -> None:
    async with rig(None, Script(body=[RESULT])) as r:
        got = await r.post()
    assert got.body == RESULT
    assert frames(r.recorder) == [CALL, RESULT]


async def test_a_hook_finds_the_upstream_its_exchange_went_to() -> None:
    """``duplicate`` sends a request again where it went: the handler's upstream function
    reads the origin off the exchange (no map beside it), during the exchange and after."""

    exchanges: list[HookExchange] = []

    class Asking(Scripted):
        async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
            exchanges.append(ex)
            return await super().request_body(ex, head, body)

    hooks = Asking()
    asked: list[Any] = []
    async with rig(hooks, Script(body=[RESULT])) as r:
        real_pool = r.handler.pool
        r.handler.pool = lambda target: asked.append(target) or real_pool(target)  # type: ignore[func-returns-value]
        await r.post()
        await until(lambda: "done" in hooks.calls)
        (ex,) = exchanges
        assert r.handler.upstream_of(ex) is r.upstream
    assert [(t.scheme, t.host, t.port) for t in asked] == [("http", "up.test", 80)] * 2


class TakingOneChunk(Upstream):
    """An upstream that answers 413 after the first chunk of a streamed body went (the pool
    then stops reading the body: its generator is not resumed)."""

    async def request(self, head: bytes, body: Any, **kw: Any) -> FakeReply:
        first = await anext(body)
        self.sent.append((head, first))
        reply = FakeReply(Script(status=413, body=[b"too large"], reason="Payload Too Large"))
        reply.content = Body(list(reply.content.steps))
        self.replies.append(reply)
        return reply


async def test_a_streamed_body_the_upstream_took_in_part_is_recorded() -> None:
    """The bytes that crossed the wire before the upstream answered are in the recording: the
    copy is kept before each chunk is handed on (the forward engine kept it after, so a body
    answered early was recorded empty)."""
    async with rig(None) as r:
        r.handler.pool = lambda _target: TakingOneChunk()  # type: ignore[assignment,return-value]
        got = await host_request(
            r.port, "POST", "http://up.test/mcp", b"", dict(HEADERS), raw_body=[CALL]
        )
        await until(lambda: r.recorder.exchange().get("outcome") is not None)
    assert got.status == 413
    assert frames(r.recorder, Channel.HTTP)[:1] == [CALL]


async def test_a_streamed_body_the_upstream_answered_early_is_marked_not_taken() -> None:
    """What went is recorded, but not as the whole body: its frame is incomplete and
    ``meta.request_body_not_taken`` says the upstream answered first, as the reverse relay
    records it (the forward engine recorded it as complete)."""
    async with rig(None) as r:
        r.handler.pool = lambda _target: TakingOneChunk()  # type: ignore[assignment,return-value]
        got = await host_request(
            r.port, "POST", "http://up.test/mcp", b"", dict(HEADERS), raw_body=[CALL, CALL]
        )
        await until(lambda: r.recorder.exchange().get("outcome") is not None)
    assert got.status == 413
    (request,) = [f for f in r.recorder.frames() if f.channel is Channel.HTTP][:1]
    assert request.raw == CALL and not request.complete
    assert r.recorder.exchange()["meta"]["request_body_not_taken"] is True


class Refusing(Upstream):
    async def request(self, *args: Any, **kw: Any) -> FakeReply:
        raise ConnectionRefusedError("connection refused")


async def test_an_unreachable_upstream_is_said_so_with_hooks() -> None:
    """With hooks the tape is told of a request before it goes: a refused connection is still
    reported as refused, not as an upstream that closed before its response."""
    hooks = Scripted()
    async with rig(hooks) as r:
        r.handler.pool = lambda _target: Refusing()  # type: ignore[assignment,return-value]
        got = await r.post()
        await until(lambda: "done" in hooks.calls)
    assert got.status == 502
    assert got.body == b"mcptape forward proxy: connection refused\n"
    assert r.recorder.exchange()["error"] == "connection refused"
