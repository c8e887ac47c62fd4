"""A changed server: the test presets with one deliberate behaviour change, for replay tests.

``mcptape replay`` must report a difference when the server under test answers differently from
the recording. ``basic_changed`` is the ``basic`` preset whose ``echo`` tool now shouts (returns
its text upper-cased) — one result differs, everything else is identical, so a test can check
that exactly that exchange is reported. ``tasks_changed`` is the ``tasks`` preset whose
``research`` task ends with its findings upper-cased (the final result of a task differs).

It plugs in without touching :mod:`mcp_proxy.testing.presets` or the server entry point: this
module, run as a program, adds its presets to ``PRESETS`` in its own process and then hands
over to :func:`mcp_proxy.testing.server.main`, so every server option works unchanged::

    python -m mcp_proxy.testing.presets_changed --preset basic_changed,slow,failing
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer

from mcp_proxy.testing.presets import PRESETS, Preset, preset_basic
from mcp_proxy.testing.presets_tasks import preset_tasks
from mcp_proxy.testing.process import SERVER_PYTHON_ENV
from mcp_proxy.testing.tasks import TaskState, TaskTool, runtime_of


def preset_basic_changed(server: MCPServer) -> None:
    """``basic``, except that ``echo`` upper-cases its text."""
    preset_basic(server)
    server._tool_manager.remove_tool("echo")

    @server.tool(description="Return the text unchanged.")
    def echo(text: str) -> str:
        return text.upper()


async def _shouting_research(task: TaskState, args: dict[str, Any]) -> None:
    await asyncio.sleep(max(0.0, min(float(args.get("duration", 0.05)), 60.0)))
    text = f"findings on {args.get('topic', 'mcp')}".upper()
    task.result = {"content": [{"type": "text", "text": text}]}
    task.move("completed", "done")


def preset_tasks_changed(server: MCPServer) -> None:
    """``tasks``, except that a ``research`` task's findings are upper-cased."""
    preset_tasks(server)
    runtime_of(server).tools["research"] = TaskTool("research", _shouting_research)


CHANGED_PRESETS: dict[str, Preset] = {
    "basic_changed": preset_basic_changed,
    "tasks_changed": preset_tasks_changed,
}


def server_argv(presets: str, python: str | None = None) -> list[str]:
    """The command line of a changed stdio server (what a replay test runs)."""
    python = python or os.environ.get(SERVER_PYTHON_ENV) or sys.executable
    return [python, "-m", __name__, "--preset", presets, "--transport", "stdio"]


def main(argv: Sequence[str] | None = None) -> int:
    PRESETS.update(CHANGED_PRESETS)
    from mcp_proxy.testing import server

    return server.main(argv)


if __name__ == "__main__":
    sys.exit(main())
