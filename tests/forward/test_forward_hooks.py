"""Fault injection and intercept through ``mcptape record --forward`` (the lean engine): the
same hooks the reverse relay calls, at the same boundaries, with real parts — the SDK client
over HTTPS through the real proxy (trusting its CA) to a real TLS SDK server; intercepts
resolved from the CLI. The client sees exactly what was decided; the recording holds the frame
the peer sent (``http``/``sse``) and the frame mcptape sent instead (``inject``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import make_client, tool_text
from tests.forward.conftest import Forward, TLSFiles, TLSServer, run_forward, start_tls_server
from tests.helpers import db as rdb
from tests.intercept.test_stdio_sdk import held, next_held, resolve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tls_json(tls_files: TLSFiles) -> Iterator[TLSServer]:
    """Streamable HTTP answering with one JSON body (the small-message boundary)."""
    with start_tls_server(tls_files, "--mode", "json") as s:
        yield s


def client_of(fw: Forward, url: str) -> Any:
    return make_client(streamable_http_client(url, http_client=fw.http_client()), mode="legacy")


def findings(db: Path, code: str) -> list[dict[str, Any]]:
    rows = rdb.rows(db, "SELECT detail FROM findings WHERE code = ? ORDER BY id", code)
    return [json.loads(r["detail"]) for r in rows]


def inject_frames(db: Path) -> list[tuple[str, dict[str, Any]]]:
    frames = rdb.frames(db)
    return [(f["direction"], json.loads(f["raw"])) for f in frames if f["channel"] == "inject"]


def sent_texts(db: Path, channel: str = "http") -> list[str | None]:
    """The ``echo`` texts of the tools/call requests as the host sent them."""
    return [
        json.loads(f["raw"])["params"]["arguments"].get("text")
        for f in rdb.frames(db)
        if f["channel"] == channel and f["method"] == "tools/call" and f["direction"] == "c2s"
        and json.loads(f["raw"])["params"]["name"] == "echo"
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["sse", "json"])
async def test_fault_rules_on_the_forward_proxy(
    tmp_path: Path, confdir: Path, tls_stateful: TLSServer, tls_json: TLSServer, mode: str
) -> None:
    """A request answered with an error in the server's place (the server never sees it), and
    a response replaced on its way to the host — an SSE event (stateful server) or a whole
    JSON body (json server)."""
    url = tls_stateful.url if mode == "sse" else tls_json.url
    db = tmp_path / "faults.db"
    rules = (
        "--fault",
        "error code=-32001 message=refused direction=request method=tools/call name=echo",
        "--fault",
        "tool-error text=boom direction=response method=tools/call name=add",
    )
    with run_forward(db, confdir, *rules) as fw:
        async with client_of(fw, url) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("echo", {"text": "hi"})
            assert refused.value.code == -32001
            result = await client.call_tool("add", {"a": 1, "b": 2})
            assert result.is_error and tool_text(result) == "boom"
        assert fw.stop() == 0
    injected = inject_frames(db)
    assert [d for d, _ in injected] == ["s2c", "s2c"]
    assert injected[0][1]["error"]["code"] == -32001
    assert injected[1][1]["result"]["isError"] is True
    assert len(findings(db, "inject.error")) == 1 and len(findings(db, "inject.tool_error")) == 1
    frames = rdb.frames(db)
    # the server's answer to add is recorded as it sent it, beside the replacement
    add_answers = [
        json.loads(f["raw"])
        for f in frames
        if f["channel"] in ("http", "sse") and f["direction"] == "s2c" and f["kind"] == "response"
        and "structuredContent" in json.dumps(json.loads(f["raw"]))
    ]  # fmt: skip
    assert add_answers and not add_answers[-1]["result"].get("isError")
    assert sent_texts(db) == ["hi"]  # recorded as the host sent it, though never forwarded


async def test_intercept_on_the_forward_proxy(
    tmp_path: Path, confdir: Path, tls_stateful: TLSServer
) -> None:
    """A held tools/call resolved from the CLI: forwarded, edited, answered, dropped."""
    db = tmp_path / "held.db"
    answer = tmp_path / "answer.json"
    answer.write_text('{"error": {"code": -32002, "message": "denied by a person"}}')
    with run_forward(db, confdir, "--intercept", "method=tools/call name=echo") as fw:
        async with client_of(fw, tls_stateful.url) as client:
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
            assert denied.value.code == -32002

            call = asyncio.create_task(client.call_tool("echo", {"text": "four"}))
            (four,) = await next_held(db)
            await resolve(db, four["id"], "--drop")
            assert "7" in tool_text(await client.call_tool("add", {"a": 3, "b": 4}))
            done = await asyncio.to_thread(
                rdb.wait_until, lambda: len(findings(db, "inject.intercept")) == 4
            )
            assert done and not call.done()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        assert fw.stop() == 0
    assert held(db) == []
    assert [(f["decision"], f["by"], f["sent"]) for f in findings(db, "inject.intercept")] == [
        ("forward", "tester", "c2s"),
        ("edit", "tester", "c2s"),
        ("answer", "tester", "s2c"),
        ("drop", "tester", None),
    ]
    injected = inject_frames(db)
    assert injected[0][0] == "c2s" and injected[0][1]["params"]["arguments"] == {"text": "edited"}
    assert injected[1][0] == "s2c" and injected[1][1]["error"]["message"] == "denied by a person"
    assert sent_texts(db) == ["one", "two", "three", "four"]  # as the host sent them


async def test_an_sse_event_held_on_the_forward_proxy(
    tmp_path: Path, confdir: Path, tls_stateful: TLSServer
) -> None:
    """The answer to ``add`` (an SSE event on its POST's stream) is held there and edited."""
    db = tmp_path / "event.db"
    rule = "direction=response method=tools/call name=add"
    with run_forward(db, confdir, "--intercept", rule) as fw:
        async with client_of(fw, tls_stateful.url) as client:
            call = asyncio.create_task(client.call_tool("add", {"a": 1, "b": 2}))
            (event,) = await next_held(db)
            assert (event["direction"], event["kind"]) == ("s2c", "response")
            message = json.loads(event["message"])
            assert "3" in json.dumps(message["result"])
            # another exchange passes the held event
            assert tool_text(await client.call_tool("echo", {"text": "passes"})) == "passes"
            assert not call.done()
            message["result"]["content"] = [{"type": "text", "text": "forty-two"}]
            message["result"]["structuredContent"] = {"result": 42}
            edit = tmp_path / "edit.json"
            edit.write_text(json.dumps(message))
            await resolve(db, event["id"], "--edit", str(edit))
            result = await call
            assert (tool_text(result), result.structured_content) == ("forty-two", {"result": 42})
        assert fw.stop() == 0
    injected = inject_frames(db)
    assert len(injected) == 1 and injected[0][0] == "s2c"
    assert injected[0][1]["result"]["content"][0]["text"] == "forty-two"
    (finding,) = findings(db, "inject.intercept")
    assert (finding["decision"], finding["direction"]) == ("edit", "s2c")
    original = [
        f for f in rdb.frames(db) if f["channel"] == "sse" and f["msg_id"] == event["msg_id"]
        and f["kind"] == "response"
    ]  # fmt: skip
    assert original and "forty-two" not in original[0]["raw"].decode()


async def test_mitmproxy_engine_refuses_faults_in_one_line(tmp_path: Path, confdir: Path) -> None:
    from tests.relay.conftest import MCPTAPE

    done = await asyncio.create_subprocess_exec(
        str(MCPTAPE), "record", "--forward", "--engine", "mitmproxy", "--port", "0",
        "--db", str(tmp_path / "x.db"), "--fault", "error code=-32001 method=tools/call",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**__import__("os").environ, "MCPTAPE_MITMPROXY_CONFDIR": str(confdir)},
    )  # fmt: skip
    _, err = await done.communicate()
    lines = err.decode().strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, lines
    assert "lean engine" in lines[0] and "Traceback" not in lines[0]


async def test_nobody_deciding_forwards_on_timeout_on_the_forward_proxy(
    tmp_path: Path, confdir: Path, tls_stateful: TLSServer
) -> None:
    db = tmp_path / "timeout.db"
    args = ("--intercept", "method=tools/call", "--intercept-timeout", "0.5")
    with run_forward(db, confdir, *args) as fw:
        async with client_of(fw, tls_stateful.url) as client:
            assert tool_text(await client.call_tool("echo", {"text": "late"})) == "late"
        assert fw.stop() == 0
    (row,) = rdb.rows(db, "SELECT id, state, decision FROM intercepts")
    assert (row["state"], row["decision"]) == ("resolved", "timeout")
    said = f"mcptape: #{row['id']} forwarded unchanged after 0.5 s (--intercept-timeout):"
    assert any(line.startswith(said) for line in fw.stderr), fw.stderr
    (finding,) = rdb.rows(db, "SELECT title FROM findings WHERE code = 'inject.intercept'")
    assert finding["title"] == "intercepted tools/call: timeout"
    assert inject_frames(db) == []  # forwarded unchanged: nothing sent in a peer's place
