"""Tasks (both eras): the creating exchange and every exchange about its task linked into one
conversation, in the kept analysis and in the streaming passes (``stats``, ``show -x``)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_proxy.analysis.core import SessionPass
from mcp_proxy.analysis.facts import Decoder, session_facts
from mcp_proxy.analysis.taxonomy import decode_error_data
from mcp_proxy.testing.factories import CLIENT_CAPS, Wire
from tests.analysis.cases import CASES
from tests.analysis.streamed import pass_stats
from tests.analysis.task_wires import TASK_CAPS_2025, legacy, modern, task_fields
from tests.conftest import matrix


def _by_method(wire: Any) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    a = wire.analyze()
    out: dict[str, list[dict[str, Any]]] = {}
    for ex in a.exchanges:
        out.setdefault(ex.method, []).append(ex.as_dict())
    return a, out


def test_2025_task_links_polls_and_result_to_the_creating_call() -> None:
    a, by = _by_method(legacy(["working", "working", "completed"]))
    call = by["tools/call"][0]
    task = call["task"]
    assert task["id"] == "t-1"
    assert task["status"] == "completed"
    assert task["polls"] == 3
    assert [s["status"] for s in task["lifecycle"]] == ["working", "completed"]
    assert task["ended_seq"] == by["tasks/get"][-1]["response_seq"]
    assert task["duration_ms"] > call["latency_ms"]
    assert task["result"] == "ok"
    for ex in by["tasks/get"] + by["tasks/result"]:
        assert ex["task_of"] == call["request_seq"]
    assert "task_of" not in call and "task" not in by["tasks/get"][0]
    assert not {f.code for f in a.findings} & {"task.unfinished", "task.unknown_id"}


def test_2026_task_links_update_and_inlined_result() -> None:
    a, by = _by_method(modern(["working", "input_required", "completed"], update=True))
    call = by["tools/call"][0]
    assert call["task"]["status"] == "completed"
    assert call["task"]["updates"] == 1
    assert call["task"]["result"] == "ok"
    steps = [s["status"] for s in call["task"]["lifecycle"]]
    assert steps == ["working", "input_required", "completed"]
    assert by["tasks/update"][0]["task_of"] == call["request_seq"]
    assert {f.code for f in a.findings} == set()


def test_status_notification_joins_the_task() -> None:
    _, by = _by_method(legacy(["working"], notify="completed"))
    task = by["tools/call"][0]["task"]
    assert task["status"] == "completed" and task["notifications"] == 1
    assert by["tools/call"][0]["other_seqs"] == [task["ended_seq"]]


def test_stats_reports_task_durations_apart_from_handle_latency() -> None:
    wire = legacy(["working", "completed"], poll_ms=400)
    stats = pass_stats(wire, by_name=True)
    st = stats[("c2s", "tools/call", "research")]
    d = st.as_dict()
    assert d["latency_ms"]["max"] < 100
    assert d["task_ms"]["n"] == 1 and d["task_ms"]["max"] >= 800


def test_minus_32021_names_the_extension() -> None:
    data = {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    text = decode_error_data(-32021, data)
    assert "extension io.modelcontextprotocol/tasks" in text
    assert decode_error_data(-32021, {"requiredCapabilities": {"sampling": {}}}).endswith(
        "sampling"
    )


def test_a_server_can_ask_the_client_to_run_sampling_as_a_task() -> None:
    """2025-11-25: tasks run both ways; the client is the receiver here."""

    def wire(advertised: bool) -> Any:
        caps = dict(CLIENT_CAPS)
        if advertised:
            caps["tasks"] = {"requests": {"sampling": {"createMessage": {}}}}
        w = Wire.initialized(client_caps=caps)
        w.request("sampling/createMessage", 1, {"messages": [], "task": {}}, direction="s2c")
        w.result(1, {"task": task_fields("working", "c-9")}, direction="c2s")
        w.request("tasks/get", 2, {"taskId": "c-9"}, direction="s2c")
        w.result(2, task_fields("completed", "c-9"), direction="c2s")
        return w.end()

    a = wire(True).analyze()
    ask = next(ex for ex in a.exchanges if ex.method == "sampling/createMessage")
    assert ask.direction == "s2c" and ask.task is not None and ask.task.status == "completed"
    poll = next(ex for ex in a.exchanges if ex.method == "tasks/get")
    assert poll.task_of == ask.request_seq
    assert "task.not_advertised" not in {f.code for f in a.findings}
    assert "task.not_advertised" in {f.code for f in wire(False).analyze().findings}


def test_a_cancelled_task_ends_cancelled_and_is_not_unfinished() -> None:
    w = Wire.initialized(server_caps=TASK_CAPS_2025)
    w.request("tools/call", 2, {"name": "research", "arguments": {}, "task": {}})
    w.result(2, {"task": task_fields("working")})
    w.request("tasks/cancel", 3, {"taskId": "t-1"})
    w.result(3, task_fields("cancelled"))
    a = w.end().analyze()
    call = a.exchanges[1]
    assert call.task is not None and call.task.status == "cancelled"
    assert call.task.lifecycle_text() == "created → working → cancelled"
    assert a.exchanges[2].task_of == call.request_seq
    assert not {f.code for f in a.findings}


def test_hostile_task_shapes_do_not_raise_and_stay_small() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "r", "arguments": {}, "task": [1]})
    w.result(2, {"task": {"taskId": "k" * 100_000, "status": "s" * 100_000, "pollInterval": "x"}})
    w.request("tools/call", 3, {"name": "r", "arguments": {}, "task": {}})
    w.result(3, {"task": {"taskId": 5, "status": None}})
    w.request("tasks/list", 4)
    w.result(4, {"tasks": 7})
    w.request("tasks/get", 5, {"taskId": ["x"]})
    w.result(5, {"status": {"a": 1}, "result": "no", "error": 3})
    w.notify("notifications/tasks/status", {"taskId": None}, direction="s2c")
    w.request("tasks/result", 6, {"taskId": "k" * 100_000})
    w.error(6, -32603, None)  # type: ignore[arg-type]
    a = w.end().analyze()
    call = a.exchanges[1]
    assert call.task is not None and len(call.task.id) == 256
    assert all(len(st) <= 256 for st, _ in call.task.lifecycle)
    assert a.exchanges[-1].task_of == call.request_seq


# task.untracked (a session past MAX_TASKS_TRACKED, ~3 s) under --full; its finding's trigger
# and near miss stay in the default run's catalogue tests (tests/analysis/test_findings.py).
@pytest.mark.parametrize(
    "code",
    matrix(
        sorted(c for c in CASES if c.startswith(("task.", "extension."))),
        keep={c for c in CASES if c != "task.untracked"},
    ),
)
def test_the_streaming_pass_finds_what_the_kept_analysis_finds(code: str) -> None:
    """``check`` and ``show -x`` keep no exchange (the creating call is long answered when its
    task ends): the same findings and the same task on the creating call."""
    for build in CASES[code]:
        w = build()
        kept = w.analyze()
        d = Decoder()
        d.feed_frames(w.frames)
        seen: list[Any] = []
        one = SessionPass(
            session_facts(d.msgs, w.session, {}), {}, d.injected, keep=False, also=[_Keep(seen)]
        )
        one.feed_many(d.msgs)
        streamed = one.finish(w.session, d.frames)
        assert [f.as_dict() for f in streamed.findings] == [f.as_dict() for f in kept.findings]
        tasks = [ex.task.as_dict() for ex in kept.exchanges if ex.task is not None]
        assert [ex.task.as_dict() for ex in seen if ex.task is not None] == tasks


class _Keep:
    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    def reads_messages(self) -> bool:
        return False

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Any) -> None:
        pass

    def exchange(self, ex: Any) -> None:
        self.seen.append(ex)

    def finish(self) -> None:
        pass


ERROR_RESULT = {"content": [{"type": "text", "text": "disk full"}], "isError": True}


@pytest.mark.parametrize("first", ["poll", "result"])
def test_2025_is_error_result_is_one_failed_task_finding(first: str) -> None:
    """2025-11-25: a tool call whose result has isError ends its task ``failed`` — one
    tool.task_failed on the tool (not a second tool.error_result), whether a poll saw
    ``failed`` first or ``tasks/result`` was the first to tell (then its text is the reason)."""
    if first == "poll":
        w = legacy(["working", "failed"], result=ERROR_RESULT)
    else:
        w = Wire.initialized(server_caps=TASK_CAPS_2025)
        w.request("tools/call", 2, {"name": "research", "arguments": {}, "task": {}})
        w.result(2, {"task": task_fields("working")})
        w.request("tasks/result", 3, {"taskId": "t-1"})
        w.result(3, ERROR_RESULT)
        w = w.end()
    a, by = _by_method(w)
    task = by["tools/call"][0]["task"]
    assert task["status"] == "failed" and task["result"] == "tool_error"
    codes = [f.code for f in a.findings]
    assert codes == ["tool.task_failed"], codes
    assert "research" in a.findings[0].title
    assert ("disk full" in a.findings[0].title) == (first == "result")
    assert by["tools/call"][0]["error_class"] == "tool.task_failed"


def test_2026_completed_task_with_is_error_result_is_a_tool_error() -> None:
    """SEP-2663: a tool error is a completed task whose inlined result has isError."""
    a, by = _by_method(modern(["working", "completed"], inline={**ERROR_RESULT}))
    assert by["tools/call"][0]["task"]["status"] == "completed"
    assert [f.code for f in a.findings] == ["tool.error_result"]
