"""The same addon in a real ``mitmdump -s addons/mcptape.py`` (a user's own mitmproxy)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mcp_proxy.testing.client import CallbackRecorder, make_client, run_scripted_session
from tests.forward.conftest import Forward, TLSFiles, TLSServer

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
MITMDUMP = Path(sys.executable).with_name("mitmdump")


async def test_mitmdump_loads_the_addon(
    tmp_path: Path, confdir: Path, tls_files: TLSFiles, tls_stateful: TLSServer
) -> None:
    from mcp.client.streamable_http import streamable_http_client

    db = tmp_path / "dump.db"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, read by a thread
        [
            str(MITMDUMP),
            "--set",
            "flow_detail=0",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "-s",
            str(ROOT / "addons" / "mcptape.py"),
            "--set",
            f"mcptape_db={db}",
            "--set",
            "mcptape_name=from-mitmdump",
            "--set",
            f"confdir={confdir}",
            "--set",
            f"ssl_verify_upstream_trusted_ca={tls_files.ca_pem}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            m = re.search(r"listening at (?:\*|[\d.]+):(\d+)", line)
            if m and not ready.is_set():
                found.append(m.group(1))
                ready.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            assert proc.poll() is None and time.monotonic() < deadline, "\n".join(lines)
        fw = Forward(
            f"http://127.0.0.1:{found[0]}",
            proc,
            db,
            lines,
            ca_cert=confdir / "mitmproxy-ca-cert.pem",
        )
        client, tee = fw.tee_client()
        rec = CallbackRecorder()
        async with client:
            transport = streamable_http_client(tls_stateful.url, http_client=client)
            async with make_client(transport, mode="legacy", recorder=rec) as c:
                out = await run_scripted_session(c, rec)
        assert out["echo"] == "hello, wire"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
        t.join(5)
    # mitmproxy calls every addon attribute named like one of its hooks: none of ours may
    # raise (a method named ``update`` did, on every event of every flow).
    assert not [line for line in lines if "Addon error" in line], "\n".join(lines)
    con = sqlite3.connect(db)
    try:
        sessions = con.execute("SELECT id, name, status, meta FROM sessions").fetchall()
        assert len(sessions) == 1, sessions
        _sid, name, status, meta = sessions[0]
        assert name == "from-mitmdump" and status == "ended"
        assert json.loads(meta)["grouping"]["rule"] == "mcp-session-id"
        n_ex = con.execute("SELECT count(*) FROM http_exchanges").fetchone()[0]
        assert n_ex == len(tee.seen)
        kinds = [r[0] for r in con.execute("SELECT kind FROM frames ORDER BY seq")]
        assert kinds.count("request") == kinds.count("response") + kinds.count("error")
    finally:
        con.close()


def test_only_intended_mitmproxy_hooks() -> None:
    """mitmproxy invokes any addon attribute named like a hook (``update`` after each event of
    each flow): the addon's names that are hook names are exactly the hooks it implements."""
    from mitmproxy import hooks
    from mitmproxy.addons import default_addons

    default_addons()  # imports every layer, so every hook class is registered
    from mcp_proxy.forward.addon import McpTape

    names = {n for n in hooks.all_hooks if hasattr(McpTape(), n)}
    assert names == {
        "load",
        "configure",
        "running",
        "done",
        "request",
        "responseheaders",
        "response",
        "error",
    }
