"""Pairing, latency, notification attachment and MRTR chains on hand-built sessions."""

from __future__ import annotations

from mcp_proxy.analysis.facts import decode
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import ANSWER, ASK, DONE, http_init, mrtr


def by_seq(a, seq):  # type: ignore[no-untyped-def]
    return next(e for e in a.exchanges if e.request_seq == seq)


def test_ids_pair_per_direction_and_by_json_type() -> None:
    w = Wire.initialized()
    r1 = w.request("tools/list", 1)  # host id 1 (after initialize id 1 completed: a reuse)
    r2 = w.request("roots/list", 1, direction="s2c")  # the server's own id 1
    r3 = w.request("prompts/list", "1")  # a string "1" is another id
    w.result("1", {"prompts": []})
    w.result(1, {"roots": []}, direction="c2s")
    w.result(1, {"tools": []})
    a = w.end().analyze()
    assert by_seq(a, r1["seq"]).method == "tools/list" and by_seq(a, r1["seq"]).outcome == "ok"
    assert by_seq(a, r2["seq"]).direction == "s2c" and by_seq(a, r2["seq"]).response_seq == 8
    assert by_seq(a, r3["seq"]).response_seq == 7
    codes = {f.code for f in a.findings}
    assert "exchange.unknown_response" not in codes and "exchange.id_reused_in_flight" not in codes
    assert "exchange.id_reused" in codes  # host id 1 was used by initialize already


def test_latency_is_measured_on_the_monotonic_clock() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}})
    w.wait(250)
    w.result(2, {"content": []})
    ex = by_seq(w.end().analyze(), 4)
    assert 250 <= ex.latency_ms < 252


def test_notifications_attach_to_their_request() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}, "_meta": {"progressToken": "p"}})
    w.request("tools/call", 3, {"name": "hang", "arguments": {}})
    p1 = w.progress("p", 1, 2)
    log = w.log("two requests in flight: this log belongs to neither for sure")
    w.result(2, {"content": []})
    lone = w.log("only 3 is in flight now")
    cancel = w.cancel(3)
    a = w.end().analyze()
    two, three = by_seq(a, 4), by_seq(a, 5)
    assert list(two.progress_seqs) == [p1["seq"]] and not two.log_seqs
    assert list(three.log_seqs) == [lone["seq"]] and three.cancel_seq == cancel["seq"]
    assert three.outcome == "cancelled"
    assert a.unattached_logs == 1 and log["seq"] not in two.log_seqs


def test_logs_on_an_sse_stream_belong_to_that_post() -> None:
    w = Wire(transport="http")
    sse = [["content-type", "text/event-stream"]]
    h1 = w.exchange(response_headers=sse)
    h2 = w.exchange(response_headers=sse)
    w.request(
        "tools/call",
        1,
        {"name": "a", "arguments": {}, "_meta": envelope(log_level="debug")},
        http=h1,
    )
    w.request("tools/call", 2, {"name": "b", "arguments": {}, "_meta": envelope()}, http=h2)
    on_b = w.log("rides b's stream", channel="sse", http=h2)
    on_a = w.log("rides a's stream", channel="sse", http=h1)
    w.result(1, {"content": [], "resultType": "complete"}, channel="sse", http=h1)
    w.result(2, {"content": [], "resultType": "complete"}, channel="sse", http=h2)
    a = w.end().analyze()
    assert list(by_seq(a, 1).log_seqs) == [on_a["seq"]]
    assert list(by_seq(a, 2).log_seqs) == [on_b["seq"]]
    # b did not opt in to logs, a did: only the log on b's stream breaks the rule.
    opt = [f for f in a.findings if f.code == "log.without_opt_in"]
    assert len(opt) == 1 and opt[0].frame_seqs == [on_b["seq"]]


def test_modern_http_pairs_by_post_when_ids_collide() -> None:
    w = Wire(transport="http")
    h1, h2 = w.exchange(), w.exchange()
    w.request("tools/call", 1, {"name": "a", "arguments": {}, "_meta": envelope()}, http=h1)
    w.request("tools/call", 1, {"name": "b", "arguments": {}, "_meta": envelope()}, http=h2)
    w.result(1, {"content": [{"type": "text", "text": "b"}], "resultType": "complete"}, http=h2)
    w.result(1, {"content": [{"type": "text", "text": "a"}], "resultType": "complete"}, http=h1)
    a = w.end().analyze()
    assert [(e.name, e.response_seq) for e in a.exchanges] == [("a", 4), ("b", 3)]
    assert not [f for f in a.findings if f.code.startswith("exchange.")]


def test_a_null_id_error_pairs_through_its_http_exchange() -> None:
    w = http_init()
    hid = w.exchange(
        status=400,
        request_headers=[["mcp-session-id", "s1"], ["mcp-protocol-version", "2025-11-25"]],
    )
    w.request("tools/call", 2, {"name": "echo", "arguments": {}}, http=hid)
    w.error(None, -32600, "Bad Request: Missing session ID", http=hid)
    ex = by_seq(w.end().analyze(), 4)
    assert ex.outcome == "error" and ex.error_code == -32600


