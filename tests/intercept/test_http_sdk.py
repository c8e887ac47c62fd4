"""Intercept over Streamable HTTP with real parts: the SDK client, the real ``mcptape record
--upstream`` process and an SDK upstream; decisions from the CLI (in-process entry point).

A held request holds only its own exchange (separate HTTP requests pass it); a held response
is an SSE event held within its stream; what the client sees is what was decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import make_client, tool_text
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.intercept.test_stdio_sdk import held, next_held, resolve
from tests.relay.conftest import start_upstream
from tests.relay.launch import relay_process

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_upstream("--preset", "basic,slow", "--transport", "http") as up:
        yield up.url


@contextlib.contextmanager
def relay(upstream: str, db: Path, *rules: str) -> Iterator[tuple[str, list[str]]]:
    argv = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", str(db)]
    for rule in rules:
        argv += ["--intercept", rule]
    with relay_process(argv, stop_timeout=20) as (_proc, url, lines):
        yield url, lines


def findings(db: Path) -> list[dict[str, Any]]:
    rows = rdb.rows(db, "SELECT detail FROM findings WHERE code = 'inject.intercept' ORDER BY id")
    return [json.loads(r["detail"]) for r in rows]


async def test_held_http_requests_resolved_four_ways(upstream: str, tmp_path: Path) -> None:
    db = tmp_path / "http.sqlite"
    answer = tmp_path / "answer.json"
    answer.write_text('{"error": {"code": -32001, "message": "denied by a person"}}')
    with relay(upstream, db, "method=tools/call name=echo") as (url, _lines):
        async with make_client(url, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("echo", {"text": "one"}))
            (one,) = await next_held(db)
            assert (one["direction"], one["method"]) == ("c2s", "tools/call")
            # another exchange passes the held one
            assert "3" in tool_text(await client.call_tool("add", {"a": 1, "b": 2}))
            assert not call.done()
            await resolve(db, one["id"], "--forward")
            assert tool_text(await call) == "one"

            call = asyncio.create_task(client.call_tool("echo", {"text": "two"}))
            (two,) = await next_held(db)
            await resolve(db, two["id"], "--set", "params.arguments.text=edited")
            assert tool_text(await call) == "edited"

            call = asyncio.create_task(client.call_tool("echo", {"text": "three"}))
            (three,) = await next_held(db)
            await resolve(db, three["id"], "--answer", str(answer))
            with pytest.raises(MCPError) as denied:
                await call
            assert denied.value.code == -32001

            call = asyncio.create_task(client.call_tool("echo", {"text": "four"}))
            (four,) = await next_held(db)
            await resolve(db, four["id"], "--drop")
            assert "7" in tool_text(await client.call_tool("add", {"a": 3, "b": 4}))
            # the relay carried the drop out (its finding is recorded); the host has no answer
            assert await asyncio.to_thread(rdb.wait_until, lambda: len(findings(db)) == 4)
            assert not call.done()
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
    assert held(db) == []
    assert [(f["decision"], f["by"], f["sent"]) for f in findings(db)] == [
        ("forward", "tester", "c2s"),
        ("edit", "tester", "c2s"),
        ("answer", "tester", "s2c"),
        ("drop", "tester", None),
    ]
    frames = rdb.frames(db)
    inject = [(f["direction"], json.loads(f["raw"])) for f in frames if f["channel"] == "inject"]
    assert inject[0][0] == "c2s" and inject[0][1]["params"]["arguments"] == {"text": "edited"}
    assert inject[1][0] == "s2c" and inject[1][1]["error"]["message"] == "denied by a person"
    sent = [
        json.loads(f["raw"])["params"]["arguments"].get("text")
        for f in frames
        if f["channel"] == "http" and f["method"] == "tools/call"
    ]
    assert sent == ["one", None, "two", "three", "four", None]  # as the host sent them


async def test_an_sse_event_held_within_its_stream(upstream: str, tmp_path: Path) -> None:
    """The answer to ``add`` comes as an SSE event on its POST's stream: it is held there,
    ``echo`` (another exchange) passes it, then the edit reaches the client."""
    db = tmp_path / "sse.sqlite"
    with relay(upstream, db, "direction=response method=tools/call name=add") as (url, _lines):
        async with make_client(url, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("add", {"a": 1, "b": 2}))
            (event,) = await next_held(db)
            assert (event["direction"], event["kind"], event["method"]) == (
                "s2c",
                "response",
                "tools/call",
            )
            message = json.loads(event["message"])
            assert "3" in json.dumps(message["result"])
            assert tool_text(await client.call_tool("echo", {"text": "passes"})) == "passes"
            assert not call.done()
            message["result"]["content"] = [{"type": "text", "text": "forty-two"}]
            message["result"]["structuredContent"] = {"result": 42}
            edit = tmp_path / "edit.json"
            edit.write_text(json.dumps(message))
            await resolve(db, event["id"], "--edit", str(edit))
            result = await call
            assert (tool_text(result), result.structured_content) == ("forty-two", {"result": 42})
    assert rdb.wait_until(lambda: len(findings(db)) == 1)
    (finding,) = findings(db)
    assert (finding["decision"], finding["direction"]) == ("edit", "s2c")
    frames = rdb.frames(db)
    (injected,) = [f for f in frames if f["channel"] == "inject"]
    assert injected["direction"] == "s2c"
    assert json.loads(injected["raw"])["result"]["content"][0]["text"] == "forty-two"
    original = [f for f in frames if f["channel"] == "sse" and b'"id":' in f["raw"] and
                f["kind"] == "response" and f["msg_id"] == event["msg_id"]]  # fmt: skip
    assert original and "forty-two" not in original[0]["raw"].decode()


async def test_stopping_the_relay_lets_a_held_request_go(upstream: str, tmp_path: Path) -> None:
    """SIGINT while a request is held: the relay stops at once (the hold is abandoned, not
    waited out for its 300 s) and the row says so."""
    db = tmp_path / "stop.sqlite"
    argv = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", str(db)]
    argv += ["--intercept", "method=tools/call name=echo"]
    with relay_process(argv, stop_timeout=20) as (proc, url, lines):

        async def host() -> None:
            async with make_client(url, mode="legacy") as client:
                await client.call_tool("echo", {"text": "held at the end"})

        call = asyncio.create_task(host())
        await next_held(db)
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(proc.wait, 15)
        took = time.monotonic() - began
        # (the client fails — its relay is gone — which is not the point here)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(call, 10)
    assert code == 0 and took < 10, (code, took, lines)
    (after,) = rdb.rows(db, "SELECT state, decision FROM intercepts")
    assert (after["state"], after["decision"]) == ("resolved", "abandoned")


async def test_a_host_that_leaves_a_held_request_abandons_it(upstream: str, tmp_path: Path) -> None:
    """The host's connection goes while its request is held: the row does not stay "held"
    (a person deciding later would decide nothing): it is resolved ``abandoned``."""
    import aiohttp

    db = tmp_path / "left.sqlite"
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo"}}
    headers = {"Accept": "application/json, text/event-stream"}
    with relay(upstream, db, "method=tools/call name=echo") as (url, _lines):
        async with aiohttp.ClientSession() as http:
            post = asyncio.create_task(http.post(url, json=call, headers=headers))
            (row,) = await next_held(db)
            post.cancel()  # the host gives up: its connection closes
            with contextlib.suppress(asyncio.CancelledError):
                await post

        def abandoned() -> bool:
            (now,) = rdb.rows(db, "SELECT state, decision FROM intercepts")
            return (now["state"], now["decision"]) == ("resolved", "abandoned")

        assert await asyncio.to_thread(rdb.wait_until, abandoned, 10.0), held(db)
    assert row["id"] == 1
