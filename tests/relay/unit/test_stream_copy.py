"""The one streaming copy both front ends drive (``relay/http/stream.py``: ``copy_body``,
``copy_chunks``, ``copy_events``), through a scripted upstream (``FakeReply``) and a fake host
connection, with a :class:`Side` that logs what it is asked — no socket, no relay: the order of
writes and recording, the response head held for the body's first bytes, and every hook
verdict at an event (pass, replace, drop, end, reset; a stream that is not MCP, undecided)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.limits import HEAD_HOLD
from mcp_proxy.relay.http import stream
from mcp_proxy.relay.http.front import RelayResponse
from mcp_proxy.relay.http.hooks import PASS, Act, HookExchange, Send, Verdict
from mcp_proxy.relay.http.stream import CUT, ENDED, RESET, copy_body
from tests.relay.unit.fakes import FakeReply, Script

pytestmark = pytest.mark.timeout(20)

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
SSE = [("Content-Type", "text/event-stream")]


def ev(n: int) -> bytes:
    return b'data: {"jsonrpc":"2.0","method":"n","params":{"n":%d}}\n\n' % n


class Host:
    """The host's connection as ``RelayResponse`` writes to it: each write kept apart."""

    def __init__(self, *, fail_after: int | None = None) -> None:
        self.writes: list[bytes] = []
        self.log: list[tuple[str, bytes]] | None = None
        self.fail_after = fail_after
        self.close_after = False
        self.write_paused = False

    def write_raw(self, data: bytes) -> None:
        if self.fail_after is not None and len(self.writes) >= self.fail_after:
            raise ConnectionResetError("host gone")
        self.writes.append(data)
        if self.log is not None:
            self.log.append(("wrote", data))

    async def drain(self) -> None:
        return None


class LogSide:
    """A :class:`~mcp_proxy.relay.http.stream.Side` writing to ``rr`` and logging each call."""

    def __init__(self, rr: RelayResponse, mcp: bool = True) -> None:
        self.rr = rr
        self.mcp = mcp
        self.log: list[tuple[str, bytes]] = []

    async def send(self, data: bytes) -> None:
        await self.rr.write(data)

    def before(self, chunk: bytes) -> bytes | None:
        self.log.append(("before", chunk))
        return chunk

    def went(self, chunk: bytes, sent: int) -> None:
        assert sent == len(chunk)
        self.log.append(("went", chunk))

    def held(self) -> bytes | None:
        return None

    def event(self, e: SSEEvent) -> bytes | None:
        self.log.append(("event", e.raw))
        return e.raw if self.mcp else None

    def last_event(self, e: SSEEvent) -> None:
        self.log.append(("last_event", e.raw))

    def reset(self, why: str) -> None:
        self.log.append(("reset", why.encode()))


class Hooks:
    def __init__(self, verdict: Callable[[SSEEvent], Verdict] = lambda _: PASS) -> None:
        self.verdict = verdict
        self.log: list[tuple[str, Any]] = []

    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        raise AssertionError("not a boundary of the streaming copy")

    def response_head(self, ex: HookExchange, status: int) -> None:
        raise AssertionError("not a boundary of the streaming copy")

    async def message(self, ex: HookExchange, body: bytes) -> Verdict:
        raise AssertionError("not a boundary of the streaming copy")

    async def event(self, ex: HookExchange, e: SSEEvent, send: Send) -> Verdict:
        self.log.append(("event", e.raw))
        return self.verdict(e)

    async def stream_end(self, ex: HookExchange) -> None:
        self.log.append(("stream_end", None))

    def done(self, ex: HookExchange) -> None:
        raise AssertionError("not a boundary of the streaming copy")


def run(
    body: list[bytes | float | BaseException],
    *,
    hooks: Hooks | None = None,
    mcp: bool = True,
    host: Host | None = None,
) -> tuple[str, Host, LogSide]:
    host = host or Host()
    reply = FakeReply(Script(headers=SSE, body=body, length=False))
    rr = RelayResponse(status=200, reason="OK", raw=[(b"Content-Type", b"text/event-stream")])
    request: Any = SimpleNamespace(conn=host, method="POST", version=(1, 1), keep_alive=True)
    side = LogSide(rr, mcp)
    host.log = side.log

    async def main() -> str:
        hooked = None if hooks is None else (hooks, SimpleNamespace(), SSEParser())
        how = await copy_body(request, rr, reply, side, None, hooked)  # type: ignore[arg-type]
        if how != RESET:
            await rr.write_eof()
        return how

    return asyncio.run(main()), host, side


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def test_a_buffered_body_goes_with_the_head_and_is_recorded_after_each_write() -> None:
    how, host, side = run([ev(1), 0.01, ev(2)])
    assert how == ENDED
    # The head waits for the first bytes: one write; the last chunk goes with the end.
    assert host.writes == [HEAD + chunked(ev(1)), chunked(ev(2)) + b"0\r\n\r\n"]
    assert side.log == [
        ("before", ev(1)),
        ("wrote", HEAD + chunked(ev(1))),
        ("went", ev(1)),
        ("before", ev(2)),
        ("wrote", chunked(ev(2)) + b"0\r\n\r\n"),
        ("went", ev(2)),
    ]


