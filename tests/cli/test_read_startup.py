"""``show`` and ``export`` of a SQLite file start without the async store (issue #25): they
name the session, read its frames and findings through the driver (``store/direct.py``,
``store/recordings.py``), so neither imports SQLAlchemy — its async engine and ORM were most of
a reading command's start-up CPU. Run as processes, as a user runs them; Python's own import
log (switched on by the environment) says what they imported. The output is the in-process
command's, byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape
from tests.travel.conftest import RECORDINGS

SQL_LIBRARIES = ("sqlalchemy", "aiosqlite", "alembic")


def _as_a_process(*args: str) -> tuple[str, set[str]]:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(
        [*mcptape_cmd(), *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    return done.stdout, imported


def test_show_and_export_read_a_sqlite_file_without_sqlalchemy(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    imported = run_mcptape("import", str(RECORDINGS / "basic-legacy.mcptape.jsonl"), "--db", db)
    assert imported.returncode == 0, imported.stderr
    sid = imported.stdout.split()[0]

    shown, modules = _as_a_process("show", sid[:8], "--db", db)
    assert "mcp_proxy.store.direct" in modules
    assert not {m for m in modules if m.split(".")[0] in SQL_LIBRARIES}
    assert "tools/call" in shown and "Findings" in shown
    assert shown == run_mcptape("show", sid[:8], "--db", db).stdout

    out = tmp_path / "out.jsonl"
    _, modules = _as_a_process("export", sid, "-o", str(out), "--db", db)
    assert not {m for m in modules if m.split(".")[0] in SQL_LIBRARIES}
    again = tmp_path / "again.jsonl"
    assert run_mcptape("export", sid, "-o", str(again), "--db", db).returncode == 0
    assert out.read_bytes() == again.read_bytes() and b'"type":"frame"' in out.read_bytes()
