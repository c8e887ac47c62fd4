"""How the host reacted to an injected fault, read from stdio-shaped frame rows (pure)."""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.analysis.inject import injections, reactions, set_aside, with_injected


def frame(seq: int, direction: str, msg: dict[str, Any], channel: str = "stdio") -> dict:
    kind = "request" if "method" in msg and "id" in msg else "notification"
    if "method" not in msg:
        kind = "error" if "error" in msg else "response"
    mid = msg.get("id")
    return {
        "seq": seq,
        "direction": direction,
        "channel": channel,
        "kind": kind,
        "method": msg.get("method"),
        "msg_id": json.dumps(mid) if mid is not None else None,
        "raw": json.dumps(msg).encode() + b"\n",
    }


def call(seq: int, id_: int, name: str) -> dict:
    msg = {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name}}
    return frame(seq, "c2s", msg)


def answer(seq: int, id_: int, channel: str = "stdio") -> dict:
    return frame(seq, "s2c", {"jsonrpc": "2.0", "id": id_, "result": {}}, channel)


def fault(code: str, direction: str, id_: int) -> dict:
    return {
        "code": code,
        "severity": "info",
        "title": f"injected {code.split('.')[1]} on tools/call",
        "detail": json.dumps({"direction": direction, "id": id_, "rule": "x"}),
        "frame_seqs": [],
    }


def test_retry_after_an_injected_error() -> None:
    frames = [call(1, 1, "search"), answer(2, 1, "inject"), call(3, 2, "search"), answer(4, 2)]
    [r] = reactions([fault("inject.error", "c2s", 1)], frames)
    assert (
        r["code"] == "inject.reaction" and "retried the request (tools/call search)" in r["title"]
    )
    assert r["frame_seqs"] == [1, 3]


def test_cancel_after_a_dropped_answer() -> None:
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    frames = [call(1, 7, "slow"), answer(2, 7), frame(3, "c2s", cancel), call(4, 8, "other")]
    [inj] = injections([fault("inject.drop", "s2c", 7)], frames)
    assert (inj.request_seq, inj.fault_seq, inj.name) == (1, 2, "slow")
    [r] = reactions([fault("inject.drop", "s2c", 7)], frames)
    assert "cancelled the request" in r["title"] and r["frame_seqs"] == [2, 3]


def test_a_silent_host_is_a_warning_and_moving_on_is_not() -> None:
    frames = [call(1, 1, "a"), answer(2, 1)]
    [silent] = reactions([fault("inject.drop", "s2c", 1)], frames)
    assert (silent["code"], silent["severity"]) == ("inject.host_silent", "warning")
    frames.append(call(3, 2, "b"))
    [moved] = reactions([fault("inject.drop", "s2c", 1)], frames)
    assert "moved on to other requests" in moved["title"] and moved["severity"] == "info"


def test_a_disconnect_has_no_reaction_and_plain_sessions_are_untouched() -> None:
    frames = [call(1, 1, "a")]
    assert reactions([fault("inject.disconnect", "c2s", 1)], frames) == []
    plain = [{"code": "exchange.unanswered", "frame_seqs": [1]}]
    assert with_injected(plain, frames, "ignore") == plain


def test_ignore_sets_aside_findings_about_faulted_requests_only() -> None:
    frames = [call(1, 1, "a"), call(2, 2, "b"), answer(3, 2)]
    findings = [
        fault("inject.drop", "c2s", 1),
        {"code": "exchange.unanswered", "frame_seqs": [1]},  # mcptape's doing
        {"code": "tool.is_error", "frame_seqs": [2, 3]},  # the server's own
    ]
    kept = set_aside(findings, frames)
    assert [f["code"] for f in kept] == ["tool.is_error"]
    reported = with_injected(findings, frames, "report")
    assert reported[-1]["code"] == "inject.reaction" and "moved on" in reported[-1]["title"]
    assert reported[-1]["area"] == "inject"


def test_a_retry_is_the_same_request_and_a_delay_reports_only_a_cancel() -> None:
    other = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search"}}
    other["params"]["arguments"] = {"q": "other"}  # type: ignore[index]
    first = call(1, 1, "search")
    frames = [first, answer(2, 1, "inject"), frame(3, "c2s", other)]
    [r] = reactions([fault("inject.error", "c2s", 1)], frames)
    assert "moved on" in r["title"]  # same tool, other arguments: not a retry
    assert reactions([fault("inject.delay", "s2c", 1)], [first, answer(2, 1)]) == []
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    frames = [first, frame(2, "c2s", cancel), answer(3, 1)]
    [late] = reactions([fault("inject.delay", "c2s", 1)], frames)
    assert "cancelled" in late["title"]


def test_starting_over_is_told_apart() -> None:
    init = {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {}}
    frames = [call(1, 1, "a"), frame(2, "c2s", init), call(3, 10, "a")]
    [r] = reactions([fault("inject.http", "c2s", 1)], frames)
    assert "started over (initialize) and retried the request" in r["title"]
    assert r["frame_seqs"] == [1, 2, 3]
