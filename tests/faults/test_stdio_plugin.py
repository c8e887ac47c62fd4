"""The pytest plugin's ``mcptape_faults`` fixture: a test against a server under faults."""

from __future__ import annotations

import pytest

from mcp_proxy.pytest_plugin import FaultRun
from mcp_proxy.testing.client import make_client, stdio_params
from mcp_proxy.testing.faulty import outcome
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(90)


@pytest.mark.mcptape_faults("error code=-32001 message=down method=tools/call name=echo")
async def test_a_test_runs_its_client_against_the_server_under_faults(
    mcptape_faults: FaultRun,
) -> None:
    params = mcptape_faults.stdio_params(stdio_params("basic"), "delay ms=50 name=add")
    async with make_client(params, mode="legacy") as client:
        assert await outcome(client.call_tool("echo", {"text": "x"})) == (
            "raised",
            "MCPError",
            -32001,
            "down",
        )
        assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {
            "result": 3.0
        }
    assert rdb.wait_until(
        lambda: (
            {"inject.error", "inject.delay"}
            <= {r["code"] for r in rdb.rows(mcptape_faults.db, "SELECT code FROM findings")}
        ),
        timeout=15,
    )
