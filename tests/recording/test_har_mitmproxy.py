"""A HAR written by a real mitmproxy imports and diffs equal to mcptape's recording of it.

The SDK client talks to ``mitmdump --mode reverse:RELAY --set hardump=FILE``, which forwards to
the real HTTP relay (``mcptape record --upstream``) in front of a real SDK server: both record the
same traffic. mitmdump writes its HAR when it stops; ``mcptape import`` reads it and
``mcptape diff`` finds no difference with the relay's session.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_proxy.testing.client import SCRIPTED_PRESETS, make_client, tool_text
from mcp_proxy.testing.process import start_http_server
from tests.recording.conftest import run_cli
from tests.relay.conftest import run_proxy

pytestmark = pytest.mark.timeout(240)
MITMDUMP = Path(sys.executable).with_name("mitmdump")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mitmdump exited: {proc.stdout.read() if proc.stdout else ''!r}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("mitmdump did not listen")


async def _session(url: str) -> str:
    async with make_client(url, mode="legacy") as client:
        await client.list_tools()
        return tool_text(await client.call_tool("echo", {"text": "through mitmproxy"}))


def test_a_mitmproxy_har_imports_and_diffs_equal_to_the_relays_recording(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    har = tmp_path / "mitm.har"
    port = _free_port()
    with start_http_server(SCRIPTED_PRESETS, "http") as (upstream, _proc):
        with run_proxy(upstream, db) as px:
            mitm = subprocess.Popen(
                [
                    str(MITMDUMP),
                    "--mode",
                    f"reverse:{px.origin}",
                    "--listen-host",
                    "127.0.0.1",
                    "--listen-port",
                    str(port),
                    "--set",
                    f"hardump={har}",
                    "--set",
                    f"confdir={tmp_path / 'mitm'}",
                    "-q",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            try:
                _wait_port(port, mitm)
                path = upstream.split("/", 3)[3]
                answer = asyncio.run(_session(f"http://127.0.0.1:{port}/{path}"))
            finally:
                mitm.send_signal(signal.SIGINT)  # mitmdump writes the HAR as it stops
                mitm.wait(60)
            px.stop()
            recorded = max(px.sessions(), key=lambda r: r["frame_count"])
    assert answer == "through mitmproxy"
    doc = json.loads(har.read_bytes())
    assert doc["log"]["creator"]["name"] == "mitmproxy"

    imported = run_cli("import", str(har), "--db", str(db))
    assert imported.returncode == 0, imported.stderr
    new_id = imported.stdout.split()[0]
    diff = run_cli("diff", recorded["id"], new_id, "--db", str(db), "--format", "json")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    report = json.loads(diff.stdout)
    assert report["equal"] and report["counts"]["same"] >= 3
