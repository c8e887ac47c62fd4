"""Tasks: the call that created a task, its polls, updates, status notifications, cancel and
result, linked into one conversation (both eras), and the findings only that link can tell.

- **2025-11-25** (core, ``capabilities.tasks``): a request carries ``params.task``; the receiver
  answers ``{"task": {taskId, status, pollInterval, …}}``; ``tasks/get`` polls (the Task's fields
  flat in the result), ``tasks/result`` returns the underlying result or error once the task
  ended, ``tasks/list``, ``tasks/cancel``, ``notifications/tasks/status``; messages about a task
  carry ``_meta["io.modelcontextprotocol/related-task"]``. Either side can be the receiver.
- **2026-07-28** (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): a ``tools/call``
  answered ``resultType: "task"`` with the Task's fields; ``tasks/get`` polls and, once
  ``completed``/``failed``, inlines the ``result``/``error``; ``input_required`` carries
  ``inputRequests`` answered with ``tasks/update``; ``tasks/cancel``. Both sides declare the
  extension (``capabilities.extensions``; the client per request in its ``_meta`` envelope).

:class:`Tasks` is part of the one pairing (:class:`~mcp_proxy.analysis.exchanges.Pairing` feeds
it each request, response and task notification): it sets :attr:`Exchange.task` on the
creating exchange and :attr:`Exchange.task_of` on each exchange about the task, and follows at
most :data:`~mcp_proxy.limits.MAX_TASKS_TRACKED` tasks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from mcp_proxy.analysis.ends import named
from mcp_proxy.analysis.model import (
    ERA_INITIALIZE,
    META,
    TASK_TERMINAL,
    Exchange,
    FindingSink,
    Msg,
    Outcome,
    SessionFacts,
    Task,
    latency_ms,
)
from mcp_proxy.bounded import remember
from mcp_proxy.limits import MAX_SEQS, MAX_TASKS_TRACKED, TASK_STATUSES_KEPT, TASK_TEXT_CHARS

#: The tasks extension's identifier (2026-07-28, SEP-2663).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: The ``_meta`` key that ties a message to a task (2025-11-25).
RELATED_TASK = META + "related-task"
#: The methods about one task, by its ``taskId``.
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"})
#: Task status notifications (2025-11-25 ``notifications/tasks/status``; the extension's push).
TASK_NOTIFICATIONS = frozenset({"notifications/tasks/status", "notifications/tasks"})
#: Where a 2025-11-25 receiver advertises task support for a request method.
_CAPABILITY = {
    "tools/call": ("tools", "call"),
    "sampling/createMessage": ("sampling", "createMessage"),
    "elicitation/create": ("elicitation", "create"),
}
#: Polls this much faster than the pollInterval asked for count as too fast …
_FAST_SHARE = 0.5
#: … and this many of them for one task make a finding.
_FAST_POLLS = 3


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    """A task id or status as kept: a string, at most TASK_TEXT_CHARS characters."""
    return value[:TASK_TEXT_CHARS] if isinstance(value, str) else None


def _fields(result: dict[str, Any]) -> dict[str, Any]:
    """A Task's fields in a result: nested under ``task`` (2025-11-25, early drafts) or flat."""
    nested = result.get("task")
    return nested if isinstance(nested, dict) and "taskId" in nested else result


def _error_text(result: dict[str, Any]) -> str | None:
    """The first text block of an ``isError`` tool result (for a finding's title), if any."""
    if result.get("isError") is not True or not isinstance(result.get("content"), list):
        return None
    for block in result["content"]:
        text = _dict(block).get("text")
        if isinstance(text, str):
            return text[:TASK_TEXT_CHARS]
    return None


def _interval(fields: dict[str, Any]) -> float | None:
    for key in ("pollInterval", "pollIntervalMs"):
        v = fields.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _declares(caps: dict[str, Any] | None) -> bool:
    return isinstance(caps, dict) and TASKS_EXTENSION in _dict(caps.get("extensions"))


class _Tracked:
    __slots__ = ("creator", "reported", "task")

    def __init__(self, task: Task, creator: Exchange) -> None:
        self.task = task
        self.creator = creator
        #: the once-per-task findings already written
        self.reported: set[str] = set()