def test_batches_are_paired_element_by_element() -> None:
    w = Wire.initialized("2025-03-26")
    w.frame(
        "c2s",
        [
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        ],
    )
    w.frame("s2c", [{"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}])
    a = w.end().analyze()
    assert [(e.method, e.outcome) for e in a.exchanges][-1] == ("tools/list", "ok")
    assert not a.findings


def test_mrtr_rounds_chain_into_one_conversation() -> None:
    a = mrtr(
        [
            ({}, ASK),
            (ANSWER, dict(ASK, requestState="st-2", inputRequests=None)),
            (dict(requestState="st-2"), DONE),
        ]
    )
    [chain] = a.analyze().chains
    assert chain.outcome == "complete" and len(chain.exchanges) == 3
    rounds = [a.analyze().exchanges[i].round for i in chain.exchanges]
    assert rounds == [1, 2, 3]


def test_mrtr_without_request_state_links_by_method_and_name() -> None:
    ask = {k: v for k, v in ASK.items() if k != "requestState"}
    answer = {"inputResponses": ANSWER["inputResponses"]}
    an = mrtr([({}, ask), (answer, DONE)]).analyze()
    assert [c.outcome for c in an.chains] == ["complete"] and not an.findings


def test_cross_direction_stamping_jitter_is_repaired() -> None:
    """The relay stamps after forwarding, per direction: an answer can be recorded first."""
    w = Wire.modern()
    w.request("tools/call", 2, {"name": "confirm", "arguments": {}, "_meta": envelope()})
    # The retry (host) was stamped 0.2 ms before the input_required result it answers.
    retry = w.request(
        "tools/call", 3, {"name": "confirm", "arguments": {}, "_meta": envelope(), **ANSWER}
    )
    w.result(2, ASK)
    # A response recorded before its request.
    w.result(4, {"tools": [], "resultType": "complete"})
    w.request("tools/list", 4, {"_meta": envelope()})
    w.result(3, DONE)
    a = w.end().analyze()
    assert not a.findings, [(f.code, f.title) for f in a.findings]
    assert [c.outcome for c in a.chains] == ["complete"]
    assert by_seq(a, retry["seq"]).round == 2
    assert by_seq(a, 7).latency_ms == 0  # never negative


def test_the_repair_window_is_bounded() -> None:
    w = Wire.initialized()
    w.result(9, {"tools": []})
    w.wait(500)  # far beyond any scheduling jitter: a genuine unknown response
    w.request("tools/list", 9)
    codes = {f.code for f in w.end().analyze().findings}
    assert {"exchange.unknown_response", "exchange.no_response"} <= codes


def test_decode_accepts_named_rows() -> None:
    from collections import namedtuple

    w = Wire.initialized()
    cols = (
        "seq",
        "ts",
        "mono_ns",
        "direction",
        "channel",
        "kind",
        "method",
        "msg_id",
        "error_code",
        "size",
        "complete",
        "partial_parse",
        "raw",
        "http_exchange_id",
    )
    Row = namedtuple("Row", cols)  # type: ignore[misc]
    rows = [Row(*(f[c] for c in cols)) for f in w.frames]
    msgs = decode(rows)
    assert [m.method for m in msgs] == [f["method"] for f in w.frames]
    assert msgs[0].params["protocolVersion"] == "2025-11-25"
    # Reordered columns are mapped by name.
    Rev = namedtuple("Rev", tuple(reversed(cols)))  # type: ignore[misc]
    rev = [Rev(*(f[c] for c in reversed(cols))) for f in w.frames]
    assert [m.seq for m in decode(rev)] == [1, 2, 3]


def test_huge_and_broken_frames_do_not_break_pairing() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    row = w.result(2, {"content": []})
    row["partial_parse"] = True  # classified from head and tail only (a 64 MiB frame)
    w.noise(b"\xff\xfe\n")
    a = w.end().analyze()
    assert by_seq(a, 4).outcome == "ok"


def test_a_log_stamped_before_its_request_is_not_blamed_on_another() -> None:
    w = Wire.modern()
    w.request("tools/call", 2, {"name": "quiet", "arguments": {}, "_meta": envelope()})
    log = w.log("belongs to request 3, which opted in")
    w.request(
        "tools/call", 3, {"name": "chatty", "arguments": {}, "_meta": envelope(log_level="info")}
    )
    w.result(3, {"content": [], "resultType": "complete"})
    w.result(2, {"content": [], "resultType": "complete"})
    a = w.end().analyze()
    assert "log.without_opt_in" not in {f.code for f in a.findings}, log
    w2 = Wire.modern()
    w2.request("tools/call", 2, {"name": "quiet", "arguments": {}, "_meta": envelope()})
    w2.log("nobody asked")
    w2.wait(500)
    w2.request(
        "tools/call", 3, {"name": "chatty", "arguments": {}, "_meta": envelope(log_level="info")}
    )
    assert "log.without_opt_in" in w2.end().codes()


def test_findings_are_capped_per_code_with_a_fold() -> None:
    w = Wire.initialized()
    for i in range(2, 82):  # 80 requests nobody answers
        w.request("tools/call", i, {"name": "hang", "arguments": {}})
    found = [f for f in w.end().analyze().findings if f.code == "exchange.no_response"]
    assert len(found) == 51
    fold = found[-1]
    assert fold.title.endswith("30 more like the above") and len(fold.frame_seqs) == 30
