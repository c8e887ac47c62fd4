"""Task sessions of both eras as recorded frames (MCP tasks: 2025-11-25 core, 2026-07-28 the
``io.modelcontextprotocol/tasks`` extension), for the pairing's links and the task findings."""

from __future__ import annotations

from typing import Any

from mcp_proxy.analysis.tasks import TASKS_EXTENSION
from mcp_proxy.testing.factories import CLIENT_CAPS, SERVER_CAPS, Wire, envelope

TASK_CAPS_2025: dict[str, Any] = {
    **SERVER_CAPS,
    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
}
EXT_CAPS: dict[str, Any] = {**SERVER_CAPS, "extensions": {TASKS_EXTENSION: {}}}
CLIENT_EXT_CAPS: dict[str, Any] = {**CLIENT_CAPS, "extensions": {TASKS_EXTENSION: {}}}
DONE = {"content": [{"type": "text", "text": "done"}], "isError": False}


def task_fields(status: str, tid: str = "t-1", interval: int = 100) -> dict[str, Any]:
    return {
        "taskId": tid,
        "status": status,
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:00Z",
        "ttl": 60000,
        "pollInterval": interval,
    }


def legacy(
    statuses: list[str],
    *,
    result: dict[str, Any] | None = None,
    error: bool = False,
    caps: dict[str, Any] | None = None,
    poll_ms: float = 100,
    get_id: str = "t-1",
    notify: str | None = None,
) -> Wire:
    """2025-11-25 over stdio: tools/call with params.task → CreateTaskResult, one tasks/get per
    status in ``statuses``, then tasks/result (``result`` or an error) when the last is terminal."""
    w = Wire.initialized(server_caps=TASK_CAPS_2025 if caps is None else caps)
    w.request("tools/call", 2, {"name": "research", "arguments": {}, "task": {"ttl": 60000}})
    w.result(2, {"task": task_fields("working")})
    rid = 3
    for st in statuses:
        w.wait(poll_ms)
        w.request("tasks/get", rid, {"taskId": get_id})
        w.result(rid, task_fields(st, get_id))
        rid += 1
    if notify is not None:
        w.notify("notifications/tasks/status", task_fields(notify), direction="s2c")
    if statuses and statuses[-1] in ("completed", "failed"):
        w.request("tasks/result", rid, {"taskId": get_id})
        meta = {"_meta": {"io.modelcontextprotocol/related-task": {"taskId": get_id}}}
        if error:
            w.error(rid, -32603, "research crashed")
        else:
            w.result(rid, {**(result or DONE), **meta})
    return w.end()


def modern(
    statuses: list[str],
    *,
    inline: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    opt_in: bool = True,
    server_caps: dict[str, Any] | None = None,
    poll_ms: float = 100,
    update: bool = False,
) -> Wire:
    """2026-07-28 over stdio: tools/call answered resultType task; tasks/get per status (a
    completed one inlines ``inline``, a failed one ``error``); ``update`` answers an
    input_required with tasks/update."""
    w = Wire.modern(server_caps=EXT_CAPS if server_caps is None else server_caps)
    caps = CLIENT_EXT_CAPS if opt_in else CLIENT_CAPS

    def env() -> dict[str, Any]:
        return envelope(caps=caps)

    w.request("tools/call", 2, {"name": "research", "arguments": {}, "_meta": env()})
    w.result(2, {"resultType": "task", **task_fields("working")})
    rid = 3
    for st in statuses:
        w.wait(poll_ms)
        w.request("tasks/get", rid, {"taskId": "t-1", "_meta": env()})
        res: dict[str, Any] = {"resultType": "complete", **task_fields(st)}
        if st == "completed":
            res["result"] = inline or {**DONE, "resultType": "complete"}
        elif st == "failed":
            res["error"] = error or {"code": -32603, "message": "research crashed"}
        elif st == "input_required":
            res["inputRequests"] = {"ok": {"method": "elicitation/create", "params": {}}}
        w.result(rid, res)
        rid += 1
        if st == "input_required" and update:
            w.request(
                "tasks/update",
                rid,
                {
                    "taskId": "t-1",
                    "inputResponses": {"ok": {"action": "accept", "content": {}}},
                    "_meta": env(),
                },
            )
            w.result(rid, {"resultType": "complete"})
            rid += 1
    return w.end()
