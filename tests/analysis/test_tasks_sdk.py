"""The analysis reads what the task presets send: real traffic through the real relays.

Each era's SDK client runs every task preset (``tasks``, ``tasks-failed``, ``tasks-cancelled``,
``tasks-input``) and calls ``extension-strict``'s extension method, through ``mcptape record``
over stdio (both eras) and once over ``record --upstream`` (Streamable HTTP). The task driver
polls at its default pace (the handle's ``pollInterval``). Then ``show -x --format json``,
``check`` and ``stats --by-name`` are read back: each task is one conversation (``task`` on the
creating call agrees with what the client saw; ``task_of`` on every poll, result, update,
cancel and the server's input request; 2025-11-25 status notifications joined), the findings
are exactly the failed task (on its tool) and the refused extension call, and each tool's task
duration is reported apart from its handle's latency.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params
from mcp_proxy.testing.process import start_http_server
from mcp_proxy.testing.task_client import TaskRun, run_task, task_extensions, task_request
from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape
from tests.helpers.proxy import proxied

pytestmark = pytest.mark.timeout(120)

PRESETS = "tasks,tasks-failed,tasks-cancelled,tasks-input,extension-strict"
TASKS_EXT = "io.modelcontextprotocol/tasks"
ECHO_EXT = "io.mcptape/echo"
TERMINAL = {"completed", "failed", "cancelled"}
#: tool → (arguments, run_task keywords, final status)
TOOLS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "research": ({"topic": "tape", "duration": 0.08}, {}, "completed"),
    "doomed": ({"reason": "disk on fire"}, {}, "failed"),
    "endless": ({}, {"cancel_after": 1}, "cancelled"),
    "approve": ({"action": "ship"}, {}, "completed"),
}


def _client(target: Any, mode: str, *, tasks: bool = True) -> Any:
    extra = {"extensions": task_extensions()} if tasks and mode != "legacy" else {}
    return make_client(target, mode=mode, recorder=CallbackRecorder(), **extra)


async def _drive(target: Any, mode: str) -> dict[str, TaskRun]:
    """Every task preset once, then the strict server's extension method (refused)."""
    runs: dict[str, TaskRun] = {}
    async with _client(target, mode) as client:
        for tool, (args, kw, _) in TOOLS.items():
            runs[tool] = await run_task(client, tool, args, **kw)
        with pytest.raises(MCPError) as refused:
            await task_request(client, "mcptape/echo", text="hi")
    assert refused.value.code == (-32601 if mode == "legacy" else -32021)
    assert {t: r.status for t, r in runs.items()} == {t: v[2] for t, v in TOOLS.items()}
    return runs


@contextmanager
def _announced(argv: list[str], marker: str, what: str) -> Iterator[str]:
    """A child that names its URL on stderr after ``marker``; stopped (by pid) on exit."""
    child = AnnouncedChild(
        argv, lambda line: line.split(marker, 1)[1].split()[0] if marker in line else None, what
    )
    try:
        yield child.start(60.0)
    finally:
        child.stop()


