"""Which rule fires on which message — the pure engine and the bytes the actions write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcp_proxy.faults import FaultEngine, FaultRuleError, RulesFile, message_facts, parse_rule
from mcp_proxy.faults.actions import corrupt, error_response, tool_error_response


def req(id_: object, method: str, **params: object) -> bytes:
    return (
        json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()
        + b"\n"
    )


def resp(id_: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "result": {}}).encode() + b"\n"


def test_a_response_matches_by_its_requests_method_and_name() -> None:
    engine = FaultEngine([parse_rule("error direction=s2c method=tools/call name=slow")])
    assert engine.decide("c2s", req(1, "tools/call", name="slow")) is None  # direction
    assert engine.decide("c2s", req(2, "tools/call", name="fast")) is None
    assert engine.decide("s2c", resp(2)) is None  # answers the fast call
    decision = engine.decide("s2c", resp(1))
    assert decision is not None and decision.request is not None
    assert decision.request.name == "slow" and decision.action == "error"
    assert decision.finding()["code"] == "inject.error"
    assert decision.finding()["title"] == "injected error on tools/call"


def test_a_jsonpath_on_the_body_must_find_a_node() -> None:
    engine = FaultEngine([parse_rule("drop path=\"$[?@.arguments.city=='Lyon']\"")])
    assert engine.decide("c2s", req(1, "tools/call", name="w", arguments={"city": "Oslo"})) is None
    assert engine.decide("c2s", req(2, "tools/call", name="w", arguments={"city": "Lyon"}))
    assert engine.decide("c2s", b"not json\n") is None  # nothing to look into
    deep = b'{"jsonrpc":"2.0","id":3,"method":"x","params":' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert engine.decide("c2s", deep) is None  # too deep to parse: no match, no error


def test_a_bad_jsonpath_is_one_line_naming_its_column() -> None:
    with pytest.raises(FaultRuleError) as err:
        parse_rule("drop method=tools/call path=params.x")
    assert str(err.value) == (
        "--fault 'drop method=tools/call path=params.x' column 24:"
        " JSONPath 'params.x' must start with '$'"
    )


def test_an_unreadable_jsonpath_is_one_line() -> None:
    with pytest.raises(FaultRuleError) as err:
        parse_rule("drop path=$[")
    assert str(err.value) == (
        "--fault 'drop path=$[' column 6: cannot read JSONPath '$[': unexpected end of query"
    )


def test_ids_of_the_two_directions_do_not_collide() -> None:
    """Server→client request id 1 and client→server request id 1 are different requests."""
    engine = FaultEngine([parse_rule("drop method=roots/list direction=c2s")])
    engine.decide("c2s", req(1, "tools/call", name="x"))
    engine.decide("s2c", req(1, "roots/list"))  # the server asks the client
    decision = engine.decide("c2s", resp(1))  # the client answers roots/list
    assert decision is not None and decision.request is not None
    assert decision.request.method == "roots/list"
    assert engine.decide("s2c", resp(1)) is None  # answers tools/call: no rule


def test_nth_and_times() -> None:
    engine = FaultEngine([parse_rule("drop method=ping nth=2"), parse_rule("delay ms=1 times=2")])
    fired = [engine.decide("c2s", req(i, "ping")) for i in range(1, 6)]
    assert [d.action if d else None for d in fired] == ["delay", "drop", "delay", None, None]


def test_probability_is_repeatable_with_a_seed() -> None:
    def run(seed: int) -> list[bool]:
        engine = FaultEngine([parse_rule(f"drop p=0.5 seed={seed}")])
        return [engine.decide("c2s", req(i, "ping")) is not None for i in range(200)]

    assert run(3) == run(3)
    assert run(3) != run(4)
    assert 60 < sum(run(3)) < 140


def test_hostile_messages_never_raise() -> None:
    engine = FaultEngine([parse_rule("corrupt direction=s2c")])
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    for raw in (deep, b"\xff\xfe\n", b"", b"[1,2]\n", b'{"id": {"a": 1}, "result": 1}\n'):
        assert engine.decide("s2c", raw) is not None
    assert message_facts(deep).kind == "other"


def test_rules_file_is_reread_and_a_bad_edit_keeps_the_last_good_rules(tmp_path: Path) -> None:
    path = tmp_path / "faults.toml"
    path.write_text('[[fault]]\naction = "drop"\nmethod = "ping"\n')
    now = [0.0]
    warnings: list[str] = []
    source = RulesFile(path, interval=0.25, warn=warnings.append, clock=lambda: now[0])
    engine = FaultEngine(source=source)
    assert engine.decide("c2s", req(1, "ping")) is not None
    path.write_text("")  # faults switched off while the host is connected
    os.utime(path, ns=(1, 10**18))
    now[0] = 1.0
    assert engine.decide("c2s", req(2, "ping")) is None
    path.write_text('[[fault]]\naction = "dely"\n')
    os.utime(path, ns=(1, 2 * 10**18))
    now[0] = 2.0
    assert engine.decide("c2s", req(3, "ping")) is None
    assert len(warnings) == 1 and "unknown action 'dely'" in warnings[0]


def test_error_and_tool_error_bytes_answer_the_request() -> None:
    facts = message_facts(req("a", "tools/call", name="x"))
    raw = error_response(facts, -32001, "down", {"retry": True}, end=b"\r\n")
    assert raw.endswith(b"\r\n")
    assert json.loads(raw) == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32001, "message": "down", "data": {"retry": True}},
    }
    modern = message_facts(
        req(
            7,
            "tools/call",
            name="x",
            _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        )
    )
    result = json.loads(tool_error_response(modern, "boom"))["result"]
    assert result == {
        "content": [{"type": "text", "text": "boom"}],
        "isError": True,
        "resultType": "complete",
    }
    assert "resultType" not in json.loads(tool_error_response(facts, "boom"))["result"]


def test_corrupt_modes_keep_the_line_end() -> None:
    raw = '{"jsonrpc":"2.0","id":1,"result":{"text":"café"}}\n'.encode()
    assert corrupt(raw, "truncate") == raw[: (len(raw) - 1) // 2] + b"\n"
    assert corrupt(raw, "truncate", at=5) == raw[:5] + b"\n"
    cut = corrupt(raw, "cut-utf8")
    assert cut.endswith(b"caf\xc3\n")
    try:
        cut.decode()
        raise AssertionError("still valid UTF-8")
    except UnicodeDecodeError:
        pass
    assert corrupt(b'{"a":1}\n', "cut-utf8") == b'{"a\xe2\x82\n'
    bad = corrupt(raw, "invalid-json")
    assert bad.startswith(b"{,") and bad.endswith(b"\n")
    try:
        json.loads(bad)
        raise AssertionError("still valid JSON")
    except ValueError:
        pass
