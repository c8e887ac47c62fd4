"""Sessions recorded through the forward proxy replay and mock like any HTTP session (issue 16).

An SDK client reaches a Streamable HTTP test server through ``mcptape record --forward`` (the
forward proxy, its default lean engine, as a host with ``HTTP(S)_PROXY`` set would); the recorded session
is then replayed against the same server (equal) and the changed one (the echo named),
served by ``mcptape mock`` to an SDK client that gets the answers it got through the proxy, and
used as the cassette of the mock's record modes (``new_episodes`` forwarding a miss to the
server and appending it, ``none`` serving the grown file and explaining a miss, ``all``
rewriting it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.recording.registry import read_recording
from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
    tool_text,
)
from mcp_proxy.testing.process import READY_PREFIX, server_argv
from tests.conftest import mcptape_cmd
from tests.travel.conftest import PY, child_env, run_cli

pytestmark = pytest.mark.timeout(300)


def _after(prefix: str) -> Callable[[str], str | None]:
    return lambda line: line[len(prefix) :].split()[0] if line.startswith(prefix) else None


async def _through_proxy(url: str, proxy: str) -> dict[str, Any]:
    rec = CallbackRecorder()
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(proxy=proxy, trust_env=False, timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", cache=None, **rec.client_kwargs()) as client:
            return await run_scripted_session(client, rec)


async def test_forward_proxy_recording_replays_and_mocks(tmp_path: Path) -> None:
    db = tmp_path / "fwd.db"
    argv = [*server_argv(SCRIPTED_PRESETS, "http", name="mcptape-test"), "--port", "0"]
    server = AnnouncedChild(argv, _after(READY_PREFIX + " "), "server")
    url = server.start(60.0)
    try:
        env_keep = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env_keep["MCPTAPE_MITMPROXY_CONFDIR"] = str(tmp_path / "mitm")
        forward = [*mcptape_cmd(), "record", "--forward", "--port", "0", "--db", str(db)]
        proxy = AnnouncedChild(forward, _after("mcptape: forward proxy on "), "forward proxy")
        proxy.env = env_keep
        proxy_url = proxy.start(90.0)
        try:
            direct = await _through_proxy(url, proxy_url)
        finally:
            proxy.stop()
        sessions = json.loads(run_cli("sessions", "--db", str(db), "--format", "json").stdout)
        assert len(sessions) == 1 and sessions[0]["transport"] == "http", sessions
        file = tmp_path / "fwd.mcptape.jsonl"
        out = run_cli("export", sessions[0]["id"], "--db", str(db), "-o", str(file))
        assert out.returncode == 0, out.stderr
        same = run_cli("replay", str(file), "--db", str(db), "--upstream", url)
        assert same.returncode == 0 and "no differences" in same.stdout, same.stdout + same.stderr
        await _record_modes(file, url, tmp_path)
    finally:
        server.stop()

    changed_argv = [PY, "-m", "mcp_proxy.testing.presets_changed", "--preset"]
    changed_argv += ["basic_changed,slow,failing", "--transport", "http", "--port", "0"]
    changed = AnnouncedChild(changed_argv, _after(READY_PREFIX + " "), "changed server")
    changed_url = changed.start(60.0)
    try:
        diff = run_cli("replay", str(file), "--db", str(db), "--upstream", changed_url)
    finally:
        changed.stop()
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert '$.result.content[0].text: "hello, wire" → "HELLO, WIRE"' in diff.stdout

    mock = AnnouncedChild(
        [*mcptape_cmd(), "mock", "--port", "0", str(file)],
        lambda line: line.rsplit(" at ", 1)[1] if " at http://" in line else None,
        "mock",
    )
    mock_url = mock.start(60.0)
    try:
        rec = CallbackRecorder()
        async with make_client(mock_url, mode="legacy", recorder=rec) as client:
            assert await run_scripted_session(client, rec) == direct
    finally:
        mock.stop()


def _mock_stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY, args=["-m", "mcp_proxy", "mock", *args], env=child_env()
    )


async def _echo(target: StdioServerParameters, *texts: str) -> list[Any]:
    out: list[Any] = []
    async with make_client(target, mode="legacy") as client:
        for text in texts:
            try:
                out.append(tool_text(await client.call_tool("echo", {"text": text})))
            except MCPError as exc:
                out.append(exc)
    return out


async def _record_modes(recorded: Path, url: str, tmp_path: Path) -> None:
    """The forward-proxy recording as a cassette: new_episodes, none, all."""
    file = tmp_path / "cassette.mcptape.jsonl"
    shutil.copy(recorded, file)
    args = [str(file), "--record-mode", "new_episodes", "--upstream", url]
    assert await _echo(_mock_stdio(*args), "hello, wire", "fresh") == ["hello, wire", "fresh"]
    original, added = read_recording(file).sessions
    assert original.session["transport"] == added.session["transport"] == "http"
    assert b'"fresh"' in b"".join(f["raw"] for f in added.frames)
    assert b'"hello, wire"' not in b"".join(f["raw"] for f in added.frames)  # served, not sent

    fresh, miss = await _echo(_mock_stdio(str(file)), "fresh", "zzz")
    assert fresh == "fresh" and isinstance(miss, MCPError) and miss.code == -32050
    assert miss.data["nearest"][0]["differences"][0]["path"] == "$.params.arguments.text"

    args = [str(file), "--record-mode", "all", "--upstream", url]
    assert await _echo(_mock_stdio(*args), "fresh") == ["fresh"]
    (only,) = read_recording(file).sessions
    assert only.id not in (original.id, added.id)
