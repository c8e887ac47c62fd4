"""A task in each era through the real stdio relay (``mcptape record``) with a raw server that
writes each era's wire shape by hand; ``show -x`` (JSON and text), ``stats`` and ``check`` read
the recording back: the task is one conversation, its duration apart from the handle's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
EXT = "io.modelcontextprotocol/tasks"


def _envelope(declared: bool = True) -> dict[str, Any]:
    caps: dict[str, Any] = {"elicitation": {}}
    if declared:
        caps["extensions"] = {EXT: {}}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-host", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    }


def _host(era: str, db: str, *, fail: bool = False, undeclared: bool = False) -> None:
    """Drive one task session through ``mcptape record``: create, poll until ended, result."""
    argv = [PY, "-m", "tests.analysis.raw_task_server", era] + (["fail"] if fail else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", db, "--name", f"task{era}", "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def call(
        rid: int, method: str, params: dict[str, Any], *, declared: bool = True
    ) -> dict[str, Any]:
        if era == "2026":
            params = {**params, "_meta": _envelope(declared)}
        line = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        proc.stdin.write(json.dumps(line).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while True:
            msg = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if msg.get("id") == rid:
                return msg

    if era == "2025":
        caps = {"tasks": {"requests": {"elicitation": {"create": {}}}}}
        call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": caps})
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        handle = call(2, "tools/call", {"name": "research", "arguments": {}, "task": {"ttl": 1}})
        tid = handle["result"]["task"]["taskId"]
    else:
        call(1, "server/discover", {})
        handle = call(2, "tools/call", {"name": "research", "arguments": {}})
        assert handle["result"]["resultType"] == "task"
        tid = handle["result"]["taskId"]
    rid, status = 3, "working"
    if undeclared:  # a first poll whose envelope leaves the extension out: refused, -32021
        assert call(rid, "tasks/get", {"taskId": tid}, declared=False)["error"]["code"] == -32021
        rid += 1
    while status == "working":
        status = call(rid, "tasks/get", {"taskId": tid})["result"]["status"]
        rid += 1
    if era == "2025":
        call(rid, "tasks/result", {"taskId": tid})
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()  # type: ignore[union-attr]


def _exchanges(db: str, session: str) -> list[dict[str, Any]]:
    proc = run_mcptape("show", session, "--db", db, "-x", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_a_task_is_one_conversation_through_the_stdio_relay(era: str, tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    _host(era, db)
    xs = _exchanges(db, f"task{era}")
    call = next(x for x in xs if x["method"] == "tools/call")
    polls = [x for x in xs if x["method"] == "tasks/get"]
    task = call["task"]
    assert task["id"] == "task-7" and task["status"] == "completed"
    assert task["polls"] == len(polls) == 3
    assert task["poll_interval_ms"] == 1  # pollIntervalMs (2026-07-28) / pollInterval (2025)
    assert task["ended_seq"] == polls[-1]["response_seq"]
    assert task["duration_ms"] >= call["latency_ms"]
    assert [s["status"] for s in task["lifecycle"]] == ["working", "completed"]
    about = [x for x in xs if x["method"].startswith("tasks/")]
    assert about and all(x["task_of"] == call["request_seq"] for x in about)
    if era == "2025":
        assert [x["method"] for x in about][-1] == "tasks/result"
        assert task["notifications"] == 1 and call["other_seqs"]
    else:
        assert "tasks/result" not in {x["method"] for x in about}
    text = run_mcptape("show", f"task{era}", "--db", db, "-x").stdout
    assert "task task-7: created → working → completed in" in text, text
    assert "3 poll(s)" in text
    # The polls are folded into the creating call's line, as progress is; the rest stay.
    assert " tasks/get " not in text, text
    if era == "2025":
        assert f"task of #{call['request_seq']}" in text
    stats = json.loads(run_mcptape("stats", f"task{era}", "--db", db, "--format", "json").stdout)
    rows = [r for r in stats["methods"] if r["method"] == "tools/call"]
    assert rows[0]["task_ms"]["n"] == 1
    assert rows[0]["task_ms"]["max"] >= rows[0]["latency_ms"]["max"]
    stats_text = run_mcptape("stats", f"task{era}", "--db", db).stdout
    assert "↳ task duration" in stats_text


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_a_failed_task_is_a_finding_on_its_tool(era: str, tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    _host(era, db, fail=True)
    proc = run_mcptape("check", f"task{era}", "--db", db, "--format", "json")
    out = json.loads(proc.stdout)
    findings = out[0]["findings"] if out and "findings" in out[0] else out
    failed = [f for f in findings if f["code"] == "tool.task_failed"]
    assert len(failed) == 1, findings
    assert "research" in failed[0]["title"] and "research crashed" in failed[0]["title"]
    call = next(x for x in _exchanges(db, f"task{era}") if x["method"] == "tools/call")
    assert call["request_seq"] in failed[0]["frame_seqs"]
    assert call["task"]["status"] == "failed"


def test_an_undeclared_extension_method_is_refused_and_named(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    _host("2026", db, undeclared=True)
    out = json.loads(run_mcptape("check", "task2026", "--db", db, "--format", "json").stdout)
    findings = out[0]["findings"] if out and "findings" in out[0] else out
    codes = {f["code"]: f for f in findings}
    assert "the client" in codes["extension.undeclared"]["title"]
    refused = codes["mcp.missing_client_capability"]
    assert (
        "required client capabilities: extension io.modelcontextprotocol/tasks"
        in (refused["detail"])
    )
    xs = _exchanges(db, "task2026")
    call = next(x for x in xs if x["method"] == "tools/call")
    assert call["task"]["polls"] == 4 and call["task"]["status"] == "completed"
