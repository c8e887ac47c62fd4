"""Findings that blamed the wrong party (issue #22, defect 9), through the real relays and the
real ``mcptape check --format json``.

- A 421 mcptape answered itself (the host sent a foreign ``Host``) is about the host, not a
  server error; a 421 the server really sent still is the server's.
- A server a ``disconnect mode=kill`` fault killed was killed by the fault, not by the host; a
  host that really kills its server is still named.
- A request an ``error`` fault answered in the server's place is answered; a request nobody
  answered still warns.

The stdio sessions are driven line by line (no SDK client), so each one is exactly the same
every run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from mcp_proxy.testing.client import make_client
from mcp_proxy.testing.misbehave_http import MisbehavingServer
from mcp_proxy.testing.process import start_http_server
from tests.analysis.test_real_sessions import check
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.forkserver import server_python
from tests.relay.test_http_wire import H_JSON, http_raw, rpc

pytestmark = pytest.mark.timeout(90)

SERVER = ["-m", "mcp_proxy.testing.server", "--preset", "basic,slow", "--transport", "stdio"]
INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "line-host", "version": "1"},
}


def findings(db: Path, name: str) -> list[dict[str, Any]]:
    done = check(db, name, "--format", "json", "--fail-on", "never")
    assert done.returncode == 0, done.stderr
    [session] = json.loads(done.stdout)
    return cast(list[dict[str, Any]], session["findings"])


def codes(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in found}


# ------------------------------------------------------------------------------ HTTP 421
@contextmanager
def relay(upstream: str, db: Path, name: str, *extra: str) -> Iterator[str]:
    """``mcptape record --upstream`` on an ephemeral port; yields its origin."""
    argv = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", str(db)]
    proc = subprocess.Popen(
        [*argv, "--name", name, *extra],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        assert "relaying http://" in line, line
        yield line.split("relaying ", 1)[1].split()[0].rstrip("/").rsplit("/", 1)[0]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        proc.stderr.close()


def _initialize(origin: str, host: str) -> int:
    status, _, _ = http_raw(origin, "POST", "/mcp", H_JSON, rpc("initialize", INIT), host=host)
    return status


def test_a_421_mcptape_sent_is_about_the_host_not_a_server_error(tmp_path: Path) -> None:
    db = tmp_path / "421.sqlite"
    with start_http_server("basic") as (url, _proc), relay(url, db, "foreign") as origin:
        assert _initialize(origin, "evil.example") == 421
    found = codes(findings(db, "foreign"))
    assert "http.misdirected" not in found, found
    refused = found["http.foreign_host"]
    assert refused["severity"] == "warning"
    assert "from mcptape" in refused["title"] and "'evil.example'" in refused["title"]
    assert not [f for f in found.values() if f["severity"] == "error"], found


async def test_a_421_the_server_sent_is_still_the_servers(tmp_path: Path) -> None:
    """Near miss: the server itself answers 421 (a real server behind mcptape refusing the call,
    :class:`MisbehavingServer`): a server refusal, named as one."""
    db = tmp_path / "421-real.sqlite"
    with start_http_server("basic") as (url, _proc):
        bad = MisbehavingServer(url).start()
        try:
            query = bad.url("status", status="421").split("?", 1)[1]
            with relay(bad.url(), db, "server-421") as origin:
                async with make_client(f"{origin}/mcp?{query}", mode="legacy") as client:
                    with pytest.raises(Exception):  # noqa: B017 (the SDK's error type varies)
                        await client.call_tool("echo", {"text": "x"})
        finally:
            bad.stop()
    found = codes(findings(db, "server-421"))
    assert "http.foreign_host" not in found, found
    assert found["http.misdirected"]["severity"] == "error"


# ------------------------------------------------------------------------------ stdio
class LineHost:
    """A host that writes JSON-RPC lines to ``mcptape record … -- SERVER`` and reads answers."""

    def __init__(self, db: Path, name: str, *fault: str, server: list[str] | None = None) -> None:
        self.db, self.name = db, name
        argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", name, *fault, "--"]
        self.proc = subprocess.Popen(
            [*argv, *(server or [server_python(), *SERVER])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        assert self.read()["id"] == 1
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, msg_id: int, tool: str, args: dict[str, Any]) -> None:
        params = {"name": tool, "arguments": args}
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params})

    def read(self) -> dict[str, Any]:
        """The next line from the server (``{}`` at the end of its output)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return cast(dict[str, Any], json.loads(line)) if line else {}

    def recorded(self, method: str, msg_id: str) -> bool:
        """The relay has recorded this request (so the server has it too)."""
        sessions = [s for s in rdb.sessions(self.db) if s["name"] == self.name]
        return bool(sessions) and any(
            f["method"] == method and f["msg_id"] == msg_id
            for f in rdb.frames(self.db, sessions[0]["id"])
        )

    def end(self) -> dict[str, Any]:
        """Close stdin (if still open), wait for the relay, return the session row."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()
        [s] = [s for s in rdb.sessions(self.db) if s["name"] == self.name]
        return s


#: A server that answers everything but ``tools/call hang``, which it never answers, and exits
#: 0 at the end of its input (the SDK servers answer what is pending with "Connection closed").
SILENT = [
    sys.executable,
    "-c",
    """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or msg.get("params", {}).get("name") == "hang":
        continue
    result = {"content": [{"type": "text", "text": "ok"}]}
    if msg["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "silent", "version": "1"}}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
""",
]

KILL = "disconnect mode=kill signal=KILL direction=request method=tools/call name=echo"


def test_a_fault_that_killed_the_server_is_named_not_the_host(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    host = LineHost(db, "fault-kill", "--fault", KILL)
    host.call(2, "echo", {"text": "x"})
    assert host.read() == {}  # killed as the call arrived: the host's stdout ends
    s = host.end()
    assert (s["status"], s["exit_signal"]) == ("ended", 9)
    found = codes(findings(db, "fault-kill"))
    assert "transport.host_ended_with_pending" not in found, found
    ended = found["inject.ended_with_pending"]
    assert ended["severity"] == "info"
    assert "fault rule" in ended["title"] and "mode=kill" in ended["title"]
    assert "SIGKILL" in ended["title"] and "tools/call echo" in ended["title"]
    assert "the host ended" not in ended["title"], ended["title"]
    # --injected ignore sets the rehearsal aside: the fault's consequence goes with it
    ignored = check(db, "fault-kill", "--format", "json", "--injected", "ignore")
    assert "inject." not in ignored.stdout, ignored.stdout


def test_a_host_that_kills_its_server_is_still_the_host(tmp_path: Path) -> None:
    """Near miss: no fault; the host signals the relay (which forwards it) mid-call.

    The server never answers ``hang``: the SDK's server, signalled, sometimes still answers
    the call on its way out (-32000 "Connection closed", then no request is pending at the
    end), which made this test fail about one run in ten under load."""
    db = tmp_path / "host-kill.sqlite"
    host = LineHost(db, "host-kill", server=SILENT)
    host.call(2, "hang", {"seconds": 60})
    assert rdb.wait_until(lambda: host.recorded("tools/call", "2"), timeout=20)
    os.kill(host.proc.pid, signal.SIGTERM)
    s = host.end()
    assert (s["status"], s["exit_signal"]) == ("ended", signal.SIGTERM)
    found = codes(findings(db, "host-kill"))
    assert "inject.ended_with_pending" not in found, found
    assert "transport.host_ended_with_pending" in found, found
    ended = found["transport.host_ended_with_pending"]
    assert ended["title"].startswith("the host ended the session (signal 15)"), ended["title"]


def test_a_request_an_injected_error_answered_is_answered(tmp_path: Path) -> None:
    """Trigger and near miss in one session: echo (id 2) is answered by an ``error`` fault in
    the server's place; hang (id 3) the server really never answers, and it still warns."""
    db = tmp_path / "error.sqlite"
    rule = "error code=-32000 message=nope direction=request method=tools/call name=echo"
    host = LineHost(db, "fault-error", "--fault", rule, server=SILENT)
    host.call(2, "echo", {"text": "x"})
    answer = host.read()
    assert answer["id"] == 2 and answer["error"]["message"] == "nope"
    host.call(3, "hang", {"seconds": 60})
    assert rdb.wait_until(lambda: host.recorded("tools/call", "3"), timeout=20)
    host.end()
    found = findings(db, "fault-error")
    unanswered = [f for f in found if f["code"] == "exchange.no_response"]
    assert [f["title"] for f in unanswered] == ["tools/call hang (id 3) was never answered"]
    assert "inject.error" in codes(found)
    # the exchange view agrees: the host got an error for id 2 (mcptape's), nothing for id 3
    show = run_mcptape("show", "fault-error", "--exchanges", "--format", "json", "--db", str(db))
    assert show.returncode == 0, show.stderr
    exchanges = [json.loads(line) for line in show.stdout.splitlines()]
    outcomes = {str(e["id"]): e["outcome"] for e in exchanges if e["method"] == "tools/call"}
    assert outcomes == {"2": "error", "3": "no_response"}, outcomes
