"""Drive ``mcptape record`` as a host would, and look at what the recording holds."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent.parent
ECHO = [PY, "-m", "tests.recorder.peers", "echo"]


def record(
    db: Path | str,
    server: list[str],
    *,
    name: str = "t",
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``mcptape record --db DB --name NAME [options] -- server…`` with pipes on all three fds."""
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", str(db), "--name", name, *options, "--", *server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
    )


def session(db: Path | str, name: str) -> dict[str, Any]:
    rows = [s for s in rdb.sessions(db) if s["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


def findings(db: Path | str, sid: str) -> list[dict[str, Any]]:
    return rdb.rows(db, "SELECT * FROM findings WHERE session_id = ? ORDER BY id", sid)


def wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> None:
    """Poll ``predicate`` until true. A database error while polling is transient (the SQLite
    file or its tables not there yet, a PostgreSQL connection refused or reset while a recorder
    or the server starts) and counts as false; anything else propagates."""
    import psycopg

    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (sqlite3.Error, psycopg.Error) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(
        f"timed out waiting for {what}" + (f" (last error: {last})" if last else "")
    )


def frame_count(db: Path | str, name: str) -> int:
    rows = rdb.rows(
        db,
        "SELECT COUNT(*) AS n FROM frames f JOIN sessions s ON s.id = f.session_id"
        " WHERE s.name = ?",
        name,
    )
    return int(rows[0]["n"])


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(entry))
    return out


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def worker_pid(relay_pid: int) -> int:
    for pid in children(relay_pid):
        if b"mcp_proxy.recorder" in cmdline(pid):
            return pid
    raise AssertionError("no recorder process found")
