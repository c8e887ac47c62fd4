"""Task-running test servers in both eras: the wire of MCP tasks, served on the SDK's middleware.

The SDK (``mcp`` 2.3) has the 2025-11-25 task *types* (``mcp_types.CreateTaskResult``,
``GetTaskResult`` …) and the SEP-2133 extension framework, but no task runtime in either era:
``tasks/*`` are "deliberately absent" from its method tables, a 2025-11-25 ``tools/call`` result
is validated as a plain ``CallToolResult``, and nothing answers ``resultType: "task"``. So the
wire is implemented here, on the SDK's public low-level hook :attr:`MCPServer.middleware`: one
:class:`TaskRuntime` middleware per server, installed by the first task preset, sees every
request before the SDK looks its method up and

- **2025-11-25** (``capabilities.tasks`` added to the ``initialize`` result): a ``tools/call``
  carrying ``params.task`` (``ttl``) for a task tool is answered at once with
  ``CreateTaskResult`` ``{"task": {taskId, status, statusMessage, createdAt, lastUpdatedAt, ttl,
  pollInterval}}``; ``tasks/get`` returns the task, ``tasks/result`` blocks until the task is
  terminal and returns the tool result (``_meta["io.modelcontextprotocol/related-task"]``) or
  its JSON-RPC error, ``tasks/list`` lists, ``tasks/cancel`` cancels. A status change is
  announced with ``notifications/tasks/status`` on the next task request that sees it (just
  before its answer). ``input_required`` is answered the 2025-11-25 way: the server sends
  ``elicitation/create`` (with the related-task ``_meta``) on the stream of the client's
  ``tasks/result``.
- **2026-07-28** (extension ``io.modelcontextprotocol/tasks`` added to ``server/discover``'s
  ``capabilities.extensions``): a ``tools/call`` for a task tool from a client that declares
  the extension in its per-request ``_meta`` capabilities is answered with the flattened handle
  ``{"resultType": "task", taskId, status, …, ttlMs, pollIntervalMs}`` (the extension's field
  names; 2025-11-25's Task says ``ttl`` and ``pollInterval``); ``tasks/get`` returns the task and inlines
  ``result`` (completed), ``error`` (failed) or ``inputRequests`` (input_required);
  ``tasks/update`` carries ``inputResponses``; ``tasks/cancel`` acknowledges. There is no
  ``tasks/result`` and no ``tasks/list`` in this era (-32601). A client that does not declare
  the extension gets the tool's plain result (the extension degrades gracefully), unless the
  ``extension-strict`` preset is on: then it gets ``-32021`` naming the extension.

Unknown task ids are ``-32602``. Task tools are ordinary SDK tools too, so a call without task
augmentation runs synchronously and returns the same result a task would end with. Durations
are arguments, so a test's task finishes in tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_proxy.limits import TEST_SERVER_TASKS

__all__ = [
    "EXTENSION_TASKS",
    "RELATED_TASK",
    "TaskRuntime",
    "TaskState",
    "TaskTool",
    "runtime_of",
]

EXTENSION_TASKS = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
DEFAULT_TTL_MS = 60_000
POLL_INTERVAL_MS = 20
"""What the handle advises; tests poll on their own schedule."""

NO_BACK_CHANNEL = (
    "input_required needs a server→client request, which this connection cannot carry"
    " (stateless or JSON-response HTTP)"
)
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return result


@dataclass
class TaskState:
    """One task: its wire fields, its outcome, and what it waits for."""

    task_id: str
    tool: str
    modern: bool
    ttl: int
    status: str = "working"
    status_message: str | None = "working"
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    input_responses: dict[str, Any] | None = None
    announced: str | None = None
    """The status last sent as ``notifications/tasks/status`` (2025-11-25)."""
    asked: bool = False
    """2025-11-25: the input request went out on a ``tasks/result`` stream."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def move(self, status: str, message: str | None = None) -> None:
        """Change status (never out of a terminal one) and wake whoever waits."""
        if self.terminal:
            return
        self.status = status
        self.status_message = message
        self.updated_at = _now()
        self.changed.set()
        self.changed = asyncio.Event()

    def wire(self) -> dict[str, Any]:
        """The Task object as its era puts it on the wire: ``ttl`` and ``pollInterval``
        (2025-11-25), ``ttlMs`` and ``pollIntervalMs`` (the 2026-07-28 tasks extension)."""
        task: dict[str, Any] = {"taskId": self.task_id, "status": self.status}
        if self.status_message is not None:
            task["statusMessage"] = self.status_message
        task |= {"createdAt": self.created_at, "lastUpdatedAt": self.updated_at}
        if self.modern:
            task |= {"ttlMs": self.ttl, "pollIntervalMs": POLL_INTERVAL_MS}
        else:
            task |= {"ttl": self.ttl, "pollInterval": POLL_INTERVAL_MS}
        return task

    async def ask(self, requests: dict[str, Any]) -> dict[str, Any]:
        """Go ``input_required`` with these input requests and wait for the answers."""
        self.input_requests = requests
        self.input_responses = None
        self.answered = asyncio.Event()
        self.move("input_required", "waiting for input")
        await self.answered.wait()
        self.input_requests = None
        self.move("working", "working")
        return self.input_responses or {}

    def answer(self, responses: Mapping[str, Any]) -> None:
        self.input_responses = dict(responses)
        self.answered.set()


