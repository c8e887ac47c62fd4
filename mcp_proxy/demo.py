"""``mcptape demo``: the first-run experience, end to end on a fresh machine.

It launches the bundled test server through ``mcptape record`` exactly as a host would (a
subprocess whose command line is ``mcptape record --name … -- server…``), drives a scripted
conversation with the official SDK client in both protocol eras, and prints what was recorded.
The 2026-07-28 stdio session also runs one task (the ``tasks`` preset's ``research`` tool):
its handle, its polls and its inlined result are in the recording.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mcp_proxy.errors import McptapeError

if TYPE_CHECKING:
    from mcp_proxy.store.rows import SessionRow


def mcptape_argv() -> list[str]:
    """How to launch this very mcptape as a subprocess (the console script when installed)."""
    beside = Path(sys.executable).parent / "mcptape"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mcptape")
    if found:
        return [found]
    return [sys.executable, "-m", "mcp_proxy.cli"]


async def _drive(db_url: str, name: str, mode: str) -> dict[str, Any]:
    from mcp import StdioServerParameters

    from mcp_proxy.testing.client import (
        SCRIPTED_PRESETS,
        CallbackRecorder,
        make_client,
        run_scripted_session,
        stdio_params,
    )
    from mcp_proxy.testing.task_client import run_task, task_extensions

    with_task = mode == "auto"
    presets = [*SCRIPTED_PRESETS, "tasks"] if with_task else list(SCRIPTED_PRESETS)
    server = stdio_params(presets, name="mcptape-demo-server")
    params = StdioServerParameters(
        command=mcptape_argv()[0],
        args=[
            *mcptape_argv()[1:],
            "record",
            "--db",
            db_url,
            "--name",
            name,
            "--",
            server.command,
            *server.args,
        ],
    )
    rec = CallbackRecorder()
    extra: dict[str, Any] = {"extensions": task_extensions()} if with_task else {}
    async with make_client(params, mode=mode, recorder=rec, **extra) as client:
        result = await run_scripted_session(client, rec)
        if with_task:
            task = await run_task(client, "research", DEMO_TASK)
            result["task"] = {"status": task.status, "polls": task.polls, "text": task.text()}
        return result


#: The demo's one task: short, so the demo stays fast, and long enough to be polled.
DEMO_TASK = {"topic": "flight recorders", "duration": 0.1, "steps": 2}


def _drive_http(db_url: str, name: str) -> dict[str, Any]:
    """The same scripted session over Streamable HTTP, through ``mcptape record --upstream``."""
    import os
    import signal
    import subprocess

    from mcp_proxy.testing.client import (
        SCRIPTED_PRESETS,
        CallbackRecorder,
        make_client,
        run_scripted_session,
    )
    from mcp_proxy.testing.process import start_http_server, stop_process

    async def drive(url: str) -> dict[str, Any]:
        rec = CallbackRecorder()
        async with make_client(url, recorder=rec) as client:
            return await run_scripted_session(client, rec)

    argv = [*mcptape_argv(), "record", "--upstream", "UPSTREAM", "--port", "0"]
    argv += ["--db", db_url, "--name", name]
    with start_http_server(SCRIPTED_PRESETS, name="mcptape-demo-server") as (upstream, _server):
        argv[argv.index("UPSTREAM")] = upstream
        relay = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            assert relay.stderr is not None
            local = None
            for raw in relay.stderr:  # "mcptape: relaying http://127.0.0.1:PORT/mcp -> …"
                line = raw.decode("utf-8", "replace")
                if "relaying " in line:
                    local = line.split("relaying ", 1)[1].split(" -> ", 1)[0].strip()
                    break
            if local is None:
                raise McptapeError("the HTTP relay did not start")
            result = asyncio.run(drive(local))
            os.kill(relay.pid, signal.SIGINT)  # the relay drains its recording, then exits
            relay.wait(30)
            return result
        finally:
            stop_process(relay)


@dataclass(frozen=True)
class DemoSession:
    """One session the demo recorded."""

    id: str
    name: str
    transport: str
    protocol_version: str | None


def run_demo(db_url: str, *, out: Callable[[str], None] = print) -> list[DemoSession]:
    """Record the demo sessions and print them; returns the new sessions, in recording order."""
    from mcp_proxy.render import cli_name, frame_oneline, session_line
    from mcp_proxy.store.queries import Store

    runs = [("demo", "auto"), ("demo-legacy", "legacy"), ("demo-http", "http")]
    out(f"mcptape demo: recording into {db_url}")
    for name, mode in runs:
        try:
            if mode == "http":
                result = _drive_http(db_url, name)
            else:
                result = asyncio.run(_drive(db_url, name, mode))
        except Exception as exc:  # the demo failing is a bug in mcptape: say what broke
            raise McptapeError(f"the demo session {name!r} failed: {exc!r}") from exc
        out(
            f"  {name}: protocol {result['protocol_version']}, {len(result['tools'])} tools,"
            f" echo={result['echo']!r}, add={result['add']}, failing tool isError="
            f"{result['fail']['is_error']}, {len(result['progress'])} progress updates"
        )
        if "task" in result:
            task = result["task"]
            out(
                f"  {name}: task research -> {task['status']} after {task['polls']} polls:"
                f" {task['text']!r}"
            )

    async def show() -> list[DemoSession]:
        store = await Store.open(db_url)
        recorded = []
        try:
            for name, _ in runs:
                s = cast("SessionRow", await store.resolve_session(name))
                recorded.append(
                    DemoSession(
                        str(s["id"]), name, str(s.get("transport")), s.get("protocol_version")
                    )
                )
                out("")
                out(session_line(s))
                async for f in store.iter_frames(s["id"]):
                    out("  " + frame_oneline(f, width=150))
        finally:
            await store.close()
        return recorded

    recorded = asyncio.run(show())
    out("")
    out("Next:")
    for line in next_steps(cli_name()):
        out(line)
    return recorded


#: What to try after the demo: (arguments, what it does). Printed with the way the user runs
#: mcptape from where they are (``uv run mcptape`` after ``uv run mcptape demo``).
NEXT_STEPS = [
    ("sessions", "everything recorded, newest first"),
    ("show demo", "one session, frame by frame, pretty JSON"),
    ("show demo --format json", "the same for scripts"),
    ("show demo --exchanges", "requests paired with responses, latency, findings"),
    ("check demo-legacy", "the error taxonomy and protocol checks (CI-friendly)"),
    ("stats", "per-method counts, errors, latency percentiles"),
    ("export demo -o demo.jsonl", "a portable recording: diff, replay, mock"),
    ("tail", "follow live traffic, like tcpdump for MCP"),
    ("record --name NAME -- CMD…", "put mcptape in front of your own server"),
    ("install --dry-run", "wrap the servers of Claude Desktop & co."),
]


def next_steps(command: str) -> list[str]:
    """The "Next:" lines, each a command that works where the user is."""
    width = max(len(f"{command} {args}") for args, _ in NEXT_STEPS) + 3
    lines = [f"  {f'{command} {args}':{width}}# {why}" for args, why in NEXT_STEPS]
    if command.startswith("uv run"):
        lines.append("  (to type just `mcptape` anywhere, install it once: uv tool install .)")
    return lines
