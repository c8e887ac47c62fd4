"""Trigger and near miss of each task and extension finding (registered into ``CASES``)."""

from __future__ import annotations

from mcp_proxy.testing.factories import SERVER_CAPS, Wire
from tests.analysis.cases import case
from tests.analysis.task_wires import DONE, legacy, modern, task_fields


@case("tool.task_failed")
def _(t: bool) -> Wire:
    return modern(["working", "failed" if t else "completed"])


@case("task.unfinished")
def _(t: bool) -> Wire:
    return legacy(["working"] if t else ["working", "completed"])


@case("task.unknown_id")
def _(t: bool) -> Wire:
    return legacy(["working"], get_id="t-forged" if t else "t-1", notify="completed")


@case("task.not_advertised")
def _(t: bool) -> Wire:
    return legacy(["completed"], caps=SERVER_CAPS if t else None)


@case("task.poll_too_fast")
def _(t: bool) -> Wire:
    return legacy(["working"] * 4 + ["completed"], poll_ms=10 if t else 100)


@case("task.status_after_terminal")
def _(t: bool) -> Wire:
    return legacy(["completed", "working" if t else "completed"])


@case("extension.undeclared")
def _(t: bool) -> Wire:
    return modern(["completed"], server_caps=SERVER_CAPS if t else None)


@case("task.untracked")
def _(t: bool) -> Wire:
    """One more task open at once than the pairing follows (the near miss: exactly as many)."""
    from mcp_proxy.limits import MAX_TASKS_TRACKED

    w = legacy([])
    for i in range(MAX_TASKS_TRACKED + (0 if t else -1)):
        w.request("tools/call", f"c{i}", {"name": "research", "arguments": {}, "task": {}})
        w.result(f"c{i}", {"task": task_fields("completed", f"x{i}")})
    w.request("tasks/result", "r", {"taskId": "t-1"})
    w.result("r", DONE)
    return w.end()
