"""The task presets (both eras) and the extension-refusing preset, directly (no proxy).

The SDK-client tests drive every task flow with :func:`run_task` over stdio and Streamable
HTTP; the raw tests check each era's wire shape byte for byte, so a driver and a server that
agree on a wrong shape cannot pass together.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mcp_proxy.limits import TEST_SERVER_TASKS
from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params
from mcp_proxy.testing.process import start_http_server
from mcp_proxy.testing.task_client import TaskRun, run_task, task_extensions
from mcp_proxy.testing.tasks import EXTENSION_TASKS, RELATED_TASK
from tests.conftest import matrix
from tests.testing.conftest import RawStdio

pytestmark = pytest.mark.timeout(90)

TASK_PRESETS = "tasks,tasks-failed,tasks-cancelled,tasks-input"
MODERN = "2026-07-28"


def _client(target: Any, mode: str, rec: CallbackRecorder) -> Any:
    extra = {} if mode == "legacy" else {"extensions": task_extensions()}
    return make_client(target, mode=mode, recorder=rec, **extra)


async def _every_flow(client: Any) -> dict[str, TaskRun]:
    return {
        "ok": await run_task(client, "research", {"topic": "tapes", "duration": 0.04}),
        "failed": await run_task(client, "doomed", {"reason": "no tape", "duration": 0.02}),
        "cancelled": await run_task(client, "endless", {}, cancel_after=1),
        "input": await run_task(client, "approve", {"action": "ship", "duration": 0.01}),
    }


def _check_flows(runs: dict[str, TaskRun], modern: bool, rec: CallbackRecorder) -> None:
    ok = runs["ok"]
    assert ok.statuses[0] == "working" and ok.status == "completed"
    assert ok.text() == "findings on tapes" and ok.polls >= 1
    failed = runs["failed"]
    assert failed.status == "failed"
    if modern:  # the error is inlined in tasks/get
        assert failed.error == {"code": -32603, "message": "no tape"} and failed.result is None
    else:  # tasks/result carries the tool result with isError
        assert failed.result is not None and failed.result["isError"] is True
        assert failed.text() == "no tape"
    cancelled = runs["cancelled"]
    assert cancelled.cancelled and cancelled.status == "cancelled" and cancelled.result is None
    answered = runs["input"]
    assert "input_required" in answered.statuses and answered.status == "completed"
    assert answered.text() == "ship: accept: Ada"
    assert answered.updates == (1 if modern else 0)
    assert [p.message for p in rec.elicitation_requests] == ["Really ship?"]
    if not modern:
        assert ok.result is not None
        assert ok.result["_meta"][RELATED_TASK] == {"taskId": ok.task_id}


@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"auto"}))
async def test_every_task_flow_over_stdio(mode: str) -> None:
    rec = CallbackRecorder()
    async with _client(stdio_params(TASK_PRESETS), mode, rec) as client:
        modern = client.protocol_version == MODERN
        assert modern == (mode == "auto")
        caps = client.server_capabilities.model_dump(exclude_none=True)
        if modern:
            assert EXTENSION_TASKS in caps["extensions"]
        else:
            assert client.protocol_version == "2025-11-25"
            assert caps["tasks"]["requests"] == {"tools": {"call": {}}}
        runs = await _every_flow(client)
    _check_flows(runs, modern, rec)


# 2025-11-25 over Streamable HTTP stays in the default run through the relay
# (tests/analysis/test_tasks_sdk.py::test_task_presets_through_the_http_relay); its direct cell
# runs under --full.
@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"auto"}))
async def test_task_flows_over_streamable_http(mode: str) -> None:
    rec = CallbackRecorder()
    with start_http_server(TASK_PRESETS, "http") as (url, _):
        async with _client(url, mode, rec) as client:
            runs = await _every_flow(client)
            modern = client.protocol_version == MODERN
    _check_flows(runs, modern, rec)


async def test_a_modern_client_resolves_a_task_by_itself_and_without_the_extension_gets_a_plain_result() -> (
    None
):
    params = stdio_params("tasks")
    async with make_client(params, extensions=task_extensions()) as client:
        resolved = await client.call_tool("research", {"topic": "auto", "duration": 0.01})
    async with make_client(params) as plain:
        sync = await plain.call_tool("research", {"topic": "auto", "duration": 0.01})
    assert resolved.content == sync.content and resolved.is_error is sync.is_error is False


# ---------------------------------------------------------------------------------------------
# the raw wire, each era


def _modern_params(extensions: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    caps: dict[str, Any] = {} if extensions is None else {"extensions": extensions}
    return {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": caps,
        },
    }


async def _answer(raw: RawStdio, method: str, params: dict[str, Any]) -> dict[str, Any]:
    rid = await raw.request(method, params)
    lines = await raw.lines_until_response(rid)
    return json.loads(lines[-1])


async def _legacy(raw: RawStdio) -> None:
    rid = await raw.request(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        },
    )
    await raw.lines_until_response(rid)
    await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def test_raw_2025_11_25_wire() -> None:
    raw = await RawStdio.start(TASK_PRESETS + ",extension-strict")
    try:
        await _legacy(raw)
        created = await _answer(
            raw,
            "tools/call",
            {"name": "research", "arguments": {"duration": 0.01}, "task": {"ttl": 5000}},
        )
        task = created["result"]["task"]
        assert list(created["result"]) == ["task"]
        assert list(task) == [
            "taskId",
            "status",
            "statusMessage",
            "createdAt",
            "lastUpdatedAt",
            "ttl",
            "pollInterval",
        ]
        assert task["status"] == "working" and task["ttl"] == 5000
        rid = await raw.request("tasks/result", {"taskId": task["taskId"]})
        lines = [json.loads(line) for line in await raw.lines_until_response(rid)]
        notes = [m for m in lines if m.get("method") == "notifications/tasks/status"]
        assert [n["params"]["status"] for n in notes] == ["completed"]
        assert lines[-1]["result"] == {
            "content": [{"type": "text", "text": "findings on mcp"}],
            "_meta": {RELATED_TASK: {"taskId": task["taskId"]}},
        }
        got = await _answer(raw, "tasks/get", {"taskId": task["taskId"]})
        assert got["result"]["status"] == "completed" and "result" not in got["result"]
        listed = await _answer(raw, "tasks/list", {})
        assert [t["taskId"] for t in listed["result"]["tasks"]] == [task["taskId"]]
        unknown = await _answer(raw, "tasks/get", {"taskId": "nope"})
        assert unknown["error"]["code"] == -32602
        done = await _answer(raw, "tasks/cancel", {"taskId": task["taskId"]})
        assert done["error"]["code"] == -32602  # a terminal task cannot be cancelled
        # the extension-strict preset: no extensions before 2026-07-28
        refused = await _answer(raw, "mcptape/echo", {"text": "hi"})
        assert refused["error"]["code"] == -32601
        # without params.task the task tool answers synchronously
        sync = await _answer(raw, "tools/call", {"name": "research", "arguments": {"duration": 0}})
        assert sync["result"]["content"] == [{"type": "text", "text": "findings on mcp"}]
    finally:
        await raw.close()


async def test_raw_2026_07_28_wire() -> None:
    raw = await RawStdio.start(TASK_PRESETS + ",extension-strict")
    tasks_ext = {EXTENSION_TASKS: {}}
    try:
        created = await _answer(
            raw,
            "tools/call",
            _modern_params(tasks_ext, name="approve", arguments={"action": "go", "duration": 0}),
        )
        handle = created["result"]
        assert handle["resultType"] == "task" and handle["status"] == "working"
        assert "task" not in handle and "result" not in handle  # flattened, no outcome
        # The extension's Task field names (SEP-2663): ttlMs and pollIntervalMs.
        assert handle["ttlMs"] == 60_000 and handle["pollIntervalMs"] == 20
        assert "ttl" not in handle and "pollInterval" not in handle
        task_id = handle["taskId"]
        got: dict[str, Any] = {}
        for _ in range(200):
            got = (await _answer(raw, "tasks/get", _modern_params(tasks_ext, taskId=task_id)))[
                "result"
            ]
            if got["status"] == "input_required":
                break
        assert got["status"] == "input_required"
        assert list(got["inputRequests"]) == ["confirm"]
        assert got["inputRequests"]["confirm"]["method"] == "elicitation/create"
        answer = {"confirm": {"action": "accept", "content": {"answer": "yes"}}}
        ack = await _answer(
            raw, "tasks/update", _modern_params(tasks_ext, taskId=task_id, inputResponses=answer)
        )
        assert ack["result"]["resultType"] == "complete"
        for _ in range(200):
            got = (await _answer(raw, "tasks/get", _modern_params(tasks_ext, taskId=task_id)))[
                "result"
            ]
            if got["status"] == "completed":
                break
        assert got["result"] == {"content": [{"type": "text", "text": "go: accept: yes"}]}
        # no tasks/result, no tasks/list in this era
        for method in ("tasks/result", "tasks/list"):
            missing = await _answer(raw, method, _modern_params(tasks_ext, taskId=task_id))
            assert missing["error"]["code"] == -32601
        # strict: a task tool without the tasks extension, and an undeclared extension method
        refused = await _answer(raw, "tools/call", _modern_params({}, name="research"))
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"] == {
            "requiredCapabilities": {"extensions": {EXTENSION_TASKS: {}}}
        }
        undeclared = await _answer(raw, "tasks/get", _modern_params({}, taskId=task_id))
        assert undeclared["error"]["code"] == -32021
        echo = await _answer(raw, "mcptape/echo", _modern_params({}, text="hi"))
        assert echo["error"]["code"] == -32021
        assert echo["error"]["data"]["requiredCapabilities"] == {
            "extensions": {"io.mcptape/echo": {}}
        }
        echoed = await _answer(
            raw, "mcptape/echo", _modern_params({"io.mcptape/echo": {}}, text="hi")
        )
        assert echoed["result"]["text"] == "hi"
    finally:
        await raw.close()


async def test_the_driver_reports_a_server_without_tasks() -> None:
    async with make_client(stdio_params("basic"), mode="legacy") as client:
        with pytest.raises(MCPError):
            await run_task(client, "echo", {"text": "x"})


async def test_a_server_keeps_at_most_test_server_tasks_tasks() -> None:
    """Past TEST_SERVER_TASKS the oldest task is dropped: a poll for it is -32602."""
    raw = await RawStdio.start("tasks")
    try:
        await _legacy(raw)
        ids = []
        for _ in range(TEST_SERVER_TASKS + 5):
            created = await _answer(
                raw,
                "tools/call",
                {"name": "research", "arguments": {"duration": 0}, "task": {"ttl": 1000}},
            )
            ids.append(created["result"]["task"]["taskId"])
        oldest = await _answer(raw, "tasks/get", {"taskId": ids[4]})
        assert oldest["error"]["code"] == -32602
        kept = await _answer(raw, "tasks/get", {"taskId": ids[5]})
        assert kept["result"]["taskId"] == ids[5]
        listed = await _answer(raw, "tasks/list", {})
        assert len(listed["result"]["tasks"]) == TEST_SERVER_TASKS
    finally:
        await raw.close()


async def test_input_required_without_a_back_channel_fails_the_task() -> None:
    """2025-11-25 over stateless HTTP the server cannot ask: the task fails, saying why."""
    with start_http_server("tasks-input", "http", stateless=True) as (url, _):
        async with _client(url, "legacy", CallbackRecorder()) as client:
            run = await run_task(client, "approve", {"duration": 0}, interval=0.01)
    assert run.status == "failed"
    assert run.error is not None and "cannot carry" in run.error["message"]