TaskBody = Callable[[TaskState, dict[str, Any]], Awaitable[None]]
"""Runs a task: sleeps, asks, and ends it by setting ``result``/``error`` and a terminal status."""


@dataclass(frozen=True)
class TaskTool:
    """A tool that can run as a task, and how."""

    name: str
    body: TaskBody


def _error(code: int, message: str, data: Any = None) -> MCPError:
    return MCPError(code=code, message=message, data=data)


def _client_extensions(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    """The extensions the client declared: per request (2026-07-28) or at initialize."""
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    if isinstance(meta, Mapping):
        caps = meta.get(META_CAPABILITIES)
        if isinstance(caps, Mapping) and isinstance(caps.get("extensions"), Mapping):
            return caps["extensions"]
    capabilities = ctx.session.client_capabilities
    return (capabilities.extensions or {}) if capabilities is not None else {}


class TaskRuntime:
    """The middleware that serves tasks (both eras) and strict extension checks."""

    def __init__(self) -> None:
        self.tools: dict[str, TaskTool] = {}
        self.tasks: OrderedDict[str, TaskState] = OrderedDict()
        self.strict = False
        """``extension-strict``: refuse undeclared extensions instead of degrading."""
        self.extension_methods: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {}
        """Extension request methods: method → (extension id, handler of params)."""
        self._ids = itertools.count(1)
        #: Task ids differ per server process, as a real server's do (replay must map them).
        self._token = secrets.token_hex(3)

    # -- middleware entry -----------------------------------------------------------------

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.request_id is None:
            return await call_next(ctx)
        method = ctx.method
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        params: Mapping[str, Any] = ctx.params if isinstance(ctx.params, Mapping) else {}
        if method in self.extension_methods:
            return self._extension_method(ctx, modern, params)
        if method == "tools/call" and params.get("name") in self.tools:
            return await self._tools_call(ctx, call_next, modern, params)
        if method.startswith("tasks/") and self.tools:
            return await self._task_method(ctx, modern, params)
        result = await call_next(ctx)
        if isinstance(result, dict):
            self._advertise(method, modern, result)
        return result

    def _advertise(self, method: str, modern: bool, result: dict[str, Any]) -> None:
        """Add the task capability (2025-11-25) or extensions (2026-07-28) to the handshake."""
        if method == "initialize" and result.get("protocolVersion") == "2025-11-25" and self.tools:
            caps = result.setdefault("capabilities", {})
            caps["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        elif method == "server/discover":
            extensions = result.setdefault("capabilities", {}).setdefault("extensions", {})
            if self.tools:
                extensions.setdefault(EXTENSION_TASKS, {})
            for ext, _ in self.extension_methods.values():
                extensions.setdefault(ext, {})
        elif method == "tools/list":
            for tool in result.get("tools", []):
                if isinstance(tool, dict) and tool.get("name") in self.tools and not modern:
                    tool["execution"] = {"taskSupport": "optional"}

    # -- extension methods (extension-strict) -----------------------------------------------

    def _extension_method(
        self, ctx: ServerRequestContext[Any, Any], modern: bool, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        ext, handler = self.extension_methods[ctx.method]
        if not modern:
            # Before 2026-07-28 there is no extension negotiation: the method does not exist.
            raise _error(METHOD_NOT_FOUND, "Method not found", ctx.method)
        if ext not in _client_extensions(ctx):
            raise self._missing(ext)
        result = handler(params)
        return {"resultType": "complete", **result}

    @staticmethod
    def _missing(ext: str) -> MCPError:
        return _error(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"Missing required client capability: extension {ext}",
            {"requiredCapabilities": {"extensions": {ext: {}}}},
        )

    # -- task creation ------------------------------------------------------------------------

    async def _tools_call(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        modern: bool,
        params: Mapping[str, Any],
    ) -> HandlerResult:
        tool = self.tools[str(params["name"])]
        wanted = params.get("task")
        if modern:
            if EXTENSION_TASKS not in _client_extensions(ctx):
                if self.strict:
                    raise self._missing(EXTENSION_TASKS)
                return await call_next(ctx)
            ttl = DEFAULT_TTL_MS
        else:
            if not isinstance(wanted, Mapping):
                return await call_next(ctx)
            ttl = int(wanted.get("ttl") or DEFAULT_TTL_MS)
            ctx = replace(ctx, params={k: v for k, v in params.items() if k != "task"})
        task = self._create(tool, modern, ttl)
        arguments = params.get("arguments")
        task.runner = asyncio.create_task(
            self._run(task, tool, dict(arguments) if isinstance(arguments, Mapping) else {})
        )
        if modern:
            return {"resultType": "task", **task.wire()}
        return {"task": task.wire()}

    def _create(self, tool: TaskTool, modern: bool, ttl: int) -> TaskState:
        while len(self.tasks) >= TEST_SERVER_TASKS:
            _, oldest = self.tasks.popitem(last=False)
            if oldest.runner is not None:
                oldest.runner.cancel()
        task_id = f"task-{next(self._ids)}-{self._token}"
        task = TaskState(task_id=task_id, tool=tool.name, modern=modern, ttl=ttl)
        self.tasks[task_id] = task
        return task

    async def _run(self, task: TaskState, tool: TaskTool, arguments: dict[str, Any]) -> None:
        try:
            await tool.body(task, arguments)
        except asyncio.CancelledError:
            task.move("cancelled", "cancelled by request")
            raise
        except Exception as exc:  # a test server reports its own bugs on the wire
            task.error = {"code": -32603, "message": f"task body failed: {exc}"}
            task.move("failed", str(exc))

    # -- tasks/* ------------------------------------------------------------------------------

    def _task(self, params: Mapping[str, Any]) -> TaskState:
        task = self.tasks.get(str(params.get("taskId")))
        if task is None:
            raise _error(INVALID_PARAMS, f"Unknown task id {params.get('taskId')!r}")
        return task

    async def _task_method(
        self, ctx: ServerRequestContext[Any, Any], modern: bool, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        method = ctx.method
        if modern and self.strict and EXTENSION_TASKS not in _client_extensions(ctx):
            raise self._missing(EXTENSION_TASKS)  # an extension method, undeclared
        if method == "tasks/list" and not modern:
            await self._announce_all(ctx)
            return {"tasks": [t.wire() for t in self.tasks.values() if not t.modern]}
        if method == "tasks/get":
            task = self._task(params)
            await self._announce(ctx, task)
            return self._get(task) if modern else task.wire()
        if method == "tasks/result" and not modern:
            return await self._result(ctx, self._task(params))
        if method == "tasks/cancel":
            task = self._task(params)
            if task.terminal:
                raise _error(INVALID_PARAMS, f"Task {task.task_id} is already {task.status}")
            if task.runner is not None:
                task.runner.cancel()
            task.move("cancelled", "cancelled by request")
            await self._announce(ctx, task)
            return {"resultType": "complete"} if modern else task.wire()
        if method == "tasks/update" and modern:
            task = self._task(params)
            responses = params.get("inputResponses")
            if task.status != "input_required" or not isinstance(responses, Mapping):
                raise _error(INVALID_PARAMS, f"Task {task.task_id} is not waiting for input")
            task.answer(responses)
            return {"resultType": "complete"}
        raise _error(METHOD_NOT_FOUND, "Method not found", method)

    @staticmethod
    def _get(task: TaskState) -> dict[str, Any]:
        """A 2026-07-28 ``tasks/get`` answer: the task, with its result, error or input inline."""
        out: dict[str, Any] = {"resultType": "complete", **task.wire()}
        if task.status == "completed" and task.result is not None:
            out["result"] = task.result
        elif task.status == "failed" and task.error is not None:
            out["error"] = task.error
        elif task.status == "input_required" and task.input_requests:
            out["inputRequests"] = task.input_requests
        return out

    async def _result(self, ctx: ServerRequestContext[Any, Any], task: TaskState) -> dict[str, Any]:
        """2025-11-25 ``tasks/result``: block until terminal, asking for input on this stream."""
        while not task.terminal:
            changed = task.changed
            if task.status == "input_required" and not task.asked:
                task.asked = True
                await self._announce(ctx, task)
                try:
                    task.answer(await self._elicit(ctx, task))
                except NoBackChannelError:  # stateless or JSON-response HTTP: cannot ask
                    if task.runner is not None:
                        task.runner.cancel()
                    task.error = {"code": -32603, "message": NO_BACK_CHANNEL}
                    task.move("failed", NO_BACK_CHANNEL)
                continue
            await changed.wait()
        await self._announce(ctx, task)
        related = {"_meta": {RELATED_TASK: {"taskId": task.task_id}}}
        if task.error is not None:
            raise _error(task.error["code"], task.error["message"], task.error.get("data"))
        if task.status == "cancelled":
            raise _error(INVALID_PARAMS, f"Task {task.task_id} was cancelled")
        return {**(task.result or _text_result("")), **related}

    async def _elicit(self, ctx: ServerRequestContext[Any, Any], task: TaskState) -> dict[str, Any]:
        """Send each input request of ``task`` as a server→client request; collect the answers."""
        answers: dict[str, Any] = {}
        for key, request in (task.input_requests or {}).items():
            params = dict(request.get("params", {}))
            params["_meta"] = {RELATED_TASK: {"taskId": task.task_id}}
            elicit = types.ElicitRequest(
                params=types.ElicitRequestFormParams.model_validate(params)
            )
            reply = await ctx.session.send_request(
                elicit,
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
            answers[key] = reply.model_dump(by_alias=True, mode="json", exclude_none=True)
        return answers

    async def _announce(self, ctx: ServerRequestContext[Any, Any], task: TaskState) -> None:
        """2025-11-25: ``notifications/tasks/status`` for a status not yet announced."""
        if task.modern or task.announced == task.status:
            return
        task.announced = task.status
        note = types.TaskStatusNotification(
            params=types.TaskStatusNotificationParams.model_validate(task.wire())
        )
        await ctx.session.send_notification(note, related_request_id=ctx.request_id)  # type: ignore[arg-type]

    async def _announce_all(self, ctx: ServerRequestContext[Any, Any]) -> None:
        for task in list(self.tasks.values()):
            await self._announce(ctx, task)


def runtime_of(server: MCPServer) -> TaskRuntime:
    """The server's task runtime, installed (outermost-but-one) on first use."""
    for middleware in server.middleware:
        if isinstance(middleware, TaskRuntime):
            return middleware
    runtime = TaskRuntime()
    server.middleware.append(runtime)
    return runtime


def elicit_request(message: str) -> dict[str, Any]:
    """An ``elicitation/create`` request as an entry of ``inputRequests``."""
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": ANSWER_SCHEMA},
    }


def answer_text(response: Any) -> str:
    """What an elicitation answer says, for the tool's final text."""
    if isinstance(response, Mapping):
        if response.get("action") == "accept" and isinstance(response.get("content"), Mapping):
            return f"accept: {response['content'].get('answer')}"
        return str(response.get("action"))
    return json.dumps(response)
