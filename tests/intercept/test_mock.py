"""``mcptape mock --intercept``: the mock's messages held at its fault seam, decided from the
CLI — a request answered in the mock's place, a response of the mock edited on its way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import make_client, tool_text
from tests.intercept.test_stdio_sdk import held, next_held, resolve
from tests.travel.conftest import PY, child_env

pytestmark = pytest.mark.timeout(90)

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "basic-legacy.mcptape.jsonl"


async def test_mock_requests_and_responses_held_and_decided(tmp_path: Path) -> None:
    db = tmp_path / "mock.sqlite"
    args = ["-m", "mcp_proxy", "mock", str(RECORDING), "--db", str(db)]
    args += ["--intercept", "method=tools/call name=add"]
    args += ["--intercept", "direction=response method=tools/call name=echo"]
    params = StdioServerParameters(command=PY, args=args, env=child_env())
    answer = tmp_path / "answer.json"
    answer.write_text('{"error": {"code": -32002, "message": "not today"}}')
    async with make_client(params, mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("add", {"a": 2, "b": 3}))
        (request,) = await next_held(db)
        assert (request["direction"], request["session_id"]) == ("c2s", "mock")
        await resolve(db, request["id"], "--answer", str(answer))
        with pytest.raises(MCPError) as refused:
            await call
        assert refused.value.code == -32002

        call = asyncio.create_task(client.call_tool("echo", {"text": "hello, wire"}))
        (response,) = await next_held(db)
        assert (response["direction"], response["kind"]) == ("s2c", "response")
        await resolve(
            db,
            response["id"],
            "--set",
            "result.content.0.text=edited by hand",
            "--set",
            "result.structuredContent.result=edited by hand",
        )
        assert tool_text(await call) == "edited by hand"
    assert held(db) == []
