"""The mock serves task sessions of both eras, recorded through the real stdio relay.

A task is recorded with its handle, its polls and its end; the live client under the mock
polls on its own schedule. The mock answers the task-augmented call with the recorded handle,
the polls with the recorded statuses in recorded order, a poll beyond the recorded ones with
the last status (also under ``--no-repeat``: polls are timing, not new requests), and — once
the live client was told the task is over — never a status from before its end.

Each era's session is recorded once per module (:func:`_recorded`); each test mocks a copy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params
from mcp_proxy.testing.task_client import (
    create_task,
    run_task,
    task_extensions,
    task_request,
)
from tests.conftest import matrix
from tests.helpers.proxy import proxied
from tests.helpers.shared import copy_sqlite
from tests.travel.conftest import child_env

pytestmark = pytest.mark.timeout(120)

PRESETS = "tasks,tasks-cancelled"
TERMINAL = {"completed", "failed", "cancelled"}


def _client(target: Any, mode: str) -> Any:
    extra = {} if mode == "legacy" else {"extensions": task_extensions()}
    return make_client(target, mode=mode, recorder=CallbackRecorder(), **extra)


def _mock(db: Path, name: str, *flags: str) -> StdioServerParameters:
    args = ["-m", "mcp_proxy", "mock", name, "--db", str(db), *flags]
    return StdioServerParameters(command=sys.executable, args=args, env=child_env())


async def _record(db: Path, name: str, mode: str) -> dict[str, Any]:
    """research polled to its end (several polls), endless cancelled after two polls."""
    async with _client(proxied(stdio_params(PRESETS), db, name), mode) as client:
        done = await run_task(client, "research", {"topic": "tape", "duration": 0.3}, interval=0.01)
        stopped = await run_task(client, "endless", {}, cancel_after=2, interval=0.01)
    assert done.status == "completed" and done.polls >= 3, done.statuses
    assert stopped.status == "cancelled", stopped.statuses
    return {"research": done, "endless": stopped}


_RECORDED: dict[str, tuple[Path, dict[str, Any]]] = {}


async def _recorded(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> tuple[Path, str, dict[str, Any]]:
    """The session of ``mode`` (recorded through the real relay once per module): a copy of its
    database for this test, its name, and what the recording client saw."""
    name = f"tasks-{mode}"
    if mode not in _RECORDED:
        db = tmp_path_factory.mktemp(name) / "tasks.db"
        _RECORDED[mode] = (db, await _record(db, name, mode))
    source, runs = _RECORDED[mode]
    return copy_sqlite(source, tmp_path / "tasks.db"), name, runs


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"legacy"}))
async def test_the_mock_serves_a_task_session(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    db, name, recorded = await _recorded(mode, tmp_path_factory, tmp_path)
    rec_ok, rec_cancel = recorded["research"], recorded["endless"]

    async with _client(_mock(db, name, "--no-repeat"), mode) as client:
        # The handle is the recorded one.
        handle = await create_task(client, "research", {"topic": "tape", "duration": 0.3})
        assert handle["taskId"] == rec_ok.task_id and handle["status"] == "working"
        # Polls get the recorded statuses in recorded order, then the last one again (no
        # miss under --no-repeat), however often the live client polls.
        polls = rec_ok.polls + 3
        seen = [
            (await task_request(client, "tasks/get", taskId=rec_ok.task_id))["status"]
            for _ in range(polls)
        ]
        recorded_polls = rec_ok.statuses[1 : 1 + rec_ok.polls]
        assert seen[: len(recorded_polls)] == recorded_polls
        assert set(seen[len(recorded_polls) :]) == {"completed"}
        if mode == "legacy":
            final = await task_request(client, "tasks/result", taskId=rec_ok.task_id)
            assert final["content"] == rec_ok.result["content"]  # type: ignore[index]

        # Cancelled at once (the recording polled twice first): no poll goes back to "working".
        await create_task(client, "endless", {})
        await task_request(client, "tasks/cancel", taskId=rec_cancel.task_id)
        after = [
            (await task_request(client, "tasks/get", taskId=rec_cancel.task_id))["status"]
            for _ in range(3)
        ]
        assert after == ["cancelled"] * 3


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"legacy"}))
async def test_a_task_result_fetched_without_polling_ends_the_task_for_later_polls(
    mode: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A live client that asks less often than the recorded one still sees the task end."""
    db, name, recorded = await _recorded(mode, tmp_path_factory, tmp_path)
    rec_ok = recorded["research"]
    async with _client(_mock(db, name), mode) as client:
        task = await create_task(client, "research", {"topic": "tape", "duration": 0.3})
        if mode == "legacy":
            result = await task_request(client, "tasks/result", taskId=task["taskId"])
            assert result["content"] == rec_ok.result["content"]  # type: ignore[index]
        else:  # the live client polls until it is told the end, then once more
            status = task["status"]
            while status not in TERMINAL:
                status = (await task_request(client, "tasks/get", taskId=task["taskId"]))["status"]
        again = await task_request(client, "tasks/get", taskId=task["taskId"])
        assert again["status"] == "completed"
        if mode != "legacy":
            assert again["result"] == rec_ok.result