def _json(*args: str) -> Any:
    proc = run_mcptape(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _exchanges(db: str, session: str) -> list[dict[str, Any]]:
    proc = run_mcptape("show", session, "--db", db, "-x", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _findings(db: str, session: str) -> list[dict[str, Any]]:
    out = _json("check", session, "--db", db, "--format", "json")
    return out[0]["findings"] if out and "findings" in out[0] else out


def _check_links(xs: list[dict[str, Any]], runs: dict[str, TaskRun], legacy: bool) -> None:
    calls = {x["name"]: x for x in xs if x["method"] == "tools/call"}
    linked: set[int] = set()
    for tool, run in runs.items():
        call = calls[tool]
        task, seq = call["task"], call["request_seq"]
        about = [x for x in xs if x.get("task_of") == seq]
        linked.update(x["index"] for x in about)
        # The creating call's task is what the client saw, and the handle is not the task.
        assert task["id"] == run.task_id and task["status"] == run.status, (tool, task)
        assert task["polls"] == run.polls == sum(x["method"] == "tasks/get" for x in about)
        assert task["updates"] == run.updates
        assert task["poll_interval_ms"] == 20  # the handle's pollIntervalMs / pollInterval
        assert task["lifecycle"][0]["status"] == "working"
        assert task["lifecycle"][-1] == {"status": run.status, "seq": task["ended_seq"]}
        ends = [x["response_seq"] for x in about] + call["other_seqs"]
        assert task["ended_seq"] in ends
        assert task["duration_ms"] > call["latency_ms"]
        methods = [x["method"] for x in about]
        if tool == "approve":
            steps = [s["status"] for s in task["lifecycle"]]
            assert steps == ["working", "input_required", "completed"], steps
            # 2025-11-25: the server asks on the tasks/result stream; 2026-07-28: tasks/update.
            assert ("elicitation/create" in methods) == legacy
            assert ("tasks/update" in methods) == (not legacy) == (task["updates"] == 1)
        if tool == "endless":
            assert "tasks/cancel" in methods
        if legacy:
            # Status joined. The preset announces each status on the next task request that
            # sees it, so a task that ended before its first poll announced only its end.
            assert task["notifications"] >= 1 and len(call["other_seqs"]) >= 1
            assert "tasks/result" in methods or tool == "endless"
        else:
            assert "tasks/result" not in methods
    # Every exchange about a task is linked to its creating call.
    task_methods = {"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"}
    unlinked = [x for x in xs if x["method"] in task_methods and x["index"] not in linked]
    assert not unlinked, unlinked


def _check_findings(findings: list[dict[str, Any]], legacy: bool) -> None:
    by_code: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_code.setdefault(f["code"], []).append(f)
    refused = "jsonrpc.method_not_found" if legacy else "mcp.missing_client_capability"
    # Exactly: the failed task, on its tool, once; the refused extension call. No poll ran too
    # fast (the driver's default pace), no task left unfinished, no second finding per failure.
    assert set(by_code) == {"tool.task_failed", refused}, findings
    (failed,) = by_code["tool.task_failed"]
    assert "doomed" in failed["title"] and "disk on fire" in failed["title"], failed
    if not legacy:
        assert f"extension {ECHO_EXT}" in by_code[refused][0]["detail"]


def _check_stats(db: str, session: str) -> None:
    stats = _json("stats", session, "--db", db, "--format", "json", "--by-name")
    rows = {r["name"]: r for r in stats["methods"] if r["method"] == "tools/call"}
    for tool in TOOLS:
        row = rows[tool]
        assert row["task_ms"]["n"] == 1, row
        assert row["task_ms"]["max"] > row["latency_ms"]["max"], row


def _check_text(db: str, session: str, runs: dict[str, TaskRun], legacy: bool) -> None:
    """``show -x`` text: each creating call's line shows its task's lifecycle, duration,
    polls and (2025-11-25) the status notifications joined to it."""
    proc = run_mcptape("show", session, "--db", db, "-x")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for tool, run in runs.items():
        (line,) = [ln for ln in lines if f"tools/call {tool} " in ln]
        steps = (
            ["working", "input_required", run.status]
            if tool == "approve"
            else ["working", run.status]
        )
        assert f"task {run.task_id}: created → {' → '.join(steps)} in " in line, line
        assert f"{run.polls} poll(s)" in line, line
        assert ("status notification(s)" in line) == legacy, line


def _check(db: str, session: str, runs: dict[str, TaskRun], legacy: bool) -> None:
    _check_links(_exchanges(db, session), runs, legacy)
    _check_text(db, session, runs, legacy)
    _check_findings(_findings(db, session), legacy)
    _check_stats(db, session)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_task_presets_through_the_stdio_relay(mode: str, tmp_path: Path) -> None:
    db = str(tmp_path / "tasks.db")
    runs = await _drive(proxied(stdio_params(PRESETS), db, "tasks"), mode)
    _check(db, "tasks", runs, legacy=mode == "legacy")


async def test_task_presets_through_the_http_relay(tmp_path: Path) -> None:
    """2025-11-25 over Streamable HTTP: the input request and status notifications travel on
    the streams of the client's task requests."""
    db = str(tmp_path / "tasks.db")
    with start_http_server(PRESETS, "http") as (upstream, _server):
        relay = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", db]
        with _announced([*relay, "--name", "tasks"], "relaying ", "relay") as local:
            runs = await _drive(local, "legacy")
    _check(db, "tasks", runs, legacy=True)


async def test_an_undeclared_tasks_extension_is_refused_and_named(tmp_path: Path) -> None:
    """2026-07-28: a client that does not declare the tasks extension calls a task tool and
    polls on the strict server: both refused -32021 naming the extension; the poll (an
    extension method) is extension.undeclared on the client."""
    db = str(tmp_path / "tasks.db")
    async with _client(proxied(stdio_params(PRESETS), db, "plain"), "auto", tasks=False) as c:
        for call in (
            c.call_tool("research", {}),
            task_request(c, "tasks/get", taskId="task-1"),
        ):
            with pytest.raises(MCPError) as refused:
                await call
            assert refused.value.code == -32021
    findings = _findings(db, "plain")
    codes = [f["code"] for f in findings]
    assert codes.count("mcp.missing_client_capability") == 2, findings
    for f in findings:
        if f["code"] == "mcp.missing_client_capability":
            assert f"extension {TASKS_EXT}" in f["detail"], f
    (undeclared,) = [f for f in findings if f["code"] == "extension.undeclared"]
    assert "tasks/get" in undeclared["title"] and "the client" in undeclared["title"]
