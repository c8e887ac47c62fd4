"""`mcptape demo` on a "fresh machine": no database yet, the default location, no terminal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb


@pytest.mark.timeout(120)
def test_demo_records_both_eras_into_the_default_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MCPTAPE_DB"}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["HOME"] = str(tmp_path / "home")
    proc = subprocess.run([*mcptape_cmd(), "demo"], capture_output=True, env=env, timeout=110)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    db = tmp_path / "data" / "mcptape" / "mcptape.db"
    assert db.exists()
    sessions = {s["name"]: s for s in rdb.sessions(db)}
    assert set(sessions) == {"demo", "demo-legacy", "demo-http"}
    assert sessions["demo"]["era"] == "2026-07-28"
    assert sessions["demo-legacy"]["era"] == "initialize"
    assert sessions["demo-http"]["transport"] == "http"
    http_exchanges = rdb.rows(
        db,
        "SELECT COUNT(*) AS n FROM http_exchanges WHERE session_id = ?",
        sessions["demo-http"]["id"],
    )
    assert http_exchanges[0]["n"] >= 13
    for s in sessions.values():
        assert s["started_at"] <= min(f["ts"] for f in rdb.frames(db, s["id"]))
        methods = {f["method"] for f in rdb.frames(db, s["id"])}
        assert {"tools/call", "resources/read", "prompts/get", "notifications/progress"} <= methods
        assert "notifications/message" in methods
        assert s["status"] == "ended" and s["gap_count"] == 0
    # what it prints: the sessions, their frames, and what to try next (no browser without a tty)
    assert "tools/call" in out and "Next:" in out and "mcptape dashboard" in out
    assert "Traceback" not in proc.stderr.decode()
