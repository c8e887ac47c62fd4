"""``mcptape mock --fault``: a faulty mock fails the way a real failing server does (issue 15).

An SDK client runs against the real ``mcptape mock`` command serving a real recording, with fault
rules on some methods; for each fault the same client code runs against a real SDK test server
that fails on purpose (``protocol_error``, ``fail``, ``hang``, ``crash`` of the ``failing``,
``slow`` and ``crash`` presets), and what the client observes — the exception type and JSON-RPC
error, the ``isError`` result, the timeout, the closed connection — must be the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.testing.client import make_client, tool_text
from mcp_proxy.testing.process import start_http_server
from tests.conftest import mcptape_cmd
from tests.travel.conftest import PY, RECORDINGS, child_env, server

pytestmark = pytest.mark.timeout(240)

BASIC = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
REAL = server("basic,slow,failing,crash")
#: The read timeout of a call that is never answered.
READ_TIMEOUT = 1.0
#: The recorded arguments of the ``fail`` call (so that the mock has its answer to corrupt).
FAIL = {"message": "scripted failure"}
GREET = {"name": "Ada"}

STDIO_RULES = [
    "error code=-32000 message='deliberate protocol error' name=add",
    "tool-error text='deliberate failure' name=echo",
    "delay ms=600 method=prompts/get",
    "drop direction=c2s name=fail nth=1",
    "corrupt mode=invalid-json direction=s2c name=fail",
    "duplicate method=resources/list direction=s2c",
    "disconnect mode=close-stdin name=slow",
]


def faulty_stdio(*rules: str) -> StdioServerParameters:
    args = ["-m", "mcp_proxy", "mock", BASIC]
    for rule in rules:
        args += ["--fault", rule]
    return StdioServerParameters(command=PY, args=args, env=child_env())


def real_stdio() -> StdioServerParameters:
    return StdioServerParameters(command=REAL[0], args=REAL[1:], env=child_env())


async def outcome(call: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
    """What the client observed: ("ok", value) or (exception type, (code, message))."""
    try:
        return "ok", await call()
    except MCPError as exc:
        return type(exc).__name__, (exc.code, exc.message)
    except Exception as exc:
        return type(exc).__name__, str(exc)


async def test_stdio_faults_look_like_a_real_failing_server() -> None:
    async with (
        make_client(faulty_stdio(*STDIO_RULES), mode="legacy") as mock,
        make_client(real_stdio(), mode="legacy") as real,
    ):
        # error: a JSON-RPC error in the server's place — as a tool raising MCPError.
        faulty = await outcome(lambda: mock.call_tool("add", {"a": 1, "b": 2}))
        genuine = await outcome(lambda: real.call_tool("protocol_error", {}))
        assert faulty == genuine == ("MCPError", (-32000, "deliberate protocol error"))

        # tool-error: the tool ran and failed (isError) — as a tool raising ToolError.
        bad = await mock.call_tool("echo", {"text": "hello, wire"})
        also_bad = await real.call_tool("fail", {})
        assert bad.is_error is also_bad.is_error is True
        assert [c.type for c in bad.content] == [c.type for c in also_bad.content] == ["text"]
        assert tool_text(bad) == "deliberate failure"
        assert tool_text(also_bad).endswith("deliberate failure")

        # delay: answered, late.
        t0 = time.monotonic()
        prompt = await mock.get_prompt("greet", GREET)
        assert time.monotonic() - t0 >= 0.6 and prompt.messages

        # drop: never answered — as a tool that hangs; the client's read timeout decides.
        faulty = await outcome(lambda: mock.call_tool("fail", FAIL, READ_TIMEOUT))
        genuine = await outcome(lambda: real.call_tool("hang", {"seconds": 30}, READ_TIMEOUT))
        assert faulty[0] == "MCPError" and faulty == genuine, (faulty, genuine)

        # corrupt: a response that does not parse never reaches the caller either.
        assert await outcome(lambda: mock.call_tool("fail", FAIL, READ_TIMEOUT)) == faulty

        # duplicate: the client takes the first copy and carries on.
        assert (await mock.list_resources()).resources
        logged = await mock.call_tool("log", {"message": "scripted log", "level": "warning"})
        assert not logged.is_error

        # disconnect: the server goes away mid-call — as a server process that crashes.
        faulty = await outcome(lambda: mock.call_tool("slow", {"steps": 3, "delay": 0.05}))
        genuine = await outcome(lambda: real.call_tool("crash", {}))
        assert faulty == genuine and faulty[0] == "MCPError", (faulty, genuine)


HTTP_RULES = [
    "http status=429 header=Retry-After:7 body='slow down' name=add",
    "error code=-32000 message='deliberate protocol error' name=echo",
    "disconnect mode=end-stream after=2 name=slow times=1",
    "disconnect mode=reset direction=s2c name=log nth=1",
    "disconnect mode=kill direction=s2c name=log",  # counts only what the reset rule left
]


@contextlib.contextmanager
def faulty_http(*rules: str, faults_file: Path | None = None) -> Iterator[str]:
    argv = [*mcptape_cmd(), "mock", BASIC, "--port", "0"]
    if faults_file is not None:
        argv += ["--faults", str(faults_file)]
    for rule in rules:
        argv += ["--fault", rule]
    child = AnnouncedChild(
        argv, lambda line: line.rsplit(" at ", 1)[1] if " at http://" in line else None, "mock"
    )
    try:
        yield child.start(60.0)
    finally:
        child.stop()


def post(url: str, msg: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request(
            "POST",
            parts.path,
            body=json.dumps(msg).encode(),
            headers={
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


async def in_session(url: str, call: Callable[[Any], Awaitable[Any]]) -> tuple[str, Any]:
    """One client session over HTTP running ``call``: what the client observed, including an
    error the SDK's transport raises as the session ends (a connection that died)."""
    try:
        async with make_client(url, mode="legacy") as client:
            return await outcome(lambda: call(client))
    except Exception as exc:
        return "transport", sorted({type(leaf).__name__ for leaf in _leaves(exc)})


