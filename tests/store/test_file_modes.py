"""Recordings are private by default (issue 22, defect 17), through the real CLI.

Before: the database, its ``-wal`` and ``-shm`` were 0644 and the data directory 0755 — every
local user could read what hosts and servers said. Now a database mcptape creates is 0600 (its
``-wal``/``-shm`` follow: SQLite gives them the main file's mode) and a directory it creates
0700, on every path that creates one (``store/engine.py``: the one place); what already exists
keeps its mode.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import mcptape_cmd
from tests.recorder.util import ECHO, ROOT, wait_for

pytestmark = pytest.mark.timeout(90)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPTAPE_DB"}
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    home = tmp_path / "home"
    home.mkdir()
    return {
        **env,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),  # not there yet: mcptape creates it
        "PYTHONPATH": path,
    }


def _frames(db: Path) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT COUNT(*) FROM frames").fetchone()[0])
    finally:
        con.close()


def test_record_creates_a_private_data_dir_and_database(tmp_path: Path) -> None:
    env = _env(tmp_path)
    data = Path(env["XDG_DATA_HOME"]) / "mcptape"
    db = data / "mcptape.db"
    proc = subprocess.Popen(
        [*mcptape_cmd(), "record", "--", *ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        proc.stdin.write(ping)
        proc.stdin.flush()
        assert proc.stdout.readline() == ping
        # While the recorder holds the database open, its -wal and -shm exist.
        wait_for(lambda: db.exists() and _frames(db) == 2, what="the frames")
        modes = {p.name: _mode(p) for p in data.iterdir() if p.name.startswith("mcptape.db")}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert modes == {
        "mcptape.db": 0o600,
        "mcptape.db-wal": 0o600,
        "mcptape.db-shm": 0o600,
        "mcptape.db.migrate.lock": 0o600,
    }
    assert _mode(data) == 0o700 and _mode(data.parent) == 0o700  # both created by mcptape
    assert proc.returncode == 0


def test_import_into_a_new_folder_creates_it_private_and_leaves_wider_files_alone(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    source = tmp_path / "src.sqlite"
    run = [*mcptape_cmd(), "record", "--db", str(source), "--name", "src", "--", *ECHO]
    done = subprocess.run(run, input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', env=env,
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    jsonl = tmp_path / "src.jsonl"
    export = [*mcptape_cmd(), "export", "--db", str(source), "src", "-o", str(jsonl)]
    assert subprocess.run(export, env=env, capture_output=True, timeout=60).returncode == 0
    db = tmp_path / "new" / "deeper" / "imported.db"
    imp = [*mcptape_cmd(), "import", "--db", str(db), str(jsonl)]
    done = subprocess.run(imp, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _frames(db) == 2
    assert _mode(db) == 0o600
    assert _mode(db.parent) == 0o700 and _mode(db.parent.parent) == 0o700
    assert not [p for p in db.parent.iterdir() if _mode(p) & 0o077]  # the lock file too
    # A database the user made readable by others stays so: mcptape changes no existing mode.
    os.chmod(db, 0o644)
    done = subprocess.run(imp, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _mode(db) == 0o644 and _frames(db) == 4
