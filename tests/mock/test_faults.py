"""``mcptape mock --fault``: a faulty mock fails the way a real failing server does (issue 15).

An SDK client runs against the real ``mcptape mock`` command serving a real recording, with fault
rules on some methods; for each fault the same client code runs against a real SDK test server
that fails on purpose (``protocol_error``, ``fail``, ``hang``, ``crash`` of the ``failing``,
``slow`` and ``crash`` presets), and what the client observes — the exception type and JSON-RPC
error, the ``isError`` result, the timeout, the closed connection — must be the same.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import make_client, tool_text
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
    args = ["-m", "mcp_proxy.mock", BASIC]
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
