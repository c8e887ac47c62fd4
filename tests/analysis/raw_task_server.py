"""A raw stdio MCP server that runs ``tools/call research`` as a task, speaking JSON lines by
hand so that each era's wire shape is exactly what the test wants.

``python -m tests.analysis.raw_task_server 2025|2026 [fail]``: the task stays ``working`` for
two polls, then ends ``completed`` (or ``failed``). A 2026-07-28 ``tasks/get`` whose
clientCapabilities do not declare the tasks extension is refused with -32021 naming it. 2025-11-25: initialize, params.task →
``{"task": {...}}``, ``tasks/get``, ``tasks/result`` (with the related-task ``_meta``),
``notifications/tasks/status`` at the end. 2026-07-28: server/discover declaring the tasks
extension, ``resultType: "task"``, ``tasks/get`` inlining the result (or error) once ended.
"""

from __future__ import annotations

import json
import sys
from typing import Any

EXT = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"


def _declares(msg: dict[str, Any]) -> bool:
    meta = msg.get("params", {}).get("_meta", {})
    caps = meta.get("io.modelcontextprotocol/clientCapabilities", {})
    return EXT in caps.get("extensions", {})


def main() -> int:
    era, fail = sys.argv[1], "fail" in sys.argv[2:]
    polls = 0
    out = sys.stdout

    def send(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg, separators=(",", ":")) + "\n")
        out.flush()

    def task(status: str) -> dict[str, Any]:
        t: dict[str, Any] = {
            "taskId": "task-7",
            "status": status,
            "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z",
        }
        # The Task's clock fields by era: the tasks extension (SEP-2663) says ttlMs and
        # pollIntervalMs, 2025-11-25 ttl and pollInterval.
        t |= (
            {"ttlMs": 60000, "pollIntervalMs": 1}
            if era == "2026"
            else {"ttl": 60000, "pollInterval": 1}
        )
        if status == "failed":
            t["statusMessage"] = "research crashed"
        return t

    end = "failed" if fail else "completed"
    done = {"content": [{"type": "text", "text": "42"}], "isError": False}
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            caps = {"tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": caps,
                        "serverInfo": {"name": "raw-tasks", "version": "1"},
                    },
                }
            )
        elif method == "server/discover":
            meta = {"io.modelcontextprotocol/serverInfo": {"name": "raw-tasks", "version": "1"}}
            result = {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}, "extensions": {EXT: {}}},
                "ttlMs": 0,
                "cacheScope": "private",
                "resultType": "complete",
                "_meta": meta,
            }
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "tools/call":
            if era == "2025":
                send({"jsonrpc": "2.0", "id": rid, "result": {"task": task("working")}})
            else:
                result = {"resultType": "task", **task("working")}
                send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "tasks/get" and era == "2026" and not _declares(msg):
            data = {"requiredCapabilities": {"extensions": {EXT: {}}}}
            error = {"code": -32021, "message": "Missing required client capability", "data": data}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
        elif method == "tasks/get":
            polls += 1
            status = "working" if polls <= 2 else end
            result = task(status)
            if era == "2026":
                result["resultType"] = "complete"
                if status == "completed":
                    result["result"] = {**done, "resultType": "complete"}
                elif status == "failed":
                    result["error"] = {"code": -32603, "message": "research crashed"}
            send({"jsonrpc": "2.0", "id": rid, "result": result})
            if era == "2025" and status == end:
                params = task(status)
                send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": params})
        elif method == "tasks/result":
            meta = {RELATED: {"taskId": "task-7"}}
            if fail:
                error = {"code": -32603, "message": "research crashed", "data": meta}
                send({"jsonrpc": "2.0", "id": rid, "error": error})
            else:
                send({"jsonrpc": "2.0", "id": rid, "result": {**done, "_meta": meta}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
