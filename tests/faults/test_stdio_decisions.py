"""What a decision tells the stdio pumps to write: answers, corrupted bytes, delays, refusals."""

from __future__ import annotations

import json

from mcp_proxy.faults import FaultEngine, parse_rule, unsupported


def req(id_: object, method: str, **params: object) -> bytes:
    msg = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
    return json.dumps(msg).encode() + b"\r\n"


def test_an_error_answers_a_request_and_replaces_a_response() -> None:
    engine = FaultEngine([parse_rule("error code=-32001 message=down data=7 method=tools/call")])
    call = req("a", "tools/call", name="x")
    d = engine.decide("c2s", call)
    assert d is not None
    answer = d.replacement(call)
    assert answer is not None and answer.endswith(b"\r\n")  # the sender's line end
    assert json.loads(answer) == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32001, "message": "down", "data": 7},
    }
    response = b'{"jsonrpc":"2.0","id":"a","result":{}}\n'
    d = engine.decide("s2c", response)
    assert d is not None and json.loads(d.replacement(response) or b"")["id"] == "a"
    note = b'{"jsonrpc":"2.0","method":"tools/call"}\n'  # a notification: nothing to answer
    d = engine.decide("c2s", note)
    assert d is not None and d.replacement(note) is None


def test_a_tool_error_uses_the_requests_era() -> None:
    engine = FaultEngine([parse_rule("tool-error text=boom direction=s2c")])
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    engine.decide("c2s", req(3, "tools/call", name="x", _meta=meta))
    response = b'{"jsonrpc":"2.0","id":3,"result":{}}\n'
    d = engine.decide("s2c", response)
    assert d is not None
    assert json.loads(d.replacement(response) or b"")["result"] == {
        "content": [{"type": "text", "text": "boom"}],
        "isError": True,
        "resultType": "complete",
    }


def test_jittered_delays_are_bounded_and_repeat_with_a_seed() -> None:
    def delays(seed: int) -> list[float]:
        engine = FaultEngine([parse_rule(f"delay ms=100 jitter=50 seed={seed}")])
        out = []
        for i in range(50):
            d = engine.decide("c2s", req(i, "ping"))
            assert d is not None
            out.append(d.delay_seconds())
        return out

    assert delays(1) == delays(1) and delays(1) != delays(2)
    assert all(0.05 <= s <= 0.15 for s in delays(1))
    assert len(set(delays(1))) > 10
    fixed = FaultEngine([parse_rule("delay ms=2s")]).decide("c2s", req(1, "ping"))
    assert fixed is not None and fixed.delay_seconds() == 2.0


def test_corrupted_bytes_follow_the_rule() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    d = FaultEngine([parse_rule("corrupt mode=truncate at=5")]).decide("s2c", line)
    assert d is not None and d.corrupted(line) == line[:5] + b"\n"


def test_what_each_transport_refuses() -> None:
    assert unsupported(parse_rule("http status=503"), "stdio")
    assert unsupported(parse_rule("disconnect mode=reset"), "stdio")
    assert unsupported(parse_rule("disconnect mode=close-stdin"), "http")
    assert unsupported(parse_rule("disconnect mode=kill"), "stdio") is None
    assert unsupported(parse_rule("http status=503"), "http") is None
    assert unsupported(parse_rule("reorder wait=2s"), "stdio") is None
    assert parse_rule("reorder wait=2s").settings["wait"] == 2000.0
