"""Client-side task driver for tests: create a task, poll it to the end, cancel it, answer it.

Works in both eras over any transport the SDK ``Client`` speaks (so through the real relays):

- **2026-07-28**: the client must declare the tasks extension — build it with
  ``make_client(..., extensions=task_extensions())``. :class:`TasksExtension` claims the
  ``resultType: "task"`` handle; with it a plain ``client.call_tool`` polls to the end on its
  own (:func:`_resolve`), and :func:`run_task` drives the steps itself: ``tasks/get`` until a
  terminal status, ``tasks/update`` with the answers of the client's callbacks when the task is
  ``input_required``, ``tasks/cancel`` on request.
- **2025-11-25** (``mode="legacy"``): ``tools/call`` with ``params.task``, ``tasks/get`` polls,
  then ``tasks/result`` (during which the server may send ``elicitation/create``, answered by
  the client's elicitation callback as usual).

SDK gap: ``mcp`` 2.3 validates a 2025-11-25 ``tools/call`` result as a ``CallToolResult`` and so
refuses a ``CreateTaskResult``; that one request is sent through the session's dispatcher
(``session._dispatcher.send_raw_request``, the SDK's own raw path, with the version header the
SDK would stamp). Every other request goes through ``ClientSession.send_request``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, TypeAdapter

from mcp_proxy.testing.tasks import EXTENSION_TASKS

__all__ = [
    "TaskHandle",
    "TaskRun",
    "TasksExtension",
    "create_task",
    "run_task",
    "task_extensions",
    "task_request",
]

TERMINAL = frozenset({"completed", "failed", "cancelled"})
_ANY: Any = TypeAdapter(dict[str, Any])
"""Task results as plain dicts (typed ``Any``: the SDK bounds its result types to models)."""
MAX_POLLS = 10_000
"""A driver that polls this often without an end gives up (the task never ends)."""


class TaskHandle(types.Result):
    """The 2026-07-28 ``resultType: "task"`` handle (flattened Task); other fields kept."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"  # type: ignore[assignment]
    task_id: str
    status: str


class _Params(types.RequestParams):
    model_config = ConfigDict(extra="allow")


class _TaskRequest(types.Request[_Params, str]):
    """Any ``tasks/*`` request (the SDK has no models for the 2026-07-28 ones)."""


def _request(method: str, **params: Any) -> _TaskRequest:
    return _TaskRequest(method=method, params=_Params.model_validate(params))


async def _send(session: ClientSession, method: str, **params: Any) -> dict[str, Any]:
    return await session.send_request(_request(method, **params), _ANY)


async def _answers(session: ClientSession, requests: dict[str, Any]) -> dict[str, Any]:
    """Answer 2026-07-28 ``inputRequests`` with the client's own callbacks."""
    adapter: TypeAdapter[Any] = TypeAdapter(types.InputRequest)
    out: dict[str, Any] = {}
    for key, raw in requests.items():
        request = adapter.validate_python(raw, by_name=False)
        reply = await session.dispatch_input_request(None, request)  # type: ignore[arg-type]
        out[key] = reply.model_dump(by_alias=True, mode="json", exclude_none=True)
    return out


async def _resolve(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    """Poll a 2026-07-28 task to its end; the CallToolResult it ended with."""
    run = TaskRun(era="2026-07-28", task_id=handle.task_id, statuses=[handle.status])
    pause = _interval(None, _advised(handle.model_extra or {}))
    await _poll_modern(ctx.session, run, cancel_after=None, interval=pause)
    if run.result is not None:
        return types.CallToolResult.model_validate(run.result, by_name=False)
    message = (run.error or {}).get("message", run.statuses[-1])
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


class TasksExtension(ClientExtension):
    """Declares ``io.modelcontextprotocol/tasks`` and claims the ``task`` result shape."""

    identifier = EXTENSION_TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_resolve)]


def task_extensions() -> list[ClientExtension]:
    """``extensions=`` for a 2026-07-28 client that runs tasks."""
    return [TasksExtension()]


@dataclass
class TaskRun:
    """What happened to one task, as the client saw it."""

    era: str
    task_id: str
    statuses: list[str] = field(default_factory=list)
    """The handle's status, then each poll's, in order (repeats kept)."""
    polls: int = 0
    updates: int = 0
    cancelled: bool = False
    result: dict[str, Any] | None = None
    """The tool result the task ended with (``tasks/result`` or the inlined one)."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error it ended with, if any."""

    @property
    def status(self) -> str:
        return self.statuses[-1] if self.statuses else "unknown"

    def text(self) -> str:
        content = (self.result or {}).get("content") or []
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))


async def _poll_modern(
    session: ClientSession, run: TaskRun, *, cancel_after: int | None, interval: float
) -> None:
    while run.status not in TERMINAL:
        if run.polls >= MAX_POLLS:
            raise TimeoutError(f"task {run.task_id} did not end after {run.polls} polls")
        if cancel_after is not None and run.polls >= cancel_after and not run.cancelled:
            await _send(session, "tasks/cancel", taskId=run.task_id)
            run.cancelled = True
        await anyio.sleep(interval)
        got = await _send(session, "tasks/get", taskId=run.task_id)
        run.polls += 1
        run.statuses.append(str(got.get("status")))
        if got.get("status") == "input_required" and isinstance(got.get("inputRequests"), dict):
            responses = await _answers(session, got["inputRequests"])
            await _send(session, "tasks/update", taskId=run.task_id, inputResponses=responses)
            run.updates += 1
        if isinstance(got.get("result"), dict):
            run.result = got["result"]
        if isinstance(got.get("error"), dict):
            run.error = got["error"]


