"""The hold/resolve state machine (``intercept/desk.py``) with a fake table and a fake clock:
no store, no sleeping — the fake's ``get`` moves the clock and plays the person."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from mcp_proxy.errors import StoreError
from mcp_proxy.faults import FaultEngine, parse_intercept_rule
from mcp_proxy.intercept.desk import InterceptDesk, Verdict
from mcp_proxy.store.intercepts import AlreadyResolved, HeldRow

CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}\n'


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTable:
    """Rows in a dict; ``on_get(n)`` runs before the n-th poll (a person deciding, time
    passing); ``fail_gets`` polls raise StoreError first."""

    def __init__(self, clock: Clock, on_get: Callable[[FakeTable, int], None] | None = None):
        self.rows: dict[int, HeldRow] = {}
        self.clock = clock
        self.on_get = on_get or (lambda _t, _n: None)
        self.gets = 0
        self.fail_gets = 0
        self.fail_hold = False

    def hold(self, session_id, direction, kind, method, msg_id, rule, original) -> int:  # type: ignore[no-untyped-def]
        if self.fail_hold:
            raise StoreError("database is locked")
        iid = len(self.rows) + 1
        self.rows[iid] = HeldRow(
            iid, session_id, direction, kind, method, msg_id, rule, original, "held", None,
            None, 0.0, None, None,
        )  # fmt: skip
        return iid

    def get(self, iid: int) -> HeldRow | None:
        self.gets += 1
        self.on_get(self, self.gets)
        if self.fail_gets:
            self.fail_gets -= 1
            raise StoreError("server closed the connection")
        return self.rows.get(iid)

    def resolve(self, iid: int, decision: str, payload: bytes | None, by: str) -> HeldRow:
        row = self.rows[iid]
        if row.state != "held":
            raise AlreadyResolved(f"#{iid} already resolved")
        self.rows[iid] = replace(
            row, state="resolved", decision=decision, payload=payload, resolved_by=by
        )
        return self.rows[iid]


def decision(rule: str = "method=tools/call", raw: bytes = CALL, direction: str = "c2s"):  # type: ignore[no-untyped-def]
    found = FaultEngine([parse_intercept_rule(rule)]).decide(direction, raw)
    assert found is not None
    return found


def desk_for(table: FakeTable, clock: Clock, timeout: float = 10.0, said: list[str] | None = None):  # type: ignore[no-untyped-def]
    out = said if said is not None else []
    desk = InterceptDesk(table, timeout=timeout, poll=0.0, say=out.append, clock=clock)
    return desk


def person(
    at_poll: int, how: str, payload: bytes | None = None
) -> Callable[[FakeTable, int], None]:
    def act(table: FakeTable, n: int) -> None:
        table.clock.now += 1.0
        if n == at_poll:
            table.resolve(1, how, payload, "ada")

    return act


@pytest.mark.parametrize(
    ("how", "payload"),
    [
        ("forward", None),
        ("drop", None),
        ("edit", b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}'),
        ("answer", b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}'),
    ],
)
def test_a_persons_decision_is_the_verdict(how: str, payload: bytes | None) -> None:
    clock = Clock()
    said: list[str] = []
    table = FakeTable(clock, person(3, how, payload))
    verdict = desk_for(table, clock, said=said).hold("s1", "c2s", CALL, decision())
    assert verdict == Verdict(1, how, payload, "ada", "tools/call")
    assert table.gets == 3
    held = table.rows[1]
    assert (held.session_id, held.direction, held.kind, held.method, held.msg_id) == (
        "s1", "c2s", "request", "tools/call", "7",
    )  # fmt: skip
    assert held.original == CALL and held.rule == "method=tools/call"
    assert said == [
        "held #1 (c2s request tools/call); decide with: mcptape intercept resolve 1"
        " --forward|--edit FILE|--set PATH=VALUE|--answer FILE|--drop"
    ]


def test_nobody_deciding_times_out_forwards_and_says_so() -> None:
    clock = Clock()
    said: list[str] = []
    table = FakeTable(clock, person(0, "forward"))  # never decides; time passes 1 s a poll
    verdict = desk_for(table, clock, timeout=5, said=said).hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, verdict.forwards) == ("timeout", True)
    assert table.rows[1].decision == "timeout"
    assert table.gets == 5  # the 5th poll (at 5 s) finds it held and the deadline reached
    assert said[-1] == "#1 forwarded unchanged after 5 s (--intercept-timeout): nobody resolved it"


def test_a_person_deciding_as_the_timeout_fires_wins() -> None:
    """The timeout's update finds the row resolved already: the person's decision stands."""
    clock = Clock()

    def late(table: FakeTable, n: int) -> None:
        table.clock.now += 1.0

    table = FakeTable(clock, late)
    real_resolve = table.resolve

    def racing(iid: int, how: str, payload: bytes | None, by: str) -> HeldRow:
        if by.startswith("mcptape"):
            real_resolve(iid, "drop", None, "ada")  # the person got there first
        return real_resolve(iid, how, payload, by)

    table.resolve = racing  # type: ignore[method-assign]
    verdict = desk_for(table, clock, timeout=2).hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, verdict.by) == ("drop", "ada")


def test_timeout_zero_waits_for_ever() -> None:
    clock = Clock()
    table = FakeTable(clock, person(500, "forward"))
    verdict = desk_for(table, clock, timeout=0).hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, table.gets) == ("forward", 500)


def test_closing_the_desk_abandons_the_hold() -> None:
    clock = Clock()
    holder: list[InterceptDesk] = []

    def relay_ends(table: FakeTable, n: int) -> None:
        if n == 2:
            holder[0].close()

    table = FakeTable(clock, relay_ends)
    desk = desk_for(table, clock, timeout=0)
    holder.append(desk)
    verdict = desk.hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, verdict.forwards) == ("abandoned", True)
    assert table.rows[1].state == "resolved"


def test_a_store_that_fails_does_not_stop_the_wire() -> None:
    clock = Clock()
    said: list[str] = []
    table = FakeTable(clock)
    table.fail_hold = True
    verdict = desk_for(table, clock, said=said).hold("s1", "c2s", CALL, decision())
    assert verdict.decision == "forward" and verdict.id is None
    assert said == ["cannot hold a message (database is locked); forwarded unchanged"]
    # polls that fail are retried at the next poll
    table2 = FakeTable(clock, person(4, "drop"))
    table2.fail_gets = 2
    assert desk_for(table2, clock).hold("s1", "c2s", CALL, decision()).decision == "drop"


def test_a_message_too_large_to_hold_is_forwarded_at_once() -> None:
    clock = Clock()
    said: list[str] = []
    table = FakeTable(clock)
    desk = InterceptDesk(table, timeout=1, poll=0, max_bytes=10, say=said.append, clock=clock)
    verdict = desk.hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, verdict.id, table.rows) == ("too_large", None, {})
    assert said == [
        f"not holding a {len(CALL)}-byte tools/call (more than 10 bytes): forwarded unchanged"
    ]


@pytest.mark.parametrize(
    "payload",
    [b"", b'{"jsonrpc":"2.0",\n"id":7,"result":{}}', b"not json", b'{"id":7,"result":{}}'],
)
def test_a_bad_payload_from_the_store_is_not_sent(payload: bytes) -> None:
    """Another process wrote the row: a payload that is not one compact JSON-RPC message
    (empty, two lines, not JSON, no jsonrpc) forwards the original instead."""
    clock = Clock()
    said: list[str] = []
    table = FakeTable(clock, person(1, "answer", payload))
    verdict = desk_for(table, clock, said=said).hold("s1", "c2s", CALL, decision())
    assert (verdict.decision, verdict.payload) == ("forward", None)
    assert said[-1].startswith("#1: the answer is not usable (")


def test_a_rule_without_direction_holds_the_call_not_its_answer() -> None:
    engine = FaultEngine([parse_intercept_rule("method=tools/call")])
    assert engine.decide("c2s", CALL) is not None
    answer = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}).encode()
    assert engine.decide("s2c", answer) is None
    engine = FaultEngine([parse_intercept_rule("direction=response method=tools/call")])
    assert engine.decide("c2s", CALL) is None
    assert engine.decide("s2c", answer) is not None


def test_an_intercepts_file_is_re_read_when_it_changes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from mcp_proxy.faults import RulesFile

    path = Path(tmp_path) / "intercepts.toml"
    path.write_text('[[intercept]]\nmethod = "ping"\n')
    warned: list[str] = []
    source = RulesFile(path, interval=0.0, warn=warned.append, table="intercept")
    engine = FaultEngine(source=source)
    assert engine.decide("c2s", CALL) is None
    path.write_text('[[intercept]]\nmethod = "tools/call"\nname = "echo"\n# edited\n')
    found = engine.decide("c2s", CALL)
    assert found is not None and found.action == "intercept"
    path.write_text("[[intercept]]\nmethod = \n")  # a bad edit keeps the rules, says so once
    assert engine.decide("c2s", CALL) is not None
    assert len(warned) == 1 and warned[0].endswith("(keeping the previous intercept rules)")


def test_a_host_that_leaves_abandons_the_hold() -> None:
    clock = Clock()
    table = FakeTable(clock)
    polls = iter([False, False, True])
    verdict = desk_for(table, clock, timeout=0).hold(
        "s1", "c2s", CALL, decision(), gone=lambda: next(polls)
    )
    assert (verdict.decision, verdict.by) == ("abandoned", "mcptape (the host left)")
    assert table.gets == 3 and table.rows[1].decision == "abandoned"


def test_kind_and_id_match() -> None:
    """``kind=`` and ``id=`` (added to the one matching language, for faults too)."""
    note = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n'
    by_kind = FaultEngine([parse_intercept_rule("kind=notification")])
    assert by_kind.decide("c2s", CALL) is None
    assert by_kind.decide("s2c", note) is not None
    by_id = FaultEngine([parse_intercept_rule("direction=response id=7")])
    assert by_id.decide("c2s", CALL) is None
    assert by_id.decide("s2c", b'{"jsonrpc":"2.0","id":8,"result":{}}\n') is None
    assert by_id.decide("s2c", b'{"jsonrpc":"2.0","id":7,"result":{}}\n') is not None
    from mcp_proxy.faults import FaultRuleError, parse_rule

    assert parse_rule("drop kind=request id=abc").match.id == "abc"
    with pytest.raises(FaultRuleError, match="'reply' is not one of request, notification"):
        parse_intercept_rule("kind=reply")
