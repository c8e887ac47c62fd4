"""Replay of task sessions (both eras): the final result is compared, not the poll count.

Recorded through the real stdio relay with a host that polls every 10 ms, replayed with
``--pacing fast`` (the recorded polls go out at once, long before the live task is done) against
a fresh server whose task ids differ from the recorded ones. The replay maps the task ids, polls
on until the live task got as far as the recorded one, and the diff folds each task's polls into
its final state: no differences. A server whose task ends with another result is reported.
Each era's session is recorded once per module (:func:`_recorded`); each test replays a copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.diff import Step, fold_task_polls
from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params
from mcp_proxy.testing.presets_changed import server_argv as changed_argv
from mcp_proxy.testing.task_client import run_task, task_extensions
from tests.conftest import matrix
from tests.helpers.proxy import proxied
from tests.helpers.shared import copy_sqlite
from tests.travel.conftest import run_cli, server

pytestmark = pytest.mark.timeout(150)

PRESETS = "tasks,tasks-failed,tasks-input"


async def _record(db: Path, name: str, mode: str) -> dict[str, int]:
    extra = {} if mode == "legacy" else {"extensions": task_extensions()}
    target = proxied(stdio_params(PRESETS), db, name)
    async with make_client(target, mode=mode, recorder=CallbackRecorder(), **extra) as client:
        runs = {
            "research": await run_task(
                client, "research", {"topic": "tape", "duration": 0.4}, interval=0.01
            ),
            "approve": await run_task(
                client, "approve", {"action": "ship", "duration": 0.05}, interval=0.01
            ),
            "doomed": await run_task(client, "doomed", {"duration": 0.05}, interval=0.01),
        }
    assert [r.status for r in runs.values()] == ["completed", "completed", "failed"]
    return {tool: run.polls for tool, run in runs.items()}


_RECORDED: dict[str, tuple[Path, dict[str, int]]] = {}


async def _recorded(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> tuple[Path, str, dict[str, int]]:
    """The session of ``mode`` (recorded through the real relay once per module): a copy of its
    database for this test (the replay adds its session), its name, and the polls per tool."""
    name = f"tasks-{mode}"
    if mode not in _RECORDED:
        db = tmp_path_factory.mktemp(name) / "tasks.db"
        _RECORDED[mode] = (db, await _record(db, name, mode))
    source, polls = _RECORDED[mode]
    return copy_sqlite(source, tmp_path / "tasks.db"), name, polls


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"legacy"}))
async def test_a_task_session_replays_equal_however_the_polls_fall(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    db, name, polls = await _recorded(mode, tmp_path_factory, tmp_path)
    assert polls["research"] >= 5  # the recording polled while the task worked

    same = run_cli("replay", name, "--db", str(db), "--format", "json", "--", *server(PRESETS))
    report = json.loads(same.stdout)
    changed = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
    assert same.returncode == 0, (report["notes"], changed)
    assert report["equal"] and report["notes"] == []

    # The replayed task is its own: other task ids, polled as the live task needed.
    sessions = json.loads(run_cli("sessions", "--db", str(db), "--format", "json").stdout)
    replayed = next(s for s in sessions if s["name"] != name)
    shown = run_cli("show", replayed["id"], "--db", str(db), "--format", "json")
    frames = [json.loads(line) for line in shown.stdout.splitlines() if line.startswith("{")]
    assert frames, shown.stdout[:500]


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"legacy"}))
async def test_a_task_that_ends_differently_is_reported(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    db, name, _ = await _recorded(mode, tmp_path_factory, tmp_path)
    argv = changed_argv("tasks_changed,tasks-failed,tasks-input")
    proc = run_cli("replay", name, "--db", str(db), "--format", "json", "--", *argv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    differing = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
    texts = json.dumps(differing)
    assert "FINDINGS ON TAPE" in texts, texts[:2000]
    # only the research task's end differs: its final state (or its tasks/result)
    assert {e["title"] for e in differing} <= {"→ tasks/get", "→ tasks/result"}, texts[:2000]


def _step(method: str, params: Any, result: Any) -> Step:
    return Step("c2s", method, params, "result", result=result)


def _session(task_id: str, statuses: list[str]) -> list[Step]:
    handle = {"resultType": "task", "taskId": task_id, "status": "working", "createdAt": task_id}
    steps = [_step("tools/call", {"name": "research"}, handle)]
    for status in statuses:
        steps.append(_step("tasks/get", {"taskId": task_id}, {"taskId": task_id, "status": status}))
        steps.append(Step("s2c", "notifications/tasks/status", {"status": status}, "notification"))
    return steps


def test_fold_task_polls_compares_each_task_by_its_final_state() -> None:
    a, polls_a = fold_task_polls(_session("t-1", ["working", "working", "completed"]))
    b, polls_b = fold_task_polls(_session("other", ["completed"]))
    assert [s.document() for s in a] == [s.document() for s in b]
    assert [s.method for s in a] == ["tools/call", "tasks/get"]
    assert a[1].document()["result"] == {"taskId": "<task 1>", "status": "completed"}
    assert "createdAt" not in a[0].document()["result"]
    assert (polls_a, polls_b) == ([("<task 1>", 3)], [("<task 1>", 1)])
    # a different final state stays a difference
    c, _ = fold_task_polls(_session("t-1", ["working", "failed"]))
    assert [s.document() for s in c] != [s.document() for s in a]
    # a session without tasks is left alone
    plain = [_step("tasks/get", {"taskId": "x"}, {"status": "working"})] * 2
    assert fold_task_polls(plain) == (plain, [])
