"""Task sessions of both eras through the real Streamable HTTP relay, then mock and replay.

``mcptape record --upstream`` in front of a task-preset server; the recorded session is then
served by ``mcptape mock --port 0`` (an SDK client runs the same tasks against it: recorded
handles, statuses in recorded order, the same final results) and replayed with
``mcptape replay --upstream`` against a fresh server (no differences: the final results match,
whatever the polls did).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.testing.client import CallbackRecorder, make_client
from mcp_proxy.testing.process import start_http_server
from mcp_proxy.testing.task_client import TaskRun, run_task, task_extensions
from tests.conftest import matrix, mcptape_cmd
from tests.travel.conftest import run_cli

pytestmark = pytest.mark.timeout(180)

PRESETS = "tasks,tasks-input,tasks-cancelled"


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


def _client(url: str, mode: str) -> Any:
    extra = {} if mode == "legacy" else {"extensions": task_extensions()}
    return make_client(url, mode=mode, recorder=CallbackRecorder(), **extra)


async def _tasks(url: str, mode: str) -> dict[str, TaskRun]:
    async with _client(url, mode) as client:
        return {
            "research": await run_task(
                client, "research", {"topic": "wire", "duration": 0.1}, interval=0.01
            ),
            "approve": await run_task(
                client, "approve", {"action": "ship", "duration": 0.03}, interval=0.01
            ),
            "endless": await run_task(client, "endless", {}, cancel_after=1, interval=0.01),
        }


def _outcome(runs: dict[str, TaskRun]) -> dict[str, Any]:
    return {tool: (run.status, run.text(), run.error) for tool, run in runs.items()}


# One era over HTTP in the default run: 2025-11-25 tasks are mocked and replayed over stdio
# (tests/mock/test_tasks.py, tests/replay/test_tasks.py) and recorded over HTTP
# (tests/analysis/test_tasks_sdk.py::test_task_presets_through_the_http_relay); this cell of
# the era × transport matrix runs under --full.
@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"auto"}))
async def test_task_sessions_through_the_http_relay_mock_and_replay(
    mode: str, tmp_path: Path
) -> None:
    db = tmp_path / "http-tasks.db"
    name = f"http-tasks-{mode}"
    with start_http_server(PRESETS, "http") as (upstream, _server):
        relay = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0"]
        with _announced([*relay, "--db", str(db), "--name", name], "relaying ", "relay") as local:
            recorded = await _tasks(local, mode)
        assert _outcome(recorded) == {
            "research": ("completed", "findings on wire", None),
            "approve": ("completed", "ship: accept: Ada", None),
            "endless": ("cancelled", "", None),
        }

        # The mock serves the HTTP-recorded session over HTTP: the same handles and outcomes.
        mock = [*mcptape_cmd(), "mock", name, "--db", str(db), "--port", "0", "--no-repeat"]
        with _announced(mock, " at ", "mock") as mocked_url:
            mocked = await _tasks(mocked_url, mode)
        assert _outcome(mocked) == _outcome(recorded)
        assert [r.task_id for r in mocked.values()] == [r.task_id for r in recorded.values()]
        assert mocked["research"].statuses == recorded["research"].statuses

        # The replay against the live server: no differences (fresh task ids, other polls).
        proc = run_cli("replay", name, "--db", str(db), "--upstream", upstream, "--format", "json")
        report = json.loads(proc.stdout)
        differing = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
        assert proc.returncode == 0, (report["notes"], differing)