class Tasks:
    """The tasks of one session, followed as the pairing handles their messages."""

    def __init__(
        self,
        facts: SessionFacts,
        sink: FindingSink,
        on_end: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.facts = facts
        self.sink = sink
        #: called with the creating exchange once its task reached a terminal status
        self.on_end = on_end
        self.by_id: OrderedDict[str, _Tracked] = OrderedDict()
        #: ids a tasks/list answer named (tasks created before this recording began)
        self.listed: OrderedDict[str, None] = OrderedDict()
        #: (method, sides) already reported as using the tasks extension undeclared
        self.undeclared: set[tuple[str, tuple[str, ...]]] = set()
        #: tasks forgotten past MAX_TASKS_TRACKED, and the creating requests of the first ones
        self.forgotten = 0
        self.forgotten_seqs: list[int] = []

    # ------------------------------------------------------------------ requests
    def request(self, ex: Exchange, m: Msg) -> None:
        """A request: about a task (``taskId``, ``related-task``) or asking for one."""
        p = m.params
        if ex.method in TASK_METHODS:
            tid = _text(p.get("taskId"))
            if tid is not None:
                self._about(ex, m, tid)
            return
        if self.by_id:  # (a related-task id names a task only once one was created)
            rel = _text(_dict(_dict(p.get("_meta")).get(RELATED_TASK)).get("taskId"))
            if rel is not None and rel in self.by_id:
                ex.task_of = self.by_id[rel].task.created_seq
        if self.facts.era == ERA_INITIALIZE and isinstance(p.get("task"), dict):
            self._augmented(ex, m)

    def _about(self, ex: Exchange, m: Msg, tid: str) -> None:
        if self.facts.modern:
            self._extension_declared(ex, m)
        t = self.by_id.get(tid)
        if t is None:
            if tid not in self.listed and not self.forgotten:
                self.sink.add(
                    "task.unknown_id",
                    f"{ex.method} for task {tid}, which no request of this session created",
                    "No answer in this session created a task with this id (nor did a tasks/list"
                    " name it): the requestor polls, cancels or reads a task it never got.",
                    [m.seq],
                    exchange=ex.index,
                )
            return
        task = t.task
        ex.task_of = task.created_seq
        if ex.method == "tasks/update":
            task.updates += 1
        elif ex.method == "tasks/get":
            task.polls += 1
            self._poll_rate(t, ex, m)

    def _poll_rate(self, t: _Tracked, ex: Exchange, m: Msg) -> None:
        task = t.task
        last = task.last_poll_mono
        task.last_poll_mono = m.mono_ns
        if task.ended or task.poll_interval_ms is None or last is None:
            return
        gap = latency_ms(last, m.mono_ns)
        if gap >= task.poll_interval_ms * _FAST_SHARE:
            return
        task.fast_polls += 1
        if task.fast_polls == _FAST_POLLS and "fast" not in t.reported:
            t.reported.add("fast")
            self.sink.add(
                "task.poll_too_fast",
                f"task {task.id} polled {gap:.1f} ms after the previous poll; pollInterval"
                f" asks {task.poll_interval_ms:g} ms",
                f"{_FAST_POLLS} polls came sooner than half the pollInterval the receiver"
                " suggested; requestors should respect it.",
                [task.created_seq, m.seq],
                exchange=t.creator.index,
            )

    def _augmented(self, ex: Exchange, m: Msg) -> None:
        """2025-11-25: a task-augmented request must be one its receiver advertised."""
        where = _CAPABILITY.get(ex.method)
        caps = self.facts.server_caps if ex.direction == "c2s" else self.facts.client_caps
        if caps is None:
            return  # (the handshake is not in the recording: nothing to compare)
        tasks = _dict(caps.get("tasks"))
        ok = where is not None and where[1] in _dict(_dict(tasks.get("requests")).get(where[0]))
        if ok:
            return
        receiver = "server" if ex.direction == "c2s" else "client"
        self.sink.add(
            "task.not_advertised",
            f"{ex.method}{named(ex)} asked for a task the {receiver} did not advertise",
            f"The request carries params.task, but the {receiver}'s capabilities.tasks.requests"
            f" has no {'.'.join(where) if where else ex.method}.",
            [m.seq] + ([self.facts.server_caps_seq] if self.facts.server_caps_seq else []),
            exchange=ex.index,
        )

    def _extension_declared(self, ex: Exchange, m: Msg) -> None:
        """2026-07-28: a tasks/* method is the extension's; both sides must declare it
        (reported once per method and side that did not)."""
        client = _dict(m.meta.get(META + "clientCapabilities"))
        missing = []
        if META + "clientCapabilities" in m.meta and not _declares(client):
            missing.append("the client (this request's clientCapabilities)")
        if self.facts.server_caps is not None and not _declares(self.facts.server_caps):
            missing.append("the server (server/discover capabilities)")
        key = (ex.method, tuple(missing))
        if not missing or key in self.undeclared:
            return
        self.undeclared.add(key)
        self.sink.add(
            "extension.undeclared",
            f"{ex.method} used without {' and '.join(missing)} declaring {TASKS_EXTENSION}",
            f"{ex.method} belongs to the {TASKS_EXTENSION} extension; an extension's methods"
            " may be used only when both sides declared it in capabilities.extensions.",
            [m.seq],
            exchange=ex.index,
        )

    # ------------------------------------------------------------------ responses
    def response(self, ex: Exchange, m: Msg) -> None:
        """An answer: a task handle, a task's status, its result."""
        if ex.method in TASK_METHODS:
            if ex.task_of is not None:
                self._method_answer(ex, m)
            return
        if ex.method == "tasks/list":
            self._listed(m)
            return
        result = m.result
        if result is None:
            return
        fields = _fields(result)
        tid = _text(fields.get("taskId"))
        handle = result.get("resultType") == "task" or ("task" in result and fields is not result)
        if not handle or not isinstance(tid, str):
            return
        self._created(ex, m, tid, fields)

    def _created(self, ex: Exchange, m: Msg, tid: str, fields: dict[str, Any]) -> None:
        task = Task(tid, ex.request_seq, ex.request_mono_ns, poll_interval_ms=_interval(fields))
        task.last_poll_mono = m.mono_ns
        ex.task = task
        t = _Tracked(task, ex)
        self.by_id[tid] = t
        if len(self.by_id) > MAX_TASKS_TRACKED:
            _, old = self.by_id.popitem(last=False)  # (O(1), as remember: the oldest goes)
            self.forgotten += 1
            if len(self.forgotten_seqs) < MAX_SEQS:
                self.forgotten_seqs.append(old.task.created_seq)
        meta = ex.request.meta if ex.request is not None else {}
        if self.facts.modern and META + "clientCapabilities" in meta:
            if not _declares(_dict(meta.get(META + "clientCapabilities"))):
                self.sink.add(
                    "task.not_advertised",
                    f"{ex.method}{named(ex)} answered with a task the client did not opt in to",
                    f"The server answered resultType task, but the request's clientCapabilities"
                    f" do not declare {TASKS_EXTENSION}; a server must not create a task for a"
                    " request that did not opt in.",
                    [ex.request_seq, m.seq],
                    exchange=ex.index,
                )
        self._status(t, _text(fields.get("status")) or "working", m)

    def _listed(self, m: Msg) -> None:
        items = (m.result or {}).get("tasks")
        for item in items if isinstance(items, list) else ():
            tid = _text(_dict(item).get("taskId"))
            if tid is not None and tid not in self.by_id:
                remember(self.listed, tid, None, MAX_TASKS_TRACKED)

    def _method_answer(self, ex: Exchange, m: Msg) -> None:
        tid = _text(ex.request.params.get("taskId")) if ex.request is not None else None
        t = self.by_id.get(tid) if tid is not None else None
        if t is None:
            return
        if m.kind == "error":
            if ex.method == "tasks/result":
                self._result(t, m, "error", ex.error_message)
                if not t.task.ended:
                    self._status(t, "failed", m)
            return
        result = m.result or {}
        if ex.method == "tasks/result":
            is_error = result.get("isError") is True
            self._result(t, m, "tool_error" if is_error else "ok", _error_text(result))
            if not t.task.ended:
                # 2025-11-25: a tool call whose result has isError ended its task failed.
                self._status(t, "failed" if is_error else "completed", m)
            return
        status = _text(result.get("status"))
        if status is not None:
            self._status(t, status, m)
        interval = _interval(result)
        if interval is not None:
            t.task.poll_interval_ms = interval
        inline = result.get("result")
        if isinstance(inline, dict):
            kind = "tool_error" if inline.get("isError") is True else "ok"
            self._result(t, m, kind, _error_text(inline))
        err = result.get("error")
        if isinstance(err, dict):
            msg = err.get("message")
            self._result(t, m, "error", msg if isinstance(msg, str) else None)

    def _result(self, t: _Tracked, m: Msg, kind: str, message: str | None) -> None:
        task, creator = t.task, t.creator
        if task.result is not None:
            return
        task.result = kind
        if kind == "tool_error" and (
            task.status == "failed" or not (task.ended or self.facts.modern)
        ):
            # The task failed (or, 2025-11-25, ends failed with this result): one finding,
            # tool.task_failed, not a second tool.error_result for the same failure.
            self._failed(t, m, message)
        elif kind == "tool_error":
            creator.error_class = "tool.error_result"
            self.sink.add(
                "tool.error_result",
                f"tool {creator.name or '?'} reported an error (task {task.id})",
                "The task's result has isError: true: the tool ran and failed; this is not a"
                " protocol error.",
                [creator.request_seq, m.seq],
                exchange=creator.index,
            )
        elif kind == "error":
            self._failed(t, m, message)

    def _failed(self, t: _Tracked, m: Msg, message: str | None) -> None:
        if "failed" in t.reported:
            return
        t.reported.add("failed")
        creator = t.creator
        creator.error_class = "tool.task_failed"
        self.sink.add(
            "tool.task_failed",
            f"{creator.method}{named(creator)}: task {t.task.id} failed"
            + (f": {message}" if message else ""),
            "The task ended failed (or its result was a JSON-RPC error): the operation the"
            " request started did not complete.",
            [creator.request_seq, m.seq],
            exchange=creator.index,
        )

    # ------------------------------------------------------------------ notifications
    def notification(self, m: Msg) -> None:
        p = m.params
        tid = _text(p.get("taskId"))
        t = self.by_id.get(tid) if tid is not None else None
        if t is None:
            return
        t.task.notifications += 1
        if len(t.creator.other_seqs) < MAX_SEQS:
            t.creator.add("other_seqs", m.seq)
        status = _text(p.get("status"))
        if status is not None:
            self._status(t, status, m)

    # ------------------------------------------------------------------ statuses
    def _status(self, t: _Tracked, status: str, m: Msg) -> None:
        task = t.task
        if status == task.status and task.lifecycle:
            return
        if task.ended:
            if "backwards" not in t.reported:
                t.reported.add("backwards")
                self.sink.add(
                    "task.status_after_terminal",
                    f"task {task.id} went from {task.status} to {status}",
                    f"The task reached {task.status} in frame #{task.ended_seq}; completed,"
                    " failed and cancelled are terminal and must not change.",
                    [task.ended_seq or m.seq, m.seq],
                    exchange=t.creator.index,
                )
            return
        task.status = status
        if len(task.lifecycle) < TASK_STATUSES_KEPT:
            task.lifecycle.append((status, m.seq))
        else:
            task.changes_dropped += 1
        if status not in TASK_TERMINAL:
            return
        task.ended_seq = m.seq
        task.duration_ms = latency_ms(task.created_mono, m.mono_ns)
        if status == "failed":
            msg = m.params.get("statusMessage") if m.kind == "notification" else None
            if msg is None and m.result is not None:
                msg = m.result.get("statusMessage")
            self._failed(t, m, msg if isinstance(msg, str) else None)
        if self.on_end is not None:
            self.on_end(t.creator)

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        """Tasks still running when the session ended; tasks forgotten past the bound."""
        for t in self.by_id.values():
            task = t.task
            if task.ended or self.facts.live or t.creator.outcome is Outcome.PENDING:
                continue
            self.sink.add(
                "task.unfinished",
                f"task {task.id} of {t.creator.method}{named(t.creator)} still {task.status}"
                " when the session ended",
                f"The last status seen was {task.status} after {task.polls} poll(s); no"
                " terminal status (completed, failed, cancelled) was seen.",
                [task.created_seq] + [seq for _, seq in task.lifecycle[-1:]],
                exchange=t.creator.index,
            )
        if self.forgotten:
            self.sink.add(
                "task.untracked",
                f"{self.forgotten} task(s) not followed to their end",
                f"More than {MAX_TASKS_TRACKED} tasks were open at once; the oldest were"
                " forgotten and their later frames not linked.",
                self.forgotten_seqs,
            )
