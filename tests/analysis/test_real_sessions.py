"""Real SDK clients and servers through the real ``mcptape record`` subprocess.

Clean traffic must stay clean (no warning or error finding, in both eras), and real misbehaviour
(a crash, stdout noise, invalid UTF-8, a cancelled call, failing requests) must be named.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import StdioServerParameters
from mcp.client import session as sdk_session

from mcp_proxy.analysis import analyze
from mcp_proxy.testing.client import (
    CallbackRecorder,
    ProgressRecorder,
    make_client,
    run_scripted_session,
    stdio_params,
)
from mcp_proxy.testing.process import server_argv
from tests.conftest import matrix
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.proxy import proxied

pytestmark = [pytest.mark.timeout(90), pytest.mark.both_dialects]

PRESETS = "basic,slow,failing,sampling,elicitation,mrtr"


def analysed(db: Path, name: str) -> Any:
    [s] = [s for s in rdb.sessions(db) if s["name"] == name]
    frames = rdb.frames(db, s["id"])
    http = rdb.rows(db, "SELECT * FROM http_exchanges WHERE session_id = ?", s["id"])
    return analyze(frames, session=s, http_exchanges=http)


def check(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``mcptape check`` in-process through the real entry point (tests/helpers/cli.py)."""
    return run_mcptape("check", *args, "--db", str(db))


# The default run: the 2026-07-28 era (the initialize era's scripted session goes through the
# stdio relay in tests/test_record_sdk.py, and the demo's is checked clean in test_demo.py);
# --full: both eras.
@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"auto"}))
async def test_clean_sdk_sessions_have_no_warnings(mode: str, db_path: Path) -> None:
    rec = CallbackRecorder()
    params = proxied(stdio_params(PRESETS), db_path, f"clean-{mode}")
    async with make_client(params, mode=mode, recorder=rec) as client:
        await run_scripted_session(client, rec)
        await client.call_tool("confirm", {"action": "ship"})
        await client.call_tool("countdown", {"rounds": 2})
        await client.call_tool("interview", {"topic": "flight recorders"})
        if mode == "legacy":
            await client.call_tool("sample", {"prompt": "hi"})
            await client.call_tool("roots", {})
            await client.call_tool("ask", {})
        await client.list_tools()

    a = analysed(db_path, f"clean-{mode}")
    bad = [f for f in a.findings if f.severity != "info"]
    assert not bad, [(f.code, f.title) for f in bad]
    assert a.facts.era == ("initialize" if mode == "legacy" else "2026-07-28")
    assert all(e.outcome in ("ok", "tool_error", "input_required") for e in a.exchanges)
    slow = next(e for e in a.exchanges if e.name == "slow")
    assert len(slow.progress_seqs) == 3 and len(slow.log_seqs) == 3
    if mode == "legacy":
        # sampling, roots and elicitation went server→client during tools/call
        kids = {a.exchanges[i].method for e in a.exchanges for i in e.children}
        assert {"sampling/createMessage", "roots/list", "elicitation/create"} <= kids
        assert not a.chains
    else:
        assert [(c.name, len(c.exchanges), c.outcome) for c in a.chains] == [
            ("confirm", 2, "complete"),
            ("countdown", 3, "complete"),
            ("interview", 2, "complete"),
        ]
    # The CLI agrees, and gates on it.
    done = check(db_path, f"clean-{mode}", "--fail-on", "warning")
    assert done.returncode == 0, done.stdout + done.stderr


