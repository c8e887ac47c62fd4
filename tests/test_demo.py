"""`mcptape demo` on a "fresh machine": no database yet, the default location, no terminal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.analysis.test_real_sessions import analysed
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape


@pytest.mark.timeout(120)
def test_demo_records_both_eras_into_the_default_database(tmp_path: Path) -> None:
    # As after the README's `uv run mcptape demo`: uv's variables set, mcptape on PATH only
    # for that run. Every "Next:" line must then say `uv run mcptape`.
    env = {k: v for k, v in os.environ.items() if k != "MCPTAPE_DB"}
    env["UV"] = env.get("UV", "uv")
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
    # The 2026-07-28 session ran one task: the handle, at least one poll, the inlined result.
    demo = rdb.frames(db, sessions["demo"]["id"])
    polls = [f for f in demo if f["method"] == "tasks/get" and f["kind"] == "request"]
    assert polls, "the demo's task must be polled"
    assert any(b'"resultType":"task"' in bytes(f["raw"]) for f in demo)
    assert any(b"findings on flight recorders" in bytes(f["raw"]) for f in demo)
    assert "task research -> completed after" in out
    # what it prints: the sessions, their frames, and what to try next (no browser without a tty)
    assert "tools/call" in out and "Next:" in out
    next_lines = out.split("Next:", 1)[1].strip().splitlines()
    commands = [line.split("#")[0].strip() for line in next_lines if "#" in line]
    assert len(commands) >= 10 and all(c.startswith("uv run mcptape ") for c in commands)
    assert "uv tool install ." in out  # how to get a plain `mcptape` once
    assert out.rstrip().splitlines()[-1].strip().startswith("uv run mcptape dashboard")
    assert "Traceback" not in proc.stderr.decode()
    # The printed commands work where the user is (here: uv's `mcptape` is the venv's).
    shown = commands[1].split()  # uv run mcptape show demo
    assert shown[:4] == ["uv", "run", "mcptape", "show"]
    ran = subprocess.run(
        [*mcptape_cmd(), *shown[3:], "--no-body"], capture_output=True, env=env, timeout=60
    )
    assert ran.returncode == 0 and b"tools/call" in ran.stdout, ran.stderr
    # The demo's sessions are clean: no finding above info, and `check` says so.
    for name in ("demo", "demo-legacy"):
        a = analysed(db, name)
        assert [f.code for f in a.findings if f.severity != "info"] == [], name
    done = run_mcptape(
        "check", "demo", "demo-legacy", "--db", str(db), "--fail-on", "warning", "--format", "json"
    )
    assert done.returncode == 0, done.stderr


def test_next_steps_name_the_command_as_the_user_runs_it() -> None:
    from mcp_proxy.demo import next_steps

    plain = next_steps("mcptape")
    assert all(line.strip().startswith("mcptape ") for line in plain)
    assert not any("uv tool install" in line for line in plain)
    via_uv = next_steps("uv run mcptape")
    assert via_uv[0].strip().startswith("uv run mcptape sessions")
    assert "uv tool install ." in via_uv[-1]
