"""``mcptape record --otlp-endpoint``: a task's span is sent live too, as the export makes it.

The task presets (both eras) run behind a real ``mcptape record`` whose recorder sends spans to
a real OTLP/HTTP receiver (``tests/helpers/otlp.py``); an SDK client runs a task that completes,
one that fails and one it cancels. Each task gets its ``INTERNAL`` span under its creating
call's span — the same span ids, status, statuses and events as ``mcptape export`` gives the
recorded session afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from mcp_proxy.otel.live_tasks import LiveTasks
from mcp_proxy.otel.spans import ExchangeFacts
from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params
from mcp_proxy.testing.task_client import run_task, task_extensions
from tests.conftest import matrix
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.db import wait_until
from tests.helpers.otlp import Receiver, otlp_receiver
from tests.helpers.proxy import proxied

pytestmark = pytest.mark.timeout(120)

PRESETS = "tasks,tasks-failed,tasks-cancelled"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as rec:
        yield rec


def _live(params: StdioServerParameters, db: Path, endpoint: str) -> StdioServerParameters:
    """``mcptape record --otlp-endpoint URL --db DB --name tasks -- SERVER``."""
    wrapped = proxied(params, db, "tasks")
    args = list(wrapped.args)
    at = args.index("record") + 1
    return wrapped.model_copy(
        update={"args": [*args[:at], "--otlp-endpoint", endpoint, *args[at:]]}
    )


def _sent_tasks(rec: Receiver) -> dict[str, Any]:
    out = {}
    for _path, _ctype, msg in list(rec.received):
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    if sp.kind == Span.SPAN_KIND_INTERNAL and sp.name.startswith("task "):
                        out[sp.span_id.hex()] = _shape_pb(sp)
    return out


def _value(v: Any) -> Any:
    return (
        v.string_value
        if v.HasField("string_value")
        else (v.bool_value if v.HasField("bool_value") else v.int_value)
    )


def _shape_pb(sp: Span) -> dict[str, Any]:
    attrs = {kv.key: _value(kv.value) for kv in sp.attributes}
    return {
        "name": sp.name,
        "parent": sp.parent_span_id.hex(),
        "status": int(sp.status.code),
        "task": {k: v for k, v in attrs.items() if k.startswith("mcp.task.")},
        "events": [
            (e.name, e.time_unix_nano, {kv.key: _value(kv.value) for kv in e.attributes})
            for e in sp.events
        ],
        "start": sp.start_time_unix_nano,
        "end": sp.end_time_unix_nano,
    }


def _json_value(v: dict[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return v["boolValue"]
    return int(v.get("intValue", 0))


def _exported_tasks(path: Path) -> dict[str, Any]:
    out = {}
    doc = json.loads(path.read_bytes())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                if sp["kind"] != 1 or not sp["name"].startswith("task "):  # INTERNAL
                    continue
                attrs = {a["key"]: _json_value(a["value"]) for a in sp["attributes"]}
                out[sp["spanId"]] = {
                    "name": sp["name"],
                    "parent": sp.get("parentSpanId", ""),
                    "status": int(sp.get("status", {}).get("code", 0)),
                    "task": {k: v for k, v in attrs.items() if k.startswith("mcp.task.")},
                    "events": [
                        (
                            e["name"],
                            int(e["timeUnixNano"]),
                            {a["key"]: _json_value(a["value"]) for a in e["attributes"]},
                        )
                        for e in sp.get("events", [])
                    ],
                    "start": int(sp["startTimeUnixNano"]),
                    "end": int(sp["endTimeUnixNano"]),
                }
    return out


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"auto"}))
async def test_the_live_exporter_sends_each_task_span(
    mode: str, tmp_path: Path, receiver: Receiver
) -> None:
    db = tmp_path / "tasks.db"
    extra = {} if mode == "legacy" else {"extensions": task_extensions()}
    target = _live(stdio_params(PRESETS), db, receiver.url)
    async with make_client(target, mode=mode, recorder=CallbackRecorder(), **extra) as client:
        done = await run_task(client, "research", {"duration": 0.06})
        failed = await run_task(client, "doomed", {"reason": "disk on fire"})
        stopped = await run_task(client, "endless", {}, cancel_after=1)
    assert (done.status, failed.status, stopped.status) == ("completed", "failed", "cancelled")
    assert wait_until(lambda: len(_sent_tasks(receiver)) == 3, timeout=20), _sent_tasks(receiver)
    sent = _sent_tasks(receiver)
    statuses = sorted(s["task"]["mcp.task.status"] for s in sent.values())
    assert statuses == ["cancelled", "completed", "failed"]
    assert all(s["task"]["mcp.task.ended"] is True for s in sent.values())
    assert sorted(s["status"] for s in sent.values()) == [0, 2, 2]  # UNSET, ERROR ×2
    # The same spans as the recorded session's export afterwards.
    (session,) = rdb.sessions(db)
    out = tmp_path / "after.otlp.json"
    assert run_mcptape("export", session["id"], "--db", str(db), "-o", str(out)).returncode == 0
    assert sent == {k: _until_end(v) for k, v in _exported_tasks(out).items()}


def _until_end(span: dict[str, Any]) -> dict[str, Any]:
    """An exported task span as the live one is sent: at the task's terminal status, so the
    polls after it (2025-11-25: the client's last tasks/get after tasks/result) are not in it."""
    events = [e for e in span["events"] if e[1] <= span["end"]]
    polls = sum(e[0] == "mcp.task.poll" for e in events)
    return {**span, "events": events, "task": {**span["task"], "mcp.task.polls": polls}}


def test_a_task_that_never_ends_is_sent_unended_and_events_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_proxy.otel import live_tasks

    monkeypatch.setattr(live_tasks, "OTLP_TASK_EVENTS", 4)
    monkeypatch.setattr(live_tasks, "OTLP_TASKS", 2)
    tasks = LiveTasks()

    def call(seq: int) -> ExchangeFacts:
        return ExchangeFacts("c2s", "tools/call", str(seq), seq, float(seq), None, "ok", "t")

    handle = {"result": {"resultType": "task", "taskId": "a", "status": "working"}}
    assert tasks.answer("s", call(1), {}, handle, 2, 2.0) == []
    for seq in range(3, 13):  # ten polls: four events kept, the rest counted
        tasks.request("s", "tasks/get", {"params": {"taskId": "a"}}, seq, float(seq))
    # Two more tasks: the oldest is sent as it stands, unended.
    tasks.answer(
        "s", call(20), {}, {"result": {"task": {"taskId": "b", "status": "working"}}}, 21, 21.0
    )
    (old,) = tasks.answer("s", call(30), {}, {"result": {"task": {"taskId": "c"}}}, 31, 31.0)
    creator, task = old
    assert creator.request_seq == 1 and task.id == "a" and task.end_ts is None
    assert task.polls == 10 and len(task.events) == 4 and task.events_dropped == 7
    # A session's end sends its open tasks unended.
    assert sorted(t.id for _, t in tasks.session_ended("s")) == ["b", "c"]
    assert tasks.open == {}