async def test_auto_era_probe_waits_for_a_server_slower_to_start_than_the_sdk_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``[auto]`` flake under load, made deterministic at a smaller scale: the SDK's probe
    timeout (10 s, counted from the spawn) is set to 0.1 s and the server starts 0.4 s late, as a
    server on a loaded machine started later than 10 s. Without the helpers' allowance
    (``make_client`` → ``allow_slow_server_start``) the SDK falls back to ``initialize`` and
    the server, already on 2026-07-28, refuses it with -32022: the recording then carries
    ``mcp.unsupported_protocol_version`` and ``envelope.missing`` although nothing was wrong.
    Runs once (SQLite): the subject is the client's wait, not the store."""
    monkeypatch.setattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS", 0.1)
    db = tmp_path / "late.db"
    argv = server_argv("basic", "stdio")
    late = StdioServerParameters(command="sh", args=["-c", 'sleep 0.4; exec "$@"', "sh", *argv])
    async with make_client(proxied(late, db, "late-start"), mode="auto") as client:
        await client.call_tool("echo", {"text": "after a slow start"})

    a = analysed(db, "late-start")
    assert a.facts.era == "2026-07-28"
    assert [f.code for f in a.findings if f.severity != "info"] == []
    assert "initialize" not in {f["method"] for f in rdb.frames(db, a.session_id)}


# --full only: the default run checks the demo's sessions the same way (no finding above info,
# `mcptape check --fail-on warning` exits 0) in tests/test_demo.py, on the demo it runs anyway.
@pytest.mark.full
def test_demo_sessions_are_clean(tmp_path: Path) -> None:
    from mcp_proxy.demo import run_demo

    db = tmp_path / "demo.db"
    run_demo("sqlite:///" + str(db), out=lambda _line: None)
    for name in ("demo", "demo-legacy"):
        a = analysed(db, name)
        assert [f.code for f in a.findings if f.severity != "info"] == [], name
    done = check(db, "demo", "demo-legacy", "--fail-on", "warning", "--format", "json")
    assert done.returncode == 0, done.stderr


async def test_misbehaving_server_is_explained(db_path: Path) -> None:
    params = stdio_params("basic,slow,failing,noise,badutf8", encoding_error_handler="replace")
    async with make_client(proxied(params, db_path, "rough"), mode="legacy") as client:
        await client.call_tool("noise", {"text": "DEBUG: connected to db", "count": 2})
        await client.call_tool("badutf8", {"kind": "raw"})
        with pytest.raises(Exception, match="Unknown resource"):
            await client.read_resource("test://missing")
        with pytest.raises(Exception, match="deliberate"):
            await client.call_tool("protocol_error", {})
        with anyio.move_on_after(0.5):
            await client.call_tool("hang", {"seconds": 30})
        await client.call_tool("echo", {"text": "still alive"})

    a = analysed(db_path, "rough")
    by_code = {f.code: f for f in a.findings}
    assert {
        "transport.server_noise",
        "transport.invalid_utf8",
        "jsonrpc.resource_not_found",
        "jsonrpc.server_error",
        "exchange.cancelled",
    } <= set(by_code), sorted(by_code)
    assert by_code["transport.server_noise"].title.startswith("2 non-JSON line(s)")
    assert "DEBUG: connected to db" in by_code["transport.server_noise"].detail
    hang = next(e for e in a.exchanges if e.name == "hang")
    assert hang.outcome == "cancelled" and hang.cancel_seq is not None
    # No false alarms around them: everything else paired and answered.
    assert "exchange.no_response" not in by_code and "exchange.unknown_response" not in by_code

    done = check(db_path, "rough")  # default --fail-on error: noise is an error
    assert done.returncode == 5, done.stdout
    assert "transport.server_noise" in done.stdout


async def test_crash_with_a_pending_call(db_path: Path) -> None:
    params = stdio_params("basic,crash")
    with pytest.raises(Exception):  # noqa: B017 - the SDK's error type for a dead server varies
        async with make_client(proxied(params, db_path, "crash"), mode="auto") as client:
            with anyio.fail_after(20):
                await client.call_tool("crash", {"code": 3}, progress_callback=ProgressRecorder())

    a = analysed(db_path, "crash")
    codes = {f.code for f in a.findings}
    assert {"transport.server_crashed", "transport.exit_with_pending"} <= codes, codes
    crashed = next(f for f in a.findings if f.code == "transport.server_crashed")
    assert "exit status 3" in crashed.title
    call = next(e for e in a.exchanges if e.name == "crash")
    assert call.outcome == "lost"
    assert call.progress_seqs  # the progress it sent before dying is attached to it
