"""Intercept over stdio with real parts: the SDK client and the test server through the real
``mcptape record --intercept`` process, each held ``tools/call`` decided from the CLI
(``mcptape intercept resolve``, in-process through the real entry point).

The client sees exactly what was decided; the recording holds the original frame on its
channel, what mcptape sent on ``inject``, and an ``inject.intercept`` finding per decision; a
held request does not stop the server's notifications; nobody deciding forwards on timeout.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import CallbackRecorder, make_client, stdio_params, tool_text
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(90)


def through_mcptape(
    params: StdioServerParameters, db: Path, *flags: str, stderr: Path | None = None
) -> StdioServerParameters:
    """The server behind ``mcptape record --db DB FLAGS -- …`` (stderr kept in a file)."""
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", "held", *flags, "--"]
    argv += [params.command, *params.args]
    if stderr is None:
        return params.model_copy(update={"command": argv[0], "args": argv[1:]})
    script = 'exec "$@" 2>>"$MCPTAPE_TEST_ERR"'
    env = {**(params.env or {}), "MCPTAPE_TEST_ERR": str(stderr)}
    return params.model_copy(
        update={"command": "sh", "args": ["-c", script, "sh", *argv], "env": env}
    )


def held(db: Path) -> list[dict[str, Any]]:
    done = run_mcptape("intercept", "list", "--format", "json", "--db", str(db))
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["held"])


async def next_held(db: Path, count: int = 1) -> list[dict[str, Any]]:
    """Wait (polling the CLI) until ``count`` messages are held; them."""
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        found[:] = held(db)
        return len(found) >= count

    assert await asyncio.to_thread(rdb.wait_until, enough, 30.0, 0.05), found
    return found


async def resolve(db: Path, iid: int, *how: str) -> dict[str, Any]:
    done = await asyncio.to_thread(
        run_mcptape, "intercept", "resolve", str(iid), *how, "--by", "tester", "--format",
        "json", "--db", str(db),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


async def test_a_held_tools_call_resolved_four_ways(tmp_path: Path) -> None:
    db = tmp_path / "held.sqlite"
    params = through_mcptape(
        stdio_params("basic"), db, "--intercept", "method=tools/call name=echo"
    )
    edit = tmp_path / "edit.json"
    answer = tmp_path / "answer.json"
    answer.write_text('{"error": {"code": -32001, "message": "denied by a person"}}')
    async with make_client(params, mode="legacy", recorder=CallbackRecorder()) as client:
        # forward: the call arrives as the host sent it
        call = asyncio.create_task(client.call_tool("echo", {"text": "one"}))
        (one,) = await next_held(db)
        assert json.loads(one["message"])["params"]["arguments"] == {"text": "one"}
        assert (one["direction"], one["kind"], one["method"]) == ("c2s", "request", "tools/call")
        assert not call.done()
        await resolve(db, one["id"], "--forward")
        assert tool_text(await call) == "one"

        # edit: the whole message from a file, the arguments changed
        call = asyncio.create_task(client.call_tool("echo", {"text": "two"}))
        (two,) = await next_held(db)
        message = json.loads(two["message"])
        message["params"]["arguments"]["text"] = "edited"
        edit.write_text(json.dumps(message, indent=2))
        assert (await resolve(db, two["id"], "--edit", str(edit)))["decision"] == "edit"
        assert tool_text(await call) == "edited"

        # --set: one value of the held message
        call = asyncio.create_task(client.call_tool("echo", {"text": "three"}))
        (three,) = await next_held(db)
        await resolve(db, three["id"], "--set", "params.arguments.text=set by hand")
        assert tool_text(await call) == "set by hand"

        # answer with an error in the server's place
        call = asyncio.create_task(client.call_tool("echo", {"text": "four"}))
        (four,) = await next_held(db)
        await resolve(db, four["id"], "--answer", str(answer))
        with pytest.raises(MCPError) as denied:
            await call
        assert (denied.value.code, str(denied.value.error.message)) == (
            -32001,
            "denied by a person",
        )

        # drop: nobody receives it; the wire goes on (add is not held)
        call = asyncio.create_task(client.call_tool("echo", {"text": "five"}))
        (five,) = await next_held(db)
        await resolve(db, five["id"], "--drop")
        added = await client.call_tool("add", {"a": 1, "b": 2})
        assert "3" in tool_text(added)
        assert not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert held(db) == []

    sid = rdb.sessions(db)[0]["id"]
    assert rdb.wait_until(lambda: rdb.sessions(db)[0]["status"] == "ended")
    frames = rdb.frames(db, sid)
    calls = [
        json.loads(f["raw"])["params"]["arguments"]
        for f in frames
        if f["method"] == "tools/call" and f["direction"] == "c2s" and f["channel"] == "stdio"
    ]
    assert [c.get("text") for c in calls] == ["one", "two", "three", "four", "five", None]
    injected = [(f["direction"], json.loads(f["raw"])) for f in frames if f["channel"] == "inject"]
    assert [(d, m.get("params", {}).get("arguments")) for d, m in injected[:2]] == [
        ("c2s", {"text": "edited"}),
        ("c2s", {"text": "set by hand"}),
    ]
    assert injected[2] == (
        "s2c",
        {"jsonrpc": "2.0", "id": json.loads(four["msg_id"]), "error": {
            "code": -32001, "message": "denied by a person"}},
    )  # fmt: skip
    assert len(injected) == 3
    # the server answered only what reached it: one, edited, set by hand, then add
    answers = [
        tool_text_of(f["raw"])
        for f in frames
        if f["direction"] == "s2c" and f["channel"] == "stdio" and f["kind"] == "response"
    ]
    assert [a for a in answers if a in ("one", "two", "edited", "set by hand", "four", "five")] == [
        "one",
        "edited",
        "set by hand",
    ]
    findings = rdb.rows(
        db, "SELECT title, detail FROM findings WHERE code = 'inject.intercept' ORDER BY id"
    )
    decisions = [
        (json.loads(f["detail"])["decision"], json.loads(f["detail"])["by"]) for f in findings
    ]
    assert decisions == [
        ("forward", "tester"),
        ("edit", "tester"),
        ("edit", "tester"),
        ("answer", "tester"),
        ("drop", "tester"),
    ]
    assert findings[0]["title"] == "intercepted tools/call: forward by tester"


def tool_text_of(raw: bytes) -> str | None:
    result = json.loads(raw).get("result")
    if not isinstance(result, dict):
        return None
    texts = [c.get("text") for c in result.get("content", []) if isinstance(c, dict)]
    return "".join(t for t in texts if isinstance(t, str)) or None


async def test_a_held_request_does_not_stop_the_servers_notifications(tmp_path: Path) -> None:
    """``slow`` (called first) reports progress and logs while the later ``echo`` is held:
    they reach the client, and ``slow``'s result too, before anyone decides about ``echo``.
    (Requests the host sends after ``echo`` wait behind it: order is kept.)"""
    db = tmp_path / "flow.sqlite"
    params = through_mcptape(
        stdio_params("basic,slow"), db, "--intercept", "method=tools/call name=echo"
    )
    recorder = CallbackRecorder()
    progress: list[float] = []
    started = asyncio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        started.set()

    steps = 30
    async with make_client(params, mode="legacy", recorder=recorder) as client:
        slow = asyncio.create_task(
            client.call_tool("slow", {"steps": steps, "delay": 0.1}, progress_callback=on_progress)
        )
        await started.wait()
        echo = asyncio.create_task(client.call_tool("echo", {"text": "waits"}))
        (waiting,) = await next_held(db)
        at_hold = len(progress)
        # (the client asks tools/list before it hands over slow's result: that request waits
        # behind the held echo, so the test waits for the notifications, not the result)
        # (the last log and the last progress notification reach their callbacks in either
        # order: wait for both)
        last_log = f"slow: step {steps}/{steps}"
        every_step = await asyncio.to_thread(
            rdb.wait_until,
            lambda: (
                len(progress) == steps and any(last_log in str(log.data) for log in recorder.logs)
            ),
        )
        assert every_step and at_hold < steps and progress == list(range(1, steps + 1))
        assert not echo.done() and [h["id"] for h in held(db)] == [waiting["id"]]
        await resolve(db, waiting["id"], "--forward")
        assert tool_text(await echo) == "waits"
        assert tool_text(await slow) == f"done after {steps} steps"


async def test_nobody_deciding_forwards_on_timeout_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "timeout.sqlite"
    err = tmp_path / "stderr.txt"
    params = through_mcptape(
        stdio_params("basic"),
        db,
        "--intercept",
        "method=tools/call",
        "--intercept-timeout",
        "0.5",
        stderr=err,
    )
    async with make_client(params, mode="legacy") as client:
        result = await client.call_tool("echo", {"text": "late"})
        assert tool_text(result) == "late"
    (row,) = rdb.rows(db, "SELECT id, state, decision, resolved_by FROM intercepts")
    assert (row["state"], row["decision"]) == ("resolved", "timeout")
    lines = err.read_text().splitlines()
    assert (
        f"mcptape: #{row['id']} forwarded unchanged after 0.5 s (--intercept-timeout):"
        " nobody resolved it" in lines
    )
    assert any(
        line.startswith(f"mcptape: held #{row['id']} (c2s request tools/call)") for line in lines
    )
    assert rdb.wait_until(
        lambda: rdb.rows(db, "SELECT detail FROM findings WHERE code = 'inject.intercept'")
    )
    (finding,) = rdb.rows(db, "SELECT title, detail FROM findings WHERE code = 'inject.intercept'")
    assert finding["title"] == "intercepted tools/call: timeout"


@pytest.mark.parametrize("direction", ["c2s", "s2c"])
def test_a_host_that_leaves_while_a_message_is_held_ends_the_relay(
    tmp_path: Path, direction: str
) -> None:
    """``--intercept-timeout 0`` (wait for ever) and the host closes its pipes while a message
    is held: the relay lets the message go ('abandoned') and ends — it does not wait for ever
    for a person nobody will be. c2s: the host's request is held; s2c: the server's answer."""
    import subprocess
    import sys
    import time

    db = tmp_path / "left.sqlite"
    rule = "direction=c2s method=ping" if direction == "c2s" else "direction=response method=ping"
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--intercept", rule]
    argv += ["--intercept-timeout", "0", "--", sys.executable, "-m", "mcp_proxy.testing.rawecho"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        proc.stdin.flush()
        assert rdb.wait_until(lambda: len(held(db)) == 1)
        proc.stdin.close()
        proc.stdout.close()  # the host is gone: both of its pipes
        began = time.monotonic()
        proc.wait(15)
        assert time.monotonic() - began < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    (row,) = rdb.rows(db, "SELECT state, decision, resolved_by FROM intercepts")
    assert (row["state"], row["decision"]) == ("resolved", "abandoned")
