"""Replaying task sessions: live task ids, and polling until the live task got as far.

A replay re-sends the recorded host frames, but a task's polls are timing: the live task may be
slower or faster than the recorded one. So, for each task the recording created:

- the live task id (from the live handle) replaces the recorded one in every ``tasks/*``
  request sent after it (a real server's ids are per run);
- before a recorded ``tasks/update`` the replay polls until the live task is
  ``input_required`` (it cannot answer a question not yet asked);
- after the task's last recorded ``tasks/get``, when that poll saw a terminal status, the
  replay polls on until the live task is terminal too, so its final state is there to compare.

The extra polls carry ids of their own (``mcptape-replay-poll-N``); the diff folds every task's
polls into its last (:func:`mcp_proxy.diff.fold_task_polls`), so only the final state counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.frames import id_key
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.replay.plan import messages

TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: Seconds between extra polls when the live handle advises none (and the most it may advise).
POLL_PAUSE = 0.05
MAX_POLL_PAUSE = 1.0


def _handle(result: Any) -> tuple[str, Any] | None:
    """(task id, advised poll interval ms: ``pollIntervalMs`` 2026-07-28, ``pollInterval``
    2025-11-25) of a task handle result, either era."""
    if not isinstance(result, dict):
        return None
    task = result if result.get("resultType") == "task" else result.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
        return None
    return task["taskId"], task.get("pollIntervalMs", task.get("pollInterval"))


@dataclass
class TaskPlan:
    """What the recording says about its tasks (pure, from the recorded frames)."""

    #: c2s request id of a task-creating call → the recorded task id it got.
    creators: dict[str, str] = field(default_factory=dict)
    #: c2s request id of each task's last recorded ``tasks/get`` → the status it saw.
    last_polls: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.creators


def task_plan(session: SessionRecording) -> TaskPlan:
    plan = TaskPlan()
    requests: dict[str, dict[str, Any]] = {}
    last: dict[str, str] = {}  # recorded task id → id of its last tasks/get
    statuses: dict[str, str] = {}  # c2s id of a tasks/get → the status it was answered with
    for f, msg in messages(session):
        if not isinstance(msg, dict) or msg.get("id") is None:
            continue
        rid = id_key(msg["id"]) or ""
        if f["direction"] == "c2s" and "method" in msg:
            requests[rid] = msg
            params = msg.get("params")
            task_id = params.get("taskId") if isinstance(params, dict) else None
            if msg["method"] == "tasks/get" and isinstance(task_id, str):
                last[task_id] = rid
        elif f["direction"] == "s2c" and "method" not in msg and rid in requests:
            method = requests[rid].get("method")
            result = msg.get("result")
            found = _handle(result) if method == "tools/call" else None
            if found is not None:
                plan.creators[rid] = found[0]
            elif method == "tasks/get" and isinstance(result, dict):
                statuses[rid] = str(result.get("status"))
    for rid in last.values():
        if rid in statuses:
            plan.last_polls[rid] = statuses[rid]
    return plan


@dataclass
class LiveTasks:
    """The live side of a replay's tasks: recorded → live ids, and what the last poll said."""

    plan: TaskPlan
    ids: dict[str, str] = field(default_factory=dict)
    pause: dict[str, float] = field(default_factory=dict)
    polls: int = 0

    def learn(self, responses: dict[str, dict[str, Any]]) -> None:
        """Take the live task ids from the live answers to the task-creating calls."""
        for rid, recorded in self.plan.creators.items():
            if recorded in self.ids or rid not in responses:
                continue
            found = _handle(responses[rid].get("result"))
            if found is None:
                continue
            self.ids[recorded] = found[0]
            advised = found[1]
            if isinstance(advised, int | float) and not isinstance(advised, bool) and advised > 0:
                self.pause[recorded] = min(float(advised) / 1000.0, MAX_POLL_PAUSE)

    def rewrite(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """``msg`` with the live task id, or ``None`` when nothing needs rewriting."""
        method = msg.get("method")
        params = msg.get("params")
        if not isinstance(method, str) or not method.startswith("tasks/"):
            return None
        if not isinstance(params, dict) or params.get("taskId") not in self.ids:
            return None
        live = self.ids[params["taskId"]]
        if live == params["taskId"]:
            return None
        return {**msg, "params": {**params, "taskId": live}}

    def poll(self, template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """An extra ``tasks/get`` like ``template`` (a recorded poll or update), with its id."""
        self.polls += 1
        rid = f"mcptape-replay-poll-{self.polls}"
        params = dict(template.get("params") or {})
        for key in ("inputResponses", "requestState"):
            params.pop(key, None)
        msg = {"jsonrpc": "2.0", "id": rid, "method": "tasks/get", "params": params}
        return id_key(rid) or rid, msg

    def pause_for(self, recorded_task: Any) -> float:
        return self.pause.get(recorded_task, POLL_PAUSE) if isinstance(recorded_task, str) else 0.0


__all__ = ["LiveTasks", "TaskPlan", "task_plan"]
