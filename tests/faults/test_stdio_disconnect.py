"""The faults that end a stdio connection, end to end with the SDK client (one relay each).

``disconnect mode=kill`` must look like a server that crashed mid-call, ``disconnect
mode=close-stdin`` like a server that exited mid-call, and ``corrupt mode=cut-utf8`` like a
server that wrote a line cut inside a UTF-8 sequence (the SDK client's strict reader gives up on
the connection). Each is compared with ``mcp_proxy.testing.faulty`` doing it for real, and the
recording must hold the call, the finding, and the session's end as mcptape's doing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from mcp_proxy.testing.client import make_client, stdio_params
from mcp_proxy.testing.faulty import faulty_params, outcome
from tests.faults.test_stdio_faults import PRESETS, through_mcptape
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(120)


async def first_call(params: StdioServerParameters, tool: str, args: dict[str, Any]) -> Any:
    """The outcome of one call on a fresh connection (the connection's end included)."""
    try:
        async with make_client(params, mode="legacy") as client:
            return await outcome(client.call_tool(tool, args, read_timeout_seconds=5))
    except Exception as exc:  # the SDK may report the lost connection as the context ends
        return ("closed", type(exc).__name__)


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


def session(db: Path) -> dict[str, Any]:
    assert rdb.wait_until(lambda: rdb.sessions(db)[0]["status"] != "live", timeout=15)
    return rdb.sessions(db)[0]


def findings(db: Path, code: str) -> list[dict[str, Any]]:
    return rdb.rows(db, "SELECT * FROM findings WHERE code = ?", code)


async def test_kill_is_a_server_crashing_mid_call(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    rule = "disconnect mode=kill signal=KILL method=tools/call name=echo"
    through, direct = await asyncio.gather(  # side by side: half the wall time
        first_call(
            through_mcptape(stdio_params(PRESETS), db, "kill", "--fault", rule),
            "echo",
            {"text": "x"},
        ),
        first_call(faulty_params(), "crash", {"code": 3}),
    )
    assert through == direct
    assert through[:2] == ("raised", "MCPError")  # "Connection closed"
    s = session(db)
    # mcptape killed it: no crash of the server's own, but the signal is kept
    assert (s["status"], s["exit_signal"]) == ("ended", 9)
    [finding] = findings(db, "inject.disconnect")
    assert json.loads(finding["detail"])["signal"] == "SIGKILL"
    frames = rdb.frames(db, s["id"])
    calls = [f for f in frames if f["method"] == "tools/call"]
    assert len(calls) == 1 and calls[0]["direction"] == "c2s"
    assert not [f for f in frames if f["direction"] == "s2c" and f["msg_id"] == calls[0]["msg_id"]]


async def test_close_stdin_is_a_server_exiting_mid_call(tmp_path: Path) -> None:
    db = tmp_path / "close.sqlite"
    rule = "disconnect mode=close-stdin direction=c2s name=echo"
    through, direct = await asyncio.gather(
        first_call(
            through_mcptape(stdio_params(PRESETS), db, "close", "--fault", rule),
            "echo",
            {"text": "x"},
        ),
        first_call(faulty_params(), "misbehave", {"kind": "exit"}),
    )
    assert through == direct
    assert through[:2] == ("raised", "MCPError")
    s = session(db)
    assert (s["status"], s["exit_code"]) == ("ended", 0)  # the server ended on stdin EOF
    assert len(findings(db, "inject.disconnect")) == 1


async def test_cut_utf8_breaks_the_clients_reader_like_a_broken_server(tmp_path: Path) -> None:
    db = tmp_path / "utf8.sqlite"
    rule = "corrupt mode=cut-utf8 direction=s2c name=echo"

    async def two_calls(params: StdioServerParameters, tool: str, args: dict[str, Any]) -> Any:
        seen: list[Any] = []
        try:
            async with make_client(params, mode="legacy") as client:
                seen.append(await outcome(client.call_tool(tool, args, read_timeout_seconds=0.6)))
                add = client.call_tool("add", {"a": 1, "b": 1}, read_timeout_seconds=0.6)
                seen.append(await outcome(add))
        except BaseExceptionGroup as group:  # the reader's failure, raised as the client closes
            seen.append(("closed", sorted(type(e).__name__ for e in leaves(group))))
        return seen

    through, direct = await asyncio.gather(
        two_calls(
            through_mcptape(stdio_params(PRESETS), db, "utf8", "--fault", rule),
            "echo",
            {"text": "x"},
        ),
        two_calls(faulty_params(), "misbehave", {"kind": "cut-utf8"}),
    )
    assert through == direct
    assert [o[:3] for o in through[:2]] == [("raised", "MCPError", -32001)] * 2
    assert through[2] == ("closed", ["UnicodeDecodeError"])
    s = session(db)
    [finding] = findings(db, "inject.corrupt")
    frames = rdb.frames(db, s["id"])
    injected = [f for f in frames if f["channel"] == "inject"]
    assert len(injected) == 1 and finding["session_id"] == s["id"]
    with pytest.raises(UnicodeDecodeError):
        injected[0]["raw"].decode()
