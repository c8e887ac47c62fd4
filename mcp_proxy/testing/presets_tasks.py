"""Task presets (both eras) and the extension-refusing preset; the wire is in :mod:`.tasks`.

``tasks``
    ``research(topic: str = "mcp", duration: float = 0.05, steps: int = 2)``: a task that
    works ``steps`` steps over ``duration`` seconds (each step a new ``statusMessage``) and
    completes with the text ``findings on <topic>``.
``tasks-failed``
    ``doomed(reason: str = "deliberate task failure", duration: float = 0.05)``: a task that
    ends ``failed`` — 2026-07-28: ``tasks/get`` inlines ``error`` ``{code: -32603, message:
    reason}``; 2025-11-25: ``tasks/result`` returns the tool result with ``isError: true``.
``tasks-cancelled``
    ``endless(duration: float = 3600)``: a task that works until ``tasks/cancel`` ends it
    ``cancelled`` (or completes after ``duration``).
``tasks-input``
    ``approve(action: str = "deploy", duration: float = 0.02)``: a task that goes
    ``input_required`` with one form elicitation (key ``confirm``) and completes with
    ``<action>: accept: <answer>`` — 2026-07-28: ``tasks/get`` inlines ``inputRequests``, the
    client answers with ``tasks/update`` ``inputResponses``; 2025-11-25: the server sends
    ``elicitation/create`` (related-task ``_meta``) on the client's ``tasks/result`` stream.
``extension-strict``
    declares the extension ``io.mcptape/echo`` with the method ``mcptape/echo`` (params
    ``text``): 2026-07-28 answers ``{"text": …}`` if the request's ``_meta`` capabilities declare
    the extension, else ``-32021`` with ``data.requiredCapabilities.extensions``; before
    2026-07-28 the method is ``-32601``. With any task preset, a 2026-07-28 task tool called
    (or a ``tasks/*`` request sent) without the tasks extension declared is refused with
    ``-32021`` too (instead of running synchronously).

Called without task augmentation, every task tool runs synchronously (the SDK tool) and
returns what its task would end with (``approve`` cannot ask, and says so).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_proxy.testing.tasks import (
    TaskState,
    TaskTool,
    answer_text,
    elicit_request,
    runtime_of,
)

__all__ = [
    "EXTENSION_ECHO",
    "TASK_PRESETS",
]

EXTENSION_ECHO = "io.mcptape/echo"
EXTENSION_ECHO_METHOD = "mcptape/echo"


def _seconds(value: Any, default: float) -> float:
    try:
        return max(0.0, min(float(value), 3600.0))
    except (TypeError, ValueError):
        return default


async def _research(task: TaskState, args: dict[str, Any]) -> None:
    steps = max(1, min(int(args.get("steps", 2)), 100))
    pause = _seconds(args.get("duration", 0.05), 0.05) / steps
    for step in range(1, steps + 1):
        await asyncio.sleep(pause)
        task.move("working", f"step {step}/{steps}")
    task.result = {"content": [{"type": "text", "text": f"findings on {args.get('topic', 'mcp')}"}]}
    task.move("completed", "done")


async def _doomed(task: TaskState, args: dict[str, Any]) -> None:
    await asyncio.sleep(_seconds(args.get("duration", 0.05), 0.05))
    reason = str(args.get("reason", "deliberate task failure"))
    if task.modern:
        task.error = {"code": -32603, "message": reason}
    else:
        task.result = {"content": [{"type": "text", "text": reason}], "isError": True}
    task.move("failed", reason)


async def _endless(task: TaskState, args: dict[str, Any]) -> None:
    seconds = _seconds(args.get("duration", 3600.0), 3600.0)
    await asyncio.sleep(seconds)
    task.result = {"content": [{"type": "text", "text": f"woke up after {seconds} s"}]}
    task.move("completed", "done")


async def _approve(task: TaskState, args: dict[str, Any]) -> None:
    action = str(args.get("action", "deploy"))
    await asyncio.sleep(_seconds(args.get("duration", 0.02), 0.02))
    responses = await task.ask({"confirm": elicit_request(f"Really {action}?")})
    text = f"{action}: {answer_text(responses.get('confirm'))}"
    task.result = {"content": [{"type": "text", "text": text}]}
    task.move("completed", "done")


def preset_tasks(server: MCPServer) -> None:
    """``research``: a task that completes."""
    runtime_of(server).tools["research"] = TaskTool("research", _research)

    @server.tool(
        description="Research a topic (runs as a task when the client asks for one).",
        structured_output=False,
    )
    async def research(topic: str = "mcp", duration: float = 0.05, steps: int = 2) -> str:
        await asyncio.sleep(_seconds(duration, 0.05))
        return f"findings on {topic}"


def preset_tasks_failed(server: MCPServer) -> None:
    """``doomed``: a task that fails."""
    runtime_of(server).tools["doomed"] = TaskTool("doomed", _doomed)

    @server.tool(
        description="Fail after `duration` seconds (as a task: status failed).",
        structured_output=False,
    )
    async def doomed(reason: str = "deliberate task failure", duration: float = 0.05) -> str:
        await asyncio.sleep(_seconds(duration, 0.05))
        raise ToolError(reason)


def preset_tasks_cancelled(server: MCPServer) -> None:
    """``endless``: a task to cancel."""
    runtime_of(server).tools["endless"] = TaskTool("endless", _endless)

    @server.tool(
        description="Work for `duration` seconds (cancel the task to stop it).",
        structured_output=False,
    )
    async def endless(duration: float = 3600.0) -> str:
        seconds = _seconds(duration, 3600.0)
        await asyncio.sleep(seconds)
        return f"woke up after {seconds} s"


def preset_tasks_input(server: MCPServer) -> None:
    """``approve``: a task that needs input."""
    runtime_of(server).tools["approve"] = TaskTool("approve", _approve)

    @server.tool(
        description="Ask for approval of `action` (as a task: input_required).",
        structured_output=False,
    )
    async def approve(action: str = "deploy", duration: float = 0.02) -> str:
        await asyncio.sleep(_seconds(duration, 0.02))
        return f"{action}: not asked (run it as a task to be asked)"


def _echo(params: Mapping[str, Any]) -> dict[str, Any]:
    return {"text": str(params.get("text", ""))}


def preset_extension_strict(server: MCPServer) -> None:
    """A strict server: undeclared extensions are refused (-32021; -32601 before 2026-07-28)."""
    runtime = runtime_of(server)
    runtime.strict = True
    runtime.extension_methods[EXTENSION_ECHO_METHOD] = (EXTENSION_ECHO, _echo)


TASK_PRESETS = {
    "tasks": preset_tasks,
    "tasks-failed": preset_tasks_failed,
    "tasks-cancelled": preset_tasks_cancelled,
    "tasks-input": preset_tasks_input,
    "extension-strict": preset_extension_strict,
}
"""The presets of this module by name (merged into :data:`~.presets.PRESETS`)."""