# The loop's timers fire in deadline order: the hold and the upstream's pause race not.
def test_a_head_whose_body_is_late_goes_alone_after_head_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream, "HEAD_HOLD", 0.001)
    _, host, _ = run([0.05, ev(1)])
    assert host.writes == [HEAD, chunked(ev(1)) + b"0\r\n\r\n"]


def test_a_head_whose_body_comes_within_head_hold_goes_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert HEAD_HOLD < 0.05
    monkeypatch.setattr(stream, "HEAD_HOLD", 5.0)
    _, host, _ = run([0.01, ev(1)])
    assert host.writes == [HEAD + chunked(ev(1)) + b"0\r\n\r\n"]


def test_a_write_the_host_refuses_is_not_recorded_and_raises() -> None:
    with pytest.raises(ConnectionResetError):
        run([ev(1), 0.01, ev(2)], host=Host(fail_after=1))


def test_events_are_recorded_as_sent_then_decided_then_carried_out() -> None:
    def verdict(e: SSEEvent) -> Verdict:
        n = e.raw[-5:-4]
        if n == b"2":
            return Verdict(Act.REPLACE, data=ev(20))
        if n == b"3":
            return Verdict(Act.DROP)
        return PASS

    hooks = Hooks(verdict)
    how, host, side = run([ev(1) + ev(2), 0.01, ev(3) + ev(4)], hooks=hooks)
    assert how == ENDED
    # With hooks the head goes at once (a reset at the first event shows a head, then nothing).
    assert host.writes[0] == HEAD
    sent = b"".join(chunked(e) for e in (ev(1), ev(20), ev(4)))
    assert b"".join(host.writes[1:]) == sent + b"0\r\n\r\n"
    assert [k for k, _ in side.log] == [
        "wrote",  # the head
        "event",
        "wrote",
        "event",
        "wrote",
        "event",
        "event",
        "wrote",
        "wrote",  # the end
    ]
    assert hooks.log == [("event", ev(n)) for n in (1, 2, 3, 4)] + [("stream_end", None)]


@pytest.mark.parametrize(("act", "how"), [(Act.END, CUT), (Act.RESET, RESET)])
def test_a_hook_ends_or_resets_the_stream_at_an_event(act: Act, how: str) -> None:
    hooks = Hooks(lambda e: Verdict(act, why="here") if b"2" in e.raw[-6:] else PASS)
    got, host, side = run([ev(1), 0.01, ev(2), 0.01, ev(3)], hooks=hooks)
    assert got == how
    assert [e for _, e in hooks.log] == [ev(1), ev(2)]  # no stream_end: the stream was cut
    assert (("reset", b"here") in side.log) is (act is Act.RESET)
    assert b"".join(host.writes) == HEAD + chunked(ev(1)) + (b"0\r\n\r\n" if how == CUT else b"")


def test_a_stream_that_is_not_mcp_goes_undecided() -> None:
    hooks = Hooks(lambda _: Verdict(Act.DROP))
    how, host, _ = run([ev(1), ev(2)], hooks=hooks, mcp=False)
    assert how == ENDED
    assert hooks.log == [("stream_end", None)]
    assert b"".join(host.writes) == HEAD + chunked(ev(1)) + chunked(ev(2)) + b"0\r\n\r\n"


def test_an_event_cut_by_the_streams_end_is_recorded_incomplete_and_goes_as_it_came() -> None:
    hooks = Hooks()
    how, _, side = run([ev(1) + b"data: half"], hooks=hooks)
    assert how == ENDED
    assert side.log[-3:-1] == [("last_event", b"data: half"), ("wrote", chunked(b"data: half"))]
    assert hooks.log[-1] == ("stream_end", None)
