"""Real SDK clients and servers over HTTP through the real ``mcptape record --upstream`` relay.

Clean traffic stays clean on Streamable HTTP (stateful, stateless, JSON responses) and legacy
SSE, in both eras; real failures over HTTP are named with the right status semantics.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_proxy.testing.client import (
    CallbackRecorder,
    ProgressRecorder,
    make_client,
    run_scripted_session,
)
from mcp_proxy.testing.process import start_http_server
from tests.analysis.test_real_sessions import analysed
from tests.conftest import mcptape_cmd

pytestmark = [pytest.mark.timeout(90), pytest.mark.both_dialects]


@contextlib.contextmanager
def relayed(url: str, db: Path, name: str) -> Iterator[str]:
    """``mcptape record --upstream url`` on an ephemeral port; yields the URL to use instead."""
    proc = subprocess.Popen(
        [
            *mcptape_cmd(),
            "record",
            "--upstream",
            url,
            "--port",
            "0",
            "--db",
            str(db),
            "--name",
            name,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        m = re.search(r"relaying (http://\S+)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
        local = m.group(1).rstrip("/")
        path = "/" + url.split("/", 3)[3]
        yield local if local.endswith(path) else local + path
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proc.stderr.close()


async def _drive(url: str, mode: str) -> None:
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        await run_scripted_session(client, rec)
        await client.call_tool("confirm", {"action": "ship"})
        await client.call_tool("lookup", {"region": "zürich", "query": "q"})


SMOKE_PG = pytest.mark.smoke(dialect="postgresql")


@pytest.mark.parametrize(
    ("transport", "mode", "options"),
    [
        pytest.param("http", "legacy", {}, id="stateful-initialize", marks=pytest.mark.full),
        # smoke: the Streamable HTTP and the legacy SSE relay's end-to-end recording on
        # PostgreSQL in the default run (the rest of the dialect matrix runs under --full: the
        # HTTP relay's recordings on SQLite are analysed in the default run by the other tests
        # of this module and tests/relay/test_http_sdk.py).
        pytest.param("http", "auto", {}, id="stateful-2026", marks=SMOKE_PG),
        pytest.param(
            "http",
            "auto",
            {"stateless": True, "json_response": True},
            id="stateless-json-2026",
            marks=pytest.mark.full,
        ),
        pytest.param("sse", "legacy", {}, id="legacy-sse", marks=SMOKE_PG),
    ],
)
async def test_clean_http_sessions_have_no_warnings(
    transport: str, mode: str, options: dict[str, Any], db_path: Path
) -> None:
    with start_http_server("basic,slow,failing,mrtr", transport, **options) as (url, _proc):  # type: ignore[arg-type]
        with relayed(url, db_path, "clean-http") as local:
            await _drive(local, mode)
    a = analysed(db_path, "clean-http")
    assert a.facts.transport in ("http", "sse")
    bad = [(f.code, f.title) for f in a.findings if f.severity != "info"]
    assert not bad
    assert all(e.http is not None for e in a.exchanges)
    assert all(e.outcome in ("ok", "tool_error", "input_required") for e in a.exchanges)
    slow = next(e for e in a.exchanges if e.name == "slow")
    if not options.get("json_response"):
        assert len(slow.progress_seqs) == 3  # progress rode the POST's SSE stream (or the GET's)


async def test_http_failures_are_named(db_path: Path) -> None:
    with start_http_server("basic,slow,failing", "http", stateless=True, json_response=True) as (
        url,
        _proc,
    ):
        with relayed(url, db_path, "rough-http") as local:
            async with make_client(local, mode="auto") as client:
                with pytest.raises(Exception, match="Unknown resource"):
                    await client.read_resource("test://missing")
                with anyio.move_on_after(0.5):
                    await client.call_tool(
                        "hang", {"seconds": 30}, progress_callback=ProgressRecorder()
                    )
                await client.call_tool("echo", {"text": "still here"})
    a = analysed(db_path, "rough-http")
    codes = {f.code for f in a.findings}
    # 2026-07-28: -32602 comes with 400 (no status mismatch), cancel = closing the connection.
    assert "jsonrpc.resource_not_found" in codes and "http.status_mismatch" not in codes, codes
    hang = next(e for e in a.exchanges if e.name == "hang")
    assert hang.outcome == "cancelled", hang
    assert "exchange.no_response" not in codes and "transport.host_disconnected" not in codes
