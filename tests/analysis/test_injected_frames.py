"""Frames on the ``inject`` channel are mcptape's, not a peer's (fault injection, issue 15).

An injected answer (a rule that errors in the server's place) must not pair with the host's
request, nor make the server's real answer a "duplicate"; an injected second copy of a request
is no id reuse by the host. The viewers show those frames apart: ``show`` text and JSON and the
exchange view mark them — through the real CLI on a recording written by the real Recorder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.testing.factories import Wire
from tests.travel.conftest import run_cli

MARK = "[INJECTED by mcptape]"


def _session() -> Wire:
    w = Wire()
    w.handshake()
    call = {"name": "echo", "arguments": {"text": "hi"}}
    w.request("tools/call", 5, call)
    # The host got an error mcptape made up; the server's real answer followed (and was dropped
    # on the wire, but it is recorded as what the server sent).
    w.error(5, -32603, "injected failure", channel="inject")
    w.result(5, {"content": [{"type": "text", "text": "hi"}]})
    # A duplicated request: the server received the host's request twice.
    w.request("tools/call", 6, call)
    w.request("tools/call", 6, call, channel="inject")
    w.result(6, {"content": []})
    w.session["status"] = "ended"
    return w.end()


def test_injected_frames_neither_pair_nor_raise_findings() -> None:
    w = _session()
    a = w.analyze()
    calls = [e for e in a.exchanges if e.method == "tools/call"]
    assert [(e.msg_id, e.outcome, e.response_seq) for e in calls] == [
        ("5", "ok", 6),
        ("6", "ok", 9),
    ]
    codes = {f.code for f in a.findings}
    assert not codes & {
        "exchange.duplicate_response",
        "exchange.id_reused_in_flight",
        "exchange.unknown_response",
    }, codes
    assert [i.seq for i in a.injected] == [5, 8]
    assert a.frame_count == len(w.frames)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("inject") / "rec.db"
    sid = _session().record("sqlite:///" + str(db), name="rehearsal")
    return db, sid


def test_show_marks_injected_frames(recorded: tuple[Path, str]) -> None:
    db, sid = recorded
    text = run_cli("show", sid, "--db", str(db), "--no-findings")
    assert text.returncode == 0, text.stderr
    marked = [line for line in text.stdout.splitlines() if MARK in line]
    assert [line.split()[0] for line in marked] == ["#5", "#8"]
    as_json = run_cli("show", sid, "--db", str(db), "--format", "json")
    frames = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [f["seq"] for f in frames if f.get("injected") is True] == [5, 8]
    assert all("injected" not in f for f in frames if f["channel"] != "inject")


def test_exchange_view_shows_injected_frames_apart(recorded: tuple[Path, str]) -> None:
    db, sid = recorded
    text = run_cli("show", sid, "--db", str(db), "-x", "--no-findings")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    marked = [line for line in lines if MARK in line]
    assert [line.split()[0] for line in marked] == ["#5", "#8"]
    assert any(line.startswith("#4→#6") for line in lines), lines
    as_json = run_cli("show", sid, "--db", str(db), "-x", "--format", "json")
    items = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [i["seq"] for i in items if i.get("injected")] == [5, 8]
    calls = [i for i in items if i.get("method") == "tools/call" and not i.get("injected")]
    assert [i["response_seq"] for i in calls] == [6, 9]


# ------------------------------------------------------------- issue #22, defect 9 (b) and (c)
def _answered_by_mcptape(kind: str) -> Wire:
    """A call only mcptape answered (the server's answer never came), and one nobody did."""
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    if kind == "error":
        w.error(2, -32000, "nope", channel="inject")
    else:
        w.result(2, {"content": [{"type": "text", "text": "x"}], "isError": True}, channel="inject")
    w.request("tools/call", 3, {"name": "hang", "arguments": {}})
    return w.end()


@pytest.mark.parametrize(("kind", "outcome"), [("error", "error"), ("tool-error", "tool_error")])
def test_a_request_answered_by_an_injected_answer_is_answered(kind: str, outcome: str) -> None:
    a = _answered_by_mcptape(kind).analyze()
    calls = {e.msg_id: e for e in a.exchanges if e.method == "tools/call"}
    assert calls["2"].outcome == outcome and calls["2"].response_seq == 5
    assert calls["2"].error_code == (-32000 if kind == "error" else None)
    assert calls["3"].outcome == "no_response"  # the near miss: nobody answered it
    unanswered = [f.title for f in a.findings if f.code == "exchange.no_response"]
    assert unanswered == ["tools/call hang (id 3) was never answered"]


def test_an_injected_answer_before_the_request_answers_nothing() -> None:
    """Only an answer after the request answers it (ids are reused)."""
    w = Wire.initialized()
    w.error(2, -32000, "nope", channel="inject")
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    a = w.end().analyze()
    assert [e.outcome for e in a.exchanges if e.method == "tools/call"] == ["no_response"]


def test_stats_count_an_answer_mcptape_injected_as_the_analysis_does() -> None:
    from mcp_proxy.analysis.stats import sorted_stats
    from tests.analysis.streamed import method_stats, pass_stats

    w = _answered_by_mcptape("error")
    got = [s.as_dict() for s in sorted_stats(pass_stats(w))]
    assert got == [s.as_dict() for s in sorted_stats(method_stats(w.analyze().exchanges))]
    assert next(r for r in got if r["method"] == "tools/call")["errors"] == 1


def _killed(fault_end: str | None) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    w.end("ended", exit_code=None, exit_signal=9)
    w.session["fault_end"] = fault_end
    return w


def test_a_session_a_fault_ended_blames_the_fault() -> None:
    a = _killed("disconnect mode=kill signal=KILL, SIGKILL").analyze()
    found = {f.code: f for f in a.findings}
    assert "transport.host_ended_with_pending" not in found
    ended = found["inject.ended_with_pending"]
    assert ended.title.startswith("a fault rule ended the session (disconnect mode=kill")
    assert [e.outcome for e in a.exchanges if e.method == "tools/call"] == ["aborted"]
    # the near miss: the same end without a fault is the host's signal
    found = {f.code for f in _killed(None).analyze().findings}
    assert "transport.host_ended_with_pending" in found and "inject.ended_with_pending" not in found


def test_fault_end_is_read_from_the_relays_disconnect_finding() -> None:
    from mcp_proxy.analysis.service import fault_end

    rule = "disconnect mode=kill signal=KILL method=tools/call"
    rows = [
        {"code": "inject.delay", "detail": json.dumps({"rule": "delay ms=5"})},
        {"code": "inject.disconnect", "detail": json.dumps({"rule": rule, "signal": "SIGKILL"})},
    ]
    assert fault_end(rows) == rule + ", SIGKILL"
    assert fault_end([{"code": "inject.disconnect", "detail": "not json"}]) == "disconnect"
    assert fault_end(rows[:1]) is None


@pytest.mark.parametrize(("exit_code", "exit_signal"), [(0, None), (None, 9)])
def test_stats_and_analysis_agree_on_a_session_a_fault_ended(
    exit_code: int | None, exit_signal: int | None
) -> None:
    """``close-stdin`` (the server exits 0) and ``kill`` (signal 9): the pending call is the
    fault's (aborted) in the full analysis and in the streaming statistics alike."""
    from mcp_proxy.analysis.stats import sorted_stats
    from tests.analysis.streamed import method_stats, pass_stats

    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    w.end("ended", exit_code=exit_code, exit_signal=exit_signal)
    w.session["fault_end"] = "disconnect mode=close-stdin"
    a = w.analyze()
    assert [e.outcome for e in a.exchanges if e.method == "tools/call"] == ["aborted"]
    assert {f.code for f in a.findings} >= {"inject.ended_with_pending"}
    assert "exchange.no_response" not in {f.code for f in a.findings}
    quick = [s.as_dict() for s in sorted_stats(pass_stats(w))]
    assert quick == [s.as_dict() for s in sorted_stats(method_stats(a.exchanges))]
