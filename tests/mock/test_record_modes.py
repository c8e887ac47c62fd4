"""``mcptape mock`` record modes as VCR has them, forwarding to a live HTTP upstream, nearest-miss
explanations over HTTP, SSE event ids with ``Last-Event-ID`` resumption, and redacted fields.

One real Streamable HTTP test server (module scope) is the upstream; the mock runs as the real
``mcptape mock`` command, served over HTTP (``--port 0``) or stdio, and an SDK client talks to it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp import StdioServerParameters

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.recording.registry import read_recording
from mcp_proxy.testing.client import SCRIPTED_PRESETS, make_client, tool_text
from mcp_proxy.testing.process import start_http_server
from tests.conftest import mcptape_cmd
from tests.travel.conftest import PY, RECORDINGS, child_env, run_cli, server

pytestmark = pytest.mark.timeout(180)

BASIC = RECORDINGS / "basic-legacy.mcptape.jsonl"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_http_server(SCRIPTED_PRESETS, name="mcptape-test") as (url, _proc):
        yield url


def _url_of(line: str) -> str | None:
    return line.rsplit(" at ", 1)[1].strip() if " at http://" in line else None


@contextlib.contextmanager
def http_mock(*args: str) -> Iterator[tuple[str, AnnouncedChild]]:
    """``mcptape mock ARGS --port 0``; stopped by pid with SIGINT (it then writes the file)."""
    child = AnnouncedChild([*mcptape_cmd(), "mock", "--port", "0", *args], _url_of, "mock")
    try:
        yield child.start(60.0), child
    finally:
        child.stop()


def stdio_mock(*args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY, args=["-m", "mcp_proxy", "mock", *args], env=child_env()
    )


async def echo(target: Any, *texts: str) -> list[str]:
    """Call ``echo`` once per text; a JSON-RPC error comes back as ``error: …``."""
    out = []
    async with make_client(target, mode="legacy") as client:
        for text in texts:
            try:
                out.append(tool_text(await client.call_tool("echo", {"text": text})))
            except Exception as exc:  # the SDK raises MCPError for a JSON-RPC error
                out.append(f"error: {exc}")
    return out


# --full only: `once` (recording when the file is missing, then serving without asking the
# upstream) runs in the default run per transport in tests/mock/test_modes_by_transport.py.
@pytest.mark.full
async def test_once_records_when_the_file_is_missing_then_only_serves(
    upstream: str, tmp_path: Path
) -> None:
    file = tmp_path / "once.mcptape.jsonl"
    with http_mock(str(file), "--record-mode", "once", "--upstream", upstream) as (url, _):
        assert await echo(url, "first", "second") == ["first", "second"]
    assert file.exists()
    (session,) = read_recording(file).sessions
    assert session.session["meta"]["recorded_by"] == "mcptape mock"
    # The cassette exists now: served from it, the upstream never asked (it is gone).
    dead = "http://127.0.0.1:9/mcp"
    with http_mock(str(file), "--record-mode", "once", "--upstream", dead) as (url, _):
        assert await echo(url, "second", "first") == ["second", "first"]
    assert len(read_recording(file).sessions) == 1


async def test_new_episodes_forwards_misses_to_http_and_appends(
    upstream: str, tmp_path: Path
) -> None:
    file = tmp_path / "cassette.mcptape.jsonl"
    shutil.copy(BASIC, file)
    target = stdio_mock(str(file), "--record-mode", "new_episodes", "--upstream", upstream)
    assert await echo(target, "hello, wire", "a new episode") == ["hello, wire", "a new episode"]
    sessions = read_recording(file).sessions
    assert len(sessions) == 2 and sessions[1].session["transport"] == "http"
    # Played back with no server at all, over HTTP this time.
    with http_mock(str(file)) as (url, _):
        assert await echo(url, "a new episode", "hello, wire") == ["a new episode", "hello, wire"]


# --full only: `all` (forwarding what matches, the file rewritten with the live traffic) runs
# in the default run per transport in tests/mock/test_modes_by_transport.py.
@pytest.mark.full
async def test_all_forwards_even_what_matches_and_rewrites_the_file(tmp_path: Path) -> None:
    file = tmp_path / "all.mcptape.jsonl"
    shutil.copy(BASIC, file)
    changed = server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed")
    with http_mock(str(file), "--record-mode", "all", "--", *changed) as (url, _):
        assert await echo(url, "hello, wire") == ["HELLO, WIRE"]  # the live answer, not the file's
    (session,) = read_recording(file).sessions
    assert session.session["transport"] == "stdio"
    assert any(b"HELLO, WIRE" in f["raw"] for f in session.frames)


async def test_none_over_http_explains_the_nearest_miss() -> None:
    with http_mock(str(BASIC)) as (url, child):
        (answer,) = await echo(url, "never recorded")
    assert answer.startswith("error: mcptape mock: no recorded tools/call request matches")
    assert any("1 request(s) had no recorded answer" in line for line in child.lines)
    # The error's data names the nearest recorded request and how it differs (raw JSON-RPC).
    with http_mock(str(BASIC)) as (url, _):
        reply = _post(url, {"name": "echo", "arguments": {"text": "other"}})
    nearest = reply["error"]["data"]["nearest"][0]
    assert reply["error"]["code"] == -32050
    assert nearest["differences"] == [
        {"path": "$.params.arguments.text", "kind": "changed", "a": "hello, wire", "b": "other"}
    ]


def _post(url: str, params: dict[str, Any], *, token: Any = None) -> dict[str, Any]:
    if token is not None:
        params = {**params, "_meta": {"progressToken": token}}
    msg = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    status, headers, body = _request(url, "POST", json.dumps(msg).encode())
    assert status == 200
    if "text/event-stream" in headers.get("content-type", ""):
        return next(e for e in _events(body) if "result" in e[1] or "error" in e[1])[1]
    return json.loads(body)  # type: ignore[no-any-return]


def _request(
    url: str, method: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request(
            method,
            parts.path,
            body=body,
            headers={
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _events(body: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        fields = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line)
        if "data" in fields:
            out.append((fields.get("id"), json.loads(fields["data"])))
    return out


def test_sse_events_carry_ids_and_last_event_id_resumes_the_stream() -> None:
    with http_mock(str(BASIC)) as (url, _):
        msg = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {
                "name": "slow",
                "arguments": {"steps": 3, "delay": 0.01},
                "_meta": {"progressToken": "tok"},
            },
        }
        status, headers, body = _request(url, "POST", json.dumps(msg).encode())
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = _events(body)
        ids = [eid for eid, _ in events]
        # As recorded: three progress notifications and three logs, then the result.
        methods = [m.get("method") for _, m in events]
        assert methods.count("notifications/progress") == 3
        assert methods.count("notifications/message") == 3
        assert all(ids) and len(set(ids)) == len(events) == 7
        assert events[-1][1]["id"] == 5 and tool_text_of(events[-1][1]) == "done after 3 steps"
        # A client that lost the stream after the first event asks for the rest.
        status, _, again = _request(url, "GET", headers={"Last-Event-ID": str(ids[0])})
        assert status == 200
        assert _events(again) == events[1:]
        status, _, _ = _request(url, "GET", headers={"Last-Event-ID": "999-1"})
        assert status == 404


def tool_text_of(msg: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in msg["result"]["content"])


async def test_redacted_fields_are_named_by_replay_and_matched_by_mock(
    upstream: str, tmp_path: Path
) -> None:
    """A real HTTP recording (redacted by default) of a call carrying a password argument."""
    db = tmp_path / "r.db"
    relay = [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", str(db)]
    child = AnnouncedChild(
        [*relay, "--name", "secret"],
        lambda line: line.split()[2] if line.startswith("mcptape: relaying ") else None,
        "relay",
    )
    local = child.start(60.0)
    try:
        async with make_client(local, mode="legacy") as client:
            args = {"text": "hi", "password": "hunter2"}
            assert tool_text(await client.call_tool("echo", args)) == "hi"
    finally:
        child.stop()
    file = tmp_path / "secret.mcptape.jsonl"
    assert run_cli("export", "secret", "--db", str(db), "-o", str(file)).returncode == 0
    assert b"hunter2" not in file.read_bytes()

    replayed = run_cli("replay", str(file), "--db", str(db), "--upstream", upstream)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "not reproduced: frame #" in replayed.stdout
    assert "tools/call: $.params.arguments.password redacted in the recording" in replayed.stdout

    with http_mock(str(file)) as (url, mock):
        async with make_client(url, mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "hi", "password": "other"})
            assert tool_text(result) == "hi"
    assert any(
        "redacted and match any value: tools/call $.params.arguments.password" in line
        for line in mock.lines
    ), mock.lines
