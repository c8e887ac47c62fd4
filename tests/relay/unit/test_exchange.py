"""The exchange's recording state machine, transition by transition, without a relay."""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.exchange import (
    TRANSITIONS,
    Exchange,
    ExchangeContext,
    IllegalTransition,
    RecState,
)
from mcp_proxy.relay.http.sessions import RULE_MCP_SESSION, SessionRouter
from tests.relay.unit.fakes import Recorder, until


def _ex(rec: Recorder | None = None) -> Exchange:
    rec = rec if rec is not None else Recorder()
    router = SessionRouter(rec, name=None, upstream="http://up.test/mcp", idle_cut=300)
    ctx = ExchangeContext(rec, router, Redactor(), "http://up.test", "http://127.0.0.1:1")
    return Exchange(ctx, {"method": "POST", "started_at": 1.0}, {})


def _frame(raw: bytes) -> Frame:
    return Frame(Direction.C2S, Channel.HTTP, raw, 0, 1.0, True)


def _place(ex: Exchange, sid: str = "abc") -> None:
    ex.attach_key(ex.ctx.router.mcp_key(sid), RULE_MCP_SESSION, grouping={"mcp_session_id": sid})


def kinds(rec: Recorder) -> list[str]:
    return [k for k, _ in rec.calls]


def test_the_table_allows_exactly_these_moves() -> None:
    allowed = {(a, b) for a, bs in TRANSITIONS.items() for b in bs}
    assert allowed == {
        (RecState.UNPLACED, RecState.WANTED),
        (RecState.UNPLACED, RecState.HELD),
        (RecState.WANTED, RecState.HELD),
        (RecState.HELD, RecState.LIVE),
        (RecState.HELD, RecState.DONE),
        (RecState.LIVE, RecState.DONE),
    }


@pytest.mark.parametrize(
    ("start", "to"),
    [(a, b) for a in RecState for b in RecState if b not in TRANSITIONS[a]],
)
def test_every_other_move_raises(start: RecState, to: RecState) -> None:
    ex = _ex()
    ex.state = start
    with pytest.raises(IllegalTransition):
        ex.move(to)


def test_unplaced_held_done_is_one_record() -> None:
    rec = Recorder()
    ex = _ex(rec)
    assert ex.state is RecState.UNPLACED
    _place(ex)
    assert ex.state is RecState.HELD
    ex.frame(_frame(b"{}"))
    ex.finish("complete")
    assert ex.state is RecState.DONE and ex.finished
    assert kinds(rec) == ["new_session", "record_exchange"]
    frames, fields = rec.calls[1][1]
    assert [f.raw for f in frames] == [b"{}"] and fields["outcome"] == "complete"
    assert ex.ctx.finished == 1


def test_held_live_done_flows_and_updates() -> None:
    rec = Recorder()
    ex = _ex(rec)
    _place(ex)
    ex.frame(_frame(b"1"))
    ex.register()
    assert ex.state is RecState.LIVE
    ex.frame(_frame(b"2"))
    ex.finish("upstream_error", "broke")
    assert kinds(rec) == ["new_session", "new_exchange", "put", "put", "update_exchange"]
    assert rec.calls[-1][1]["outcome"] == "upstream_error"


def test_register_before_placing_waits_and_registers_when_placed() -> None:
    rec = Recorder()
    ex = _ex(rec)
    ex.register()
    assert ex.state is RecState.WANTED and kinds(rec) == []
    _place(ex)
    assert ex.state is RecState.LIVE and kinds(rec) == ["new_session", "new_exchange"]


def test_finish_places_an_unplaced_exchange_by_fallback() -> None:
    rec = Recorder()
    ex = _ex(rec)
    ex.finish("refused", "no")
    assert ex.state is RecState.DONE and ex.entry is not None
    assert kinds(rec) == ["new_session", "record_exchange"]


def test_done_is_final_finish_twice_records_once() -> None:
    rec = Recorder()
    ex = _ex(rec)
    ex.finish("complete")
    ex.finish("host_aborted")
    ex.register()
    assert kinds(rec).count("record_exchange") == 1 and ex.outcome == "complete"


def test_a_held_exchange_is_flushed_before_another_registers() -> None:
    """Wire order: the session's held request goes to the recorder before a later live one."""
    rec = Recorder()
    first, second = _ex(rec), _ex(rec)
    second.ctx = first.ctx
    _place(first)
    first.frame(_frame(b"first"))
    _place(second)
    second.register()
    assert first.state is RecState.LIVE and second.state is RecState.LIVE
    puts = [d.raw for k, d in rec.calls if k == "put"]
    assert puts == [b"first"]


def test_a_slow_exchange_registers_after_a_moment() -> None:
    async def go() -> Exchange:
        ex = _ex()
        _place(ex)
        ex.hold_stream()
        assert ex.timer is not None and ex.state is RecState.HELD
        await until(lambda: ex.state is RecState.LIVE)
        return ex

    ex = asyncio.run(go())
    assert ex.state is RecState.LIVE


def test_no_recorder_still_moves_through_the_states() -> None:
    ex = _ex(None)
    ex.ctx.recorder = None
    _place(ex)
    ex.finish("complete")
    assert ex.state is RecState.DONE
