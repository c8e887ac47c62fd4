"""A task session exported: OTLP gives the task a span from creation to its terminal status,
with its status changes and polls as events; JSON Lines and HAR carry the frames the links are
derived from, so a re-imported recording links the task again."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.analysis.task_wires import legacy
from tests.helpers.cli import run_mcptape
from tests.recording.test_otlp import _as_proto, _attrs, _spans


def test_otlp_task_span_covers_the_task_with_polls_as_events(tmp_path: Path) -> None:
    url = "sqlite:///" + str(tmp_path / "t.db")
    wire = legacy(["working", "working", "failed"], poll_ms=200, error=True)
    sid = wire.record(url, name="task")
    out = tmp_path / "t.otlp.json"
    done = run_mcptape("export", sid, "--format", "otlp", "-o", str(out), "--db", url)
    assert done.returncode == 0, done.stderr
    spans = _spans(_as_proto(out.read_bytes()))
    call = next(s for s in spans if s.kind == Span.SPAN_KIND_CLIENT and s.name.startswith("tools"))
    task = next(s for s in spans if s.name == "task tools/call research")
    a = _attrs(task)
    assert a["mcp.task.id"] == "t-1" and a["mcp.task.status"] == "failed"
    assert a["mcp.task.polls"] == 3 and a["mcp.task.ended"] is True
    assert task.parent_span_id == call.span_id and task.trace_id == call.trace_id
    assert task.start_time_unix_nano == call.start_time_unix_nano
    assert task.end_time_unix_nano - task.start_time_unix_nano > 600_000_000  # three 200 ms polls
    assert call.end_time_unix_nano - call.start_time_unix_nano < 100_000_000  # the handle
    names = [e.name for e in task.events]
    assert names.count("mcp.task.poll") == 3
    statuses = [
        kv.value.string_value
        for e in task.events
        if e.name == "mcp.task.status"
        for kv in e.attributes
        if kv.key == "mcp.task.status"
    ]
    assert statuses == ["working", "failed"]
    assert task.status.code == Status.STATUS_CODE_ERROR


def test_jsonl_round_trip_keeps_the_task_links(tmp_path: Path) -> None:
    url = "sqlite:///" + str(tmp_path / "a.db")
    sid = legacy(["working", "completed"]).record(url, name="task")
    out = tmp_path / "t.mcptape.jsonl"
    assert run_mcptape("export", sid, "-o", str(out), "--db", url).returncode == 0
    other = str(tmp_path / "b.db")
    assert run_mcptape("import", str(out), "--db", other).returncode == 0
    shown = run_mcptape("show", "task", "--db", other, "-x", "--format", "json").stdout
    xs = [json.loads(line) for line in shown.splitlines() if line.strip()]
    call = next(x for x in xs if x["method"] == "tools/call")
    assert call["task"]["status"] == "completed" and call["task"]["polls"] == 2
    assert {x["task_of"] for x in xs if x["method"].startswith("tasks/")} == {call["request_seq"]}
