"""Injected frames and findings are shown apart on the dashboard's session page.

The recording is made by the real stdio relay (in-process, raw line server, no SDK: fast) with a
fault engine, then the page is fetched through the real aiohttp app.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from mcp_proxy.faults import FaultEngine, parse_rule
from mcp_proxy.recorder.runner import Recorder
from mcp_proxy.relay.stdio import StdioRelay
from tests.dashboard.conftest import TOKEN, get_html
from tests.helpers import db as rdb


def record_with_a_fault(db: Path) -> str:
    """One request answered by an injected error, one passed through; returns the session id."""
    url = f"sqlite:///{db}"
    recorder = Recorder(url)
    recorder.start()
    host_r, relay_in = os.pipe()
    relay_out, host_w = os.pipe()
    engine = FaultEngine([parse_rule("error code=-32001 message=down method=boom")])
    relay = StdioRelay(
        [sys.executable, "-m", "mcp_proxy.testing.rawecho"],
        recorder=recorder,
        name="injected",
        stdin_fd=host_r,
        stdout_fd=host_w,
        faults=engine,
    )
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(relay.run()), daemon=True)
    thread.start()
    os.write(relay_in, b'{"jsonrpc":"2.0","id":1,"method":"boom"}\n')
    os.write(relay_in, b'{"jsonrpc":"2.0","id":2,"method":"fine"}\n')
    got = b""
    while got.count(b"\n") < 2:
        got += os.read(relay_out, 4096)
    os.close(relay_in)
    thread.join(15)
    recorder.close()
    for fd in (host_r, relay_out, host_w):
        os.close(fd)
    assert got.split(b"\n")[0] == (
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"down"}}'
    )
    [session] = rdb.sessions(db)
    return str(session["id"])


async def test_injected_frames_and_findings_are_marked(tmp_path: Path) -> None:
    db = tmp_path / "dash.sqlite"
    sid = record_with_a_fault(db)
    frames = rdb.frames(db, sid)
    assert [(f["direction"], f["channel"], f["msg_id"]) for f in frames] == [
        ("c2s", "stdio", "1"),
        ("s2c", "inject", "1"),
        ("c2s", "stdio", "2"),
        ("s2c", "stdio", "2"),
    ]
    app = create_app(f"sqlite:///{db}", token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        page = await get_html(client, f"/sessions/{sid}")
        assert page.count('class="badge injected"') >= 2  # the inject frame and its finding
        assert "ch-inject" in page and "injected fault" in page
        assert "inject.error" in page
