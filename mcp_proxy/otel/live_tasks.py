"""The tasks the live exporter follows (MCP tasks, both eras): a task's span once it ends.

The live exporter (:mod:`mcp_proxy.otel.live`) pairs requests and answers itself; this follows
the tasks their answers create, as the analysis does for the file export (``mcptape export
--format otlp``), so that the live task span is the export's: an answer carrying a task handle
(``{"task": {taskId, status, …}}``, 2025-11-25; ``{"resultType": "task", taskId, …}``,
2026-07-28) opens a task; a ``tasks/get`` request is a poll; a status in a ``tasks/get`` /
``tasks/cancel`` answer, a ``notifications/tasks/status`` or the end a ``tasks/result`` answer
gives (its error or ``isError``: failed) is a status change. At the first terminal status the
task is handed back to be sent; one its session outlives is sent unended when the session ends.

Bounded: at most :data:`~mcp_proxy.limits.OTLP_TASKS` open tasks (all sessions; the oldest is
sent unended past it) and :data:`~mcp_proxy.limits.OTLP_TASK_EVENTS` events kept per task (the
rest counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.limits import OTLP_TASK_EVENTS, OTLP_TASKS, TASK_TEXT_CHARS
from mcp_proxy.otel.spans import ExchangeFacts, TaskFacts

#: Task status notifications (2025-11-25; the extension's push).
STATUS_NOTIFICATIONS = frozenset({"notifications/tasks/status", "notifications/tasks"})
_ABOUT = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"})
_TERMINAL = frozenset({"completed", "failed", "cancelled"})

Ended = tuple[ExchangeFacts, TaskFacts]
"""A task to send: the exchange that created it, and the task."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value[:TASK_TEXT_CHARS] if isinstance(value, str) else None


@dataclass(slots=True)
class _Open:
    creator: ExchangeFacts
    id: str
    status: str = ""
    polls: int = 0
    events: list[tuple[float, str, int, str | None]] = field(default_factory=list)
    dropped: int = 0

    def event(self, ts: float, what: str, seq: int, status: str | None) -> None:
        if len(self.events) < OTLP_TASK_EVENTS:
            self.events.append((ts, what, seq, status))
        else:
            self.dropped += 1

    def facts(self, end_ts: float | None) -> TaskFacts:
        return TaskFacts(
            self.id,
            self.status,
            self.creator.request_ts,
            end_ts,
            self.polls,
            tuple(sorted(self.events, key=lambda e: (e[0], e[2]))),
            events_dropped=self.dropped,
        )


class LiveTasks:
    """Open tasks by (session, task id), oldest first; fed by the exporter's thread only."""

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], _Open] = {}

    def request(self, sid: str, method: str | None, msg: Any, seq: int, ts: float) -> None:
        """A ``tasks/get`` for an open task is one of its polls."""
        if method != "tasks/get":
            return
        task = self.open.get((sid, _text(_dict(_dict(msg).get("params")).get("taskId")) or ""))
        if task is not None:
            task.polls += 1
            task.event(ts, "poll", seq, None)

    def answer(
        self, sid: str, creator: ExchangeFacts, request: Any, msg: Any, seq: int, ts: float
    ) -> list[Ended]:
        """An answer (``msg``, parsed; None when not) to ``request``: a handle opens a task,
        an answer about a task may change its status. The tasks to send now."""
        body = _dict(msg)
        result, error = body.get("result"), body.get("error")
        if creator.method in _ABOUT:
            tid = _text(_dict(_dict(request).get("params")).get("taskId"))
            task = self.open.get((sid, tid or ""))
            if task is None:
                return []
            if creator.method == "tasks/result":
                bad = error is not None or _dict(result).get("isError") is True
                return self._status(sid, task, "failed" if bad else "completed", seq, ts)
            status = _text(_dict(result).get("status"))
            return self._status(sid, task, status, seq, ts) if status else []
        if not isinstance(result, dict):
            return []
        nested = result.get("task")
        fields = nested if isinstance(nested, dict) and "taskId" in nested else result
        tid = _text(fields.get("taskId"))
        if tid is None or (result.get("resultType") != "task" and fields is result):
            return []
        out: list[Ended] = []
        if len(self.open) >= OTLP_TASKS:
            out.extend(self._close(next(iter(self.open)), None))
        self.open[(sid, tid)] = _Open(creator, tid)
        task = self.open[(sid, tid)]
        return out + self._status(sid, task, _text(fields.get("status")) or "working", seq, ts)

    def notification(self, sid: str, msg: Any, seq: int, ts: float) -> list[Ended]:
        params = _dict(_dict(msg).get("params"))
        task = self.open.get((sid, _text(params.get("taskId")) or ""))
        status = _text(params.get("status"))
        return self._status(sid, task, status, seq, ts) if task and status else []

    def session_ended(self, sid: str) -> list[Ended]:
        """The session's tasks that never ended: sent unended."""
        out: list[Ended] = []
        for key in [k for k in self.open if k[0] == sid]:
            out.extend(self._close(key, None))
        return out

    def _status(self, sid: str, task: _Open, status: str, seq: int, ts: float) -> list[Ended]:
        if status == task.status:
            return []
        task.status = status
        task.event(ts, "status", seq, status)
        return self._close((sid, task.id), ts) if status in _TERMINAL else []

    def _close(self, key: tuple[str, str], end_ts: float | None) -> list[Ended]:
        task = self.open.pop(key)
        return [(task.creator, task.facts(end_ts))]