REORDER = """
[[fault]]
action = "reorder"
direction = "s2c"
method = "notifications/progress"
nth = 1

[[fault]]
action = "duplicate"
direction = "s2c"
method = "notifications/message"
nth = 3
"""


def sse_methods(body: bytes) -> list[str]:
    """The method (or "response") of each SSE event of a POST's answer."""
    out = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data: "):
            msg = json.loads(line[6:])
            out.append(msg.get("method", "response").rsplit("/", 1)[-1])
    return out


async def test_http_faults_look_like_a_real_failing_server(tmp_path: Path) -> None:
    rules_file = tmp_path / "faults.toml"
    rules_file.write_text("# no faults yet\n")
    with (
        faulty_http(*HTTP_RULES, faults_file=rules_file) as url,
        start_http_server("basic,slow,failing,crash", name="mcptape-test") as (real_url, _),
    ):
        # The wire: a 429 with its Retry-After and body, as a rate-limiting server sends it.
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        status, headers, body = post(url, {**call, "params": {"name": "add", "arguments": {}}})
        assert (status, headers.get("retry-after"), body) == (429, "7", b"slow down")

        faulty = await in_session(url, lambda c: c.call_tool("echo", {"text": "hello, wire"}))
        genuine = await in_session(real_url, lambda c: c.call_tool("protocol_error", {}))
        assert faulty == genuine == ("MCPError", (-32000, "deliberate protocol error"))

        # end-stream: the SSE stream breaks after two events; the SDK client resumes it with
        # Last-Event-ID and gets the result, as from a server with an event store.
        slow = {"steps": 3, "delay": 0.01}
        kind, done = await in_session(url, lambda c: c.call_tool("slow", slow))
        assert kind == "ok" and tool_text(done) == "done after 3 steps", (kind, done)

        # http 429 through the SDK client.
        limited = await in_session(url, lambda c: c.call_tool("add", {"a": 2, "b": 3}))
        assert limited[0] != "ok", limited

        # reset: the connection dies after the stream began with a log message; the server is
        # still there, so the SDK client resumes the stream and gets its answer.
        log = {"message": "scripted log", "level": "warning"}
        kind, logged = await in_session(url, lambda c: c.call_tool("log", log, READ_TIMEOUT * 5))
        assert kind == "ok" and tool_text(logged) == "logged at warning", (kind, logged)

        # The rules file is re-read when it changes: now the first progress notification is
        # overtaken by the log after it, and the third log is sent twice.
        rules_file.write_text(REORDER)
        await asyncio.sleep(0.3)  # scenario: the file is looked at every 0.25 s at most
        slow_call = {**call, "params": {"name": "slow", "arguments": slow}}
        slow_call["params"]["_meta"] = {"progressToken": "p"}
        status, _, body = post(url, slow_call)
        assert status == 200
        assert sse_methods(body) == [
            "message",
            "progress",
            "progress",
            "message",
            "progress",
            "message",
            "message",
            "response",
        ]

        # kill: the server dies mid-call, after its log message — as a server process that
        # crashes after its progress and log.
        faulty = await in_session(url, lambda c: c.call_tool("log", log, READ_TIMEOUT * 5))
        genuine = await in_session(real_url, lambda c: c.call_tool("crash", {}, READ_TIMEOUT * 5))
        # The same error; the mock's events carry ids (it keeps them, as a server with an event
        # store), so the SDK client first tries to resume — the test server's carry none.
        assert faulty[0] == genuine[0] == "MCPError", (faulty, genuine)
        assert faulty[1][0] == genuine[1][0] and faulty[1][1].startswith("SSE stream ended")
        assert genuine[1][1].startswith("SSE stream ended"), genuine
