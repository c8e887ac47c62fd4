"""Findings that were false on real traffic (hardening issue, defects 16–19), reproduced with real
SDK clients and servers through the real relays.

Each test drives the traffic that produced a false finding in the field and asserts that what
the analysis says is true: a host closing a stdio server with SIGTERM is not a crash, a
server→client request the host never answered is at most ``exchange.no_response`` on that
request, and an HTTP session's length does not depend on when the relay stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientRequestContext

from mcp_proxy.testing.client import make_client, stdio_params
from mcp_proxy.testing.process import start_http_server
from tests.analysis.test_real_http import relayed
from tests.analysis.test_real_sessions import analysed
from tests.helpers import db as rdb
from tests.helpers.proxy import proxied
from tests.helpers.watch import until

pytestmark = pytest.mark.timeout(90)


def _children_running(name_part: str, parent: int | None = None) -> list[int]:
    """Pids of the children of ``parent`` (this process) whose command line has ``name_part``."""
    me = os.getpid() if parent is None else parent
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and name_part in cmd:
            out.append(int(entry))
    return out


async def test_host_sigterm_after_unanswered_roots_list_is_not_a_crash(db_path: Path) -> None:
    """Defect 16, as the MCP Inspector CLI does it: the server asks roots/list during a call,
    the host never answers, gives up on the call and closes the transport with SIGTERM (the
    TypeScript SDK's ``StdioClientTransport.close()``). Through mcptape the signal reaches the
    server, which dies of it: a normal end, not ``transport.exit_with_pending``."""
    asked = anyio.Event()

    async def never_answer(_ctx: ClientRequestContext) -> None:
        asked.set()
        await anyio.sleep_forever()

    params = proxied(stdio_params("basic,sampling"), db_path, "inspector-like")
    async with make_client(params, mode="legacy", list_roots_callback=never_answer) as client:
        await client.call_tool("echo", {"text": "hello"})
        with anyio.move_on_after(1.0):
            await client.call_tool("roots", {})
        assert asked.is_set()
        [pid] = _children_running("inspector-like")
        os.kill(pid, signal.SIGTERM)  # the host's close, exactly like the Inspector's
        await _gone("inspector-like")

    [s] = rdb.sessions(db_path)
    assert s["exit_signal"] == signal.SIGTERM and s["status"] == "ended", s
    a = analysed(db_path, "inspector-like")
    codes = {f.code: f for f in a.findings}
    assert "transport.exit_with_pending" not in codes, codes["transport.exit_with_pending"].title
    assert "transport.server_crashed" not in codes
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    # The SDK client may still answer the pending roots/list with an error as it closes; when
    # that answer reached the relay before the server went, it is recorded (and is the truth).
    assert roots.direction == "s2c" and roots.outcome in ("no_response", "error")
    if roots.outcome == "no_response":
        no_resp = codes["exchange.no_response"]
        assert no_resp.severity == "warning" and no_resp.frame_seqs == [roots.request_seq]
    assert not [f for f in a.findings if f.severity == "error"], [f.code for f in a.findings]


async def test_crash_with_server_request_pending_blames_only_host_requests(db_path: Path) -> None:
    """A real crash still reports the host's lost call, but the server's own unanswered
    roots/list is a no_response on that request, not an answer lost in the crash."""
    asked = anyio.Event()

    async def never_answer(_ctx: ClientRequestContext) -> None:
        asked.set()
        await anyio.sleep_forever()

    params = proxied(stdio_params("basic,sampling"), db_path, "crash-roots")
    async with make_client(params, mode="legacy", list_roots_callback=never_answer) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_call_ignoring_errors, client, "roots")
            with anyio.fail_after(20):
                await asked.wait()
            # The server, not the host, dies: a signal nobody sent through the relay.
            [relay] = _children_running("crash-roots")
            [server] = _children_running("--preset", parent=relay)
            os.kill(server, signal.SIGKILL)
            await _gone("crash-roots")
            tg.cancel_scope.cancel()

    a = analysed(db_path, "crash-roots")
    codes = {f.code: f for f in a.findings}
    assert {"transport.server_crashed", "transport.exit_with_pending"} <= set(codes), codes
    lost = codes["transport.exit_with_pending"]
    assert "roots/list" not in lost.title and "tools/call roots" in lost.title, lost.title
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    assert roots.outcome in ("no_response", "error")  # the client may answer it as it closes


async def _call_ignoring_errors(client: object, tool: str) -> None:
    with contextlib.suppress(Exception):  # the server is about to be killed under it
        await client.call_tool(tool, {})  # type: ignore[attr-defined]


async def _gone(name_part: str) -> None:
    """Wait (up to 20 s) until no child of ours has ``name_part`` in its command line."""
    for _ in range(400):
        if not _children_running(name_part):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{name_part} still running after 20 s")


async def test_http_server_request_on_a_closed_stream_is_not_host_disconnected(
    db_path: Path,
) -> None:
    """Defect 18: over initialize-era HTTP the server's roots/list rides the SSE stream of the
    host's tools/call; the host gives up on the call and closes that stream. The host's call is
    what the host abandoned; the server's roots/list is at most unanswered, never
    ``transport.host_disconnected``."""
    asked = anyio.Event()

    async def never_answer(_ctx: ClientRequestContext) -> None:
        asked.set()
        await anyio.sleep_forever()

    with start_http_server("basic,sampling", "http") as (url, _proc):
        with relayed(url, db_path, "http-roots") as local:
            async with make_client(local, mode="legacy", list_roots_callback=never_answer) as c:
                with anyio.move_on_after(1.0):
                    await c.call_tool("roots", {})
                assert asked.is_set()
                await c.call_tool("echo", {"text": "after"})
    a = analysed(db_path, "http-roots")
    roots = next(e for e in a.exchanges if e.method == "roots/list")
    assert roots.direction == "s2c"
    for f in a.findings:
        if f.code == "transport.host_disconnected":
            assert f.exchange != roots.index, f.title
    assert roots.outcome in ("no_response", "cancelled", "error"), roots.outcome


async def test_http_session_length_is_its_traffic_not_the_relay_lifetime(db_path: Path) -> None:
    """Defect 19: a stateless 2026-07-28 client never sends DELETE, so its session stays open
    until the relay stops. The analysis measures the session by its frames and says it was
    open-ended, whatever the relay's stop time."""
    with start_http_server("basic", "http", stateless=True, json_response=True) as (url, _p):
        with relayed(url, db_path, "no-delete") as local:
            began = time.time()
            async with make_client(local, mode="auto") as client:
                await client.call_tool("echo", {"text": "one"})
                await client.call_tool("echo", {"text": "two"})
            done = time.time()
            # The relay keeps running after the client is done: as long again as the traffic
            # took, and at least 0.3 s, so that its lifetime and the traffic's differ.
            outlived = done + max(0.3, done - began)
            assert await until(lambda: time.time() >= outlived)
        stopped = time.time()
    [s] = rdb.sessions(db_path)
    a = analysed(db_path, "no-delete")
    assert a.facts.open_ended, a.facts
    assert a.facts.last_ts is not None and a.facts.first_ts is not None
    active = a.facts.last_ts - a.facts.first_ts
    assert active <= done - began + 0.01, (active, done - began)  # the traffic's span …
    assert active < stopped - a.facts.first_ts - 0.25, active  # … not the relay's lifetime
    # The relay now dates such a session at its last exchange too; the analysis does not
    # depend on it either way.
    assert s["ended_at"] is None or s["ended_at"] - a.facts.last_ts < 1.5
    doc = a.as_dict()
    assert doc["open_ended"] is True and doc["active_s"] == pytest.approx(active, abs=1e-3)
