"""Findings that were false on real traffic (hardening issue, defects 16–20), as recorded-shape
sessions: the pure analysis must tell what really happened.

The same situations run end to end through the real relays in ``test_real_false_findings.py``;
these pin the rules down without processes, one session shape per rule.
"""

from __future__ import annotations

import signal

from mcp_proxy.analysis.taxonomy import classify_error
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import hdrs, http_call, http_init
from tests.analysis.streamed import method_stats


def _roots_pending() -> Wire:
    """An initialize-era stdio session whose server asked roots/list and got no answer."""
    w = Wire.initialized(client_caps={"roots": {"listChanged": True}})
    w.call(2)
    w.request("roots/list", 0, direction="s2c")
    return w


# ------------------------------------------------------------------------------ defect 16
def test_host_signal_after_normal_session_is_no_crash() -> None:
    w = _roots_pending().end("ended", exit_code=None, exit_signal=signal.SIGTERM)
    a = w.analyze()
    codes = {f.code: f for f in a.findings}
    assert "transport.exit_with_pending" not in codes
    assert "transport.server_crashed" not in codes
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    assert roots.outcome == "no_response"
    assert codes["exchange.no_response"].severity == "warning"
    assert codes["exchange.no_response"].frame_seqs == [roots.request_seq]


def test_crash_loses_host_requests_only() -> None:
    w = _roots_pending()
    w.request("tools/call", 3, {"name": "slow", "arguments": {}})
    a = w.end("crashed", exit_code=None, exit_signal=signal.SIGKILL).analyze()
    codes = {f.code: f for f in a.findings}
    pending = codes["transport.exit_with_pending"]
    assert "1 request(s) pending: tools/call slow" in pending.title, pending.title
    assert next(e for e in a.exchanges if e.method == "roots/list").outcome == "no_response"
    assert next(e for e in a.exchanges if e.name == "slow").outcome == "lost"


def test_host_stopping_the_server_with_its_own_call_pending() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}})
    a = w.end("ended", exit_code=None, exit_signal=signal.SIGTERM).analyze()
    codes = {f.code: f for f in a.findings}
    assert "transport.exit_with_pending" not in codes
    ended = codes["transport.host_ended_with_pending"]
    assert ended.severity == "info" and "signal 15" in ended.title
    assert a.exchanges[-1].outcome == "aborted"


# ------------------------------------------------------------------------------ defect 17
def _discover_refused(*, then_initialize: bool) -> Wire:
    """A client probing server/discover at an initialize-era server (TypeScript SDK 1.x style:
    HTTP 400 with a JSON-RPC error whose id is null), optionally then falling back."""
    w = Wire(transport="http")
    hid = w.exchange(request_headers=hdrs(None, "2026-07-28"), status=400)
    w.request("server/discover", 1, {"_meta": envelope()}, http=hid)
    w.error(None, -32000, "Bad Request: Server not initialized", http=hid)
    if then_initialize:
        h0 = w.exchange(
            request_headers=hdrs(None, None),
            response_headers=[["content-type", "application/json"], ["mcp-session-id", "s1"]],
        )
        h1 = w.exchange(request_headers=hdrs(), status=202, response_headers=[])
        w.handshake(http=(h0, h1), id=2)
    return w.end()


def test_discover_400_is_the_fallback_not_a_status_mismatch() -> None:
    for then_initialize in (False, True):
        codes = _discover_refused(then_initialize=then_initialize).codes()
        assert "lifecycle.discover_fallback" in codes, codes
        assert "http.status_mismatch" not in codes, (then_initialize, codes)


# ------------------------------------------------------------------------------ defect 18
def test_server_request_on_a_stream_the_host_closed_is_not_host_disconnected() -> None:
    w = http_init()
    sse = [["content-type", "text/event-stream"]]
    g = w.exchange("GET", request_headers=hdrs(), response_headers=sse, outcome="host_aborted")
    w.request("roots/list", 0, direction="s2c", http=g, channel="sse")
    http_call(w, 2)
    a = w.end().analyze()
    codes = {f.code for f in a.findings}
    assert "transport.host_disconnected" not in codes, codes
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    assert roots.outcome == "no_response"


def test_host_request_on_a_closed_stream_still_is_host_disconnected() -> None:
    w = http_init()
    http_call(
        w,
        2,
        response="none",
        outcome="host_aborted",
        response_headers=[["content-type", "text/event-stream"]],
    )
    assert "transport.host_disconnected" in w.end().codes()


# ------------------------------------------------------------------------------ defect 19
def test_http_session_without_delete_is_open_ended_at_its_last_frame() -> None:
    w = http_init()
    http_call(w, 2)
    last = w.frames[-1]["ts"]
    w.wait(300_000)  # the relay ran on for five minutes
    a = w.end().analyze()
    assert a.facts.open_ended and a.facts.last_ts == last
    assert a.facts.active_s is not None and a.facts.active_s < 1
    assert a.as_dict()["open_ended"] is True


def test_http_session_closed_with_delete_is_not_open_ended() -> None:
    w = http_init()
    http_call(w, 2)
    w.exchange("DELETE", request_headers=hdrs())
    assert not w.end().analyze().facts.open_ended


def test_stdio_session_is_never_open_ended() -> None:
    w = Wire.initialized()
    w.call(2)
    assert not w.end().analyze().facts.open_ended


# ------------------------------------------------------------------------------ defect 20
def test_header_mismatch_code_on_stdio_is_not_explained_by_headers() -> None:
    w = Wire.modern()
    w.request("tools/call", 2, {"name": "echo", "arguments": {}, "_meta": envelope()})
    w.error(2, -32020, "bad thing")
    a = w.end().analyze()
    f = next(f for f in a.findings if f.exchange is not None)
    assert "HTTP headers disagree with the JSON-RPC body" not in f.detail, f.detail
    assert "stdio session has no headers" in f.detail
    assert f.code != "mcp.header_mismatch"
    # Over HTTP the same code keeps its meaning.
    assert classify_error(-32020, transport="http").code == "mcp.header_mismatch"
    assert classify_error(-32020).code == "mcp.header_mismatch"


def test_unanswered_pings_are_not_errors_in_stats() -> None:
    w = Wire.initialized()
    w.request("ping", 2)
    w.request("ping", 3)
    a = w.end().analyze()
    [st] = [s for s in method_stats(a.exchanges).values() if s.method == "ping"]
    assert st.unanswered == 2 and st.errors == 0
    assert st.error_rate == 0.0
    assert st.as_dict()["error_rate"] == 0.0


def test_error_rate_counts_errors_among_answered_requests() -> None:
    w = Wire.initialized()
    w.call(2)
    w.request("tools/call", 3, {"name": "x", "arguments": {}})
    w.error(3, -32602, "Unknown tool: x")
    w.request("tools/call", 4, {"name": "y", "arguments": {}})  # never answered
    a = w.end().analyze()
    [st] = [s for s in method_stats(a.exchanges).values() if s.method == "tools/call"]
    assert (st.count, st.errors, st.unanswered) == (3, 1, 1)
    assert st.error_rate == 0.5


def test_one_list_of_outcomes() -> None:
    """Every outcome the analysis can give has a label and a badge style (CLI and dashboard)."""
    from dashboard.analysis import OUTCOME_STYLE
    from mcp_proxy.analysis.model import Outcome

    assert set(OUTCOME_STYLE) == {o.value for o in Outcome}
    assert all(o.label for o in Outcome)
    assert Outcome("no_response").unanswered and Outcome("error").answered