async def _run_legacy(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    *,
    ttl: int,
    cancel_after: int | None,
    interval: float | None,
) -> TaskRun:
    session = client.session
    version = client.protocol_version
    task = await create_task(client, tool, arguments, ttl=ttl)
    run = TaskRun(era=version, task_id=str(task["taskId"]), statuses=[str(task.get("status"))])
    interval = _interval(interval, _advised(task))
    while run.status not in TERMINAL and run.status != "input_required":
        if run.polls >= MAX_POLLS:
            raise TimeoutError(f"task {run.task_id} did not end after {run.polls} polls")
        if cancel_after is not None and run.polls >= cancel_after:
            got = await _send(session, "tasks/cancel", taskId=run.task_id)
            run.cancelled = True
            run.statuses.append(str(got.get("status")))
            break
        await anyio.sleep(interval)
        got = await _send(session, "tasks/get", taskId=run.task_id)
        run.polls += 1
        run.statuses.append(str(got.get("status")))
    if run.status == "cancelled":
        return run
    try:
        run.result = await _send(session, "tasks/result", taskId=run.task_id)
    except MCPError as exc:
        run.error = {"code": exc.code, "message": exc.message}
    final = await _send(session, "tasks/get", taskId=run.task_id)
    run.polls += 1
    run.statuses.append(str(final.get("status")))
    return run


async def create_task(
    client: Client, tool: str, arguments: dict[str, Any] | None = None, *, ttl: int = 60_000
) -> dict[str, Any]:
    """Call ``tool`` as a task; the Task object of the handle (``taskId``, ``status`` …).

    2025-11-25: ``params.task`` with ``ttl``; 2026-07-28: the client's declared extension asks
    (``ttl`` is the server's to choose). Raises ``MCPError`` when no task handle comes back.
    """
    args = dict(arguments or {})
    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        handle = await client.session.call_tool(tool, args, allow_claimed=True)
        if not isinstance(handle, TaskHandle):
            raise MCPError(code=-32603, message=f"{tool} did not run as a task: {handle!r}")
        wire = handle.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {k: v for k, v in wire.items() if k not in ("resultType", "_meta")}
    params = {"name": tool, "arguments": args, "task": {"ttl": ttl}}
    opts: Any = {"headers": {"mcp-protocol-version": client.protocol_version}}
    # SDK gap (module doc): the typed path would reject the CreateTaskResult.
    created = await client.session._dispatcher.send_raw_request("tools/call", params, opts)
    task = created.get("task") if isinstance(created, dict) else None
    if not isinstance(task, dict):
        raise MCPError(code=-32603, message=f"no task handle in {created!r}")
    return task


async def task_request(client: Client, method: str, **params: Any) -> dict[str, Any]:
    """Send one ``tasks/*`` request (``taskId=…``, ``inputResponses=…``); its result as a dict."""
    return await _send(client.session, method, **params)


async def run_task(
    client: Client,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    ttl: int = 60_000,
    cancel_after: int | None = None,
    interval: float | None = None,
) -> TaskRun:
    """Run ``tool`` as a task on ``client``'s server and follow it to its end.

    ``cancel_after=N`` sends ``tasks/cancel`` after ``N`` polls (0: right after creation).
    ``interval`` (seconds between polls) defaults to the handle's ``pollIntervalMs`` (2026-07-28)
    or ``pollInterval`` (2025-11-25), as a well-behaved client polls. ``input_required`` is
    answered with the client's callbacks (give it a
    :class:`~mcp_proxy.testing.client.CallbackRecorder`). 2025-11-25 ends with ``tasks/result``
    and one last ``tasks/get``; 2026-07-28 ends when a ``tasks/get`` is terminal.
    """
    args = dict(arguments or {})
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return await _run_legacy(
            client, tool, args, ttl=ttl, cancel_after=cancel_after, interval=interval
        )
    handle = await create_task(client, tool, args, ttl=ttl)
    run = TaskRun(
        era=client.protocol_version, task_id=handle["taskId"], statuses=[handle["status"]]
    )
    pause = _interval(interval, _advised(handle))
    await _poll_modern(client.session, run, cancel_after=cancel_after, interval=pause)
    return run


def _advised(task: dict[str, Any]) -> Any:
    """The poll interval a Task advises, in ms: ``pollIntervalMs`` (the 2026-07-28 tasks
    extension) or ``pollInterval`` (2025-11-25)."""
    return task.get("pollIntervalMs", task.get("pollInterval"))


def _interval(asked: float | None, advised: Any) -> float:
    """The pause between polls: the caller's, else the server's advised interval (ms)."""
    if asked is not None:
        return asked
    if isinstance(advised, int | float) and not isinstance(advised, bool) and advised > 0:
        return min(float(advised) / 1000.0, 5.0)
    return 0.02
