"""A held call decided from another process on either store: SQLite and PostgreSQL (a team
resolving from another machine goes through the same table).

The default run keeps the PostgreSQL cell (``smoke(dialect="postgresql")``): the intercept
table's one end-to-end use on PostgreSQL; held calls decided on SQLite are
``test_stdio_sdk.py``'s. Its SQLite twin runs under ``--full``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mcp_proxy.testing.client import make_client, stdio_params, tool_text
from tests.helpers import db as rdb
from tests.intercept.test_stdio_sdk import next_held, resolve, through_mcptape

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.both_dialects,
    pytest.mark.smoke(dialect="postgresql"),
]


async def test_a_held_call_edited_from_the_cli(db_path: Path) -> None:
    params = through_mcptape(stdio_params("basic"), db_path, "--intercept", "method=tools/call")
    async with make_client(params, mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("echo", {"text": "as sent"}))
        (one,) = await next_held(db_path)
        await resolve(db_path, one["id"], "--set", "params.arguments.text=as decided")
        assert tool_text(await call) == "as decided"
    assert rdb.wait_until(
        lambda: rdb.rows(db_path, "SELECT code FROM findings WHERE code = 'inject.intercept'")
    )
    (row,) = rdb.rows(db_path, "SELECT state, decision, resolved_by FROM intercepts")
    assert (row["state"], row["decision"], row["resolved_by"]) == ("resolved", "edit", "tester")
