"""Opening a database, as a user meets it: URLs, drivers, schema versions, ``mcptape db``.

Everything runs through the real ``mcptape`` command against real databases (a SQLite file, a
database on the test PostgreSQL server): what is checked is the exit status and the one line a
user reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.schema import SCHEMA_HEAD
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.db import PgServer

PY = sys.executable


class Result:
    def __init__(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """The real command line in this process (a subprocess costs a second of imports each)."""
    from typer.testing import CliRunner

    from mcp_proxy.cli import _register_commands, app

    _register_commands()
    r = CliRunner().invoke(app, list(args), env=env)
    return Result(r.exit_code, r.stdout_bytes, r.stderr_bytes)


def run(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, timeout=60):
    """``mcptape ARGS`` as a separate process (when the environment is what is tested)."""
    return subprocess.run(
        [*mcptape_cmd(), *args],
        capture_output=True,
        timeout=timeout,
        input=stdin,
        env={**os.environ, **(env or {})},
    )


def one_line(err: bytes) -> str:
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


def set_revision(url: str, rev: str) -> None:
    engine = engine_mod.sync_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": rev})
    engine.dispose()


def downgrade(url: str, rev: str) -> None:
    from alembic import command

    engine = engine_mod.sync_engine(url)
    cfg = engine_mod.alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, rev)
    engine.dispose()


# --------------------------------------------------------------------------- URLs
def test_postgresql_urls_mean_psycopg_on_both_sides():
    sync, aio = engine_mod._sync_url, engine_mod._async_url
    assert sync("postgresql://u:p@h/db").startswith("postgresql+psycopg://u:p@h/db")
    assert aio("postgresql://u:p@h/db").startswith("postgresql+psycopg://u:p@h/db")
    # Heroku-style scheme, and an async driver named in a URL the recorder (sync) also reads.
    assert sync("postgres://h/db") == "postgresql+psycopg://h/db"
    assert sync("postgresql+asyncpg://h/db") == "postgresql+psycopg://h/db"
    assert aio("postgresql+asyncpg://h/db") == "postgresql+asyncpg://h/db"
    assert sync("postgresql+psycopg2://h/db") == "postgresql+psycopg2://h/db"
    assert aio("postgresql+psycopg2://h/db") == "postgresql+psycopg://h/db"
    # libpq options survive the rewrite (the Unix-socket form the tests use, sslmode).
    assert sync("postgresql://u@/db?host=/run/pg&sslmode=require").endswith(
        "?host=%2Frun%2Fpg&sslmode=require"
    )
    assert engine_mod.display_url("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"


def test_a_missing_driver_is_one_line_naming_the_install_command(tmp_path: Path):
    # An environment without psycopg: a module of that name that cannot be imported, first on
    # the path (the real package cannot be uninstalled from under the other tests).
    shadow = tmp_path / "shadow"
    (shadow / "psycopg").mkdir(parents=True)
    (shadow / "psycopg" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    env = {"PYTHONPATH": str(shadow)}
    out = run("sessions", "--db", "postgresql://someone@db.invalid/team", env=env)
    assert out.returncode == 3
    line = one_line(out.stderr)
    assert "psycopg" in line and "pip install 'psycopg[binary]'" in line, line
    # SQLite needs no driver of its own: the same environment records into a file.
    db = tmp_path / "x.db"
    req = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    rec = run("record", "--db", str(db), "--", PY, "-m", "mcp_proxy.testing.rawecho", env=env,
              stdin=req)  # fmt: skip
    assert rec.returncode == 0 and b'"id":1' in rec.stdout, rec.stderr
    assert rdb.rows(db, "SELECT frame_count FROM sessions") == [{"frame_count": 2}]


def test_an_unreachable_server_is_one_line_and_quick():
    t0 = time.monotonic()
    out = cli("sessions", "--db", "postgresql://mcptape@127.0.0.1:1/nothing")
    assert out.returncode == 3
    line = one_line(out.stderr)
    assert line.startswith("mcptape: database error:") and "127.0.0.1" in line, line
    assert time.monotonic() - t0 < 20


# --------------------------------------------------------------------------- schema versions
def test_postgresql_at_a_newer_schema_is_refused_and_recording_still_relays(any_db_url: str):
    """A recorder of an older mcptape never writes into a database a newer one upgraded."""
    engine_mod.ensure_schema(any_db_url)
    set_revision(any_db_url, "9999")
    out = cli("sessions", "--db", any_db_url)
    assert out.returncode == 3
    assert "newer than this mcptape" in one_line(out.stderr)
    status = cli("db", "status", "--db", any_db_url)
    assert status.returncode == 3 and b"newer than this mcptape" in status.stdout
    up = cli("db", "upgrade", "--db", any_db_url)
    assert up.returncode == 3 and "upgrade mcptape" in one_line(up.stderr)
    # The relay goes on: the host still talks to its server, and is told why nothing is saved.
    req = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    rec = run("record", "--db", any_db_url, "--", PY, "-m", "mcp_proxy.testing.rawecho", stdin=req)
    assert rec.returncode == 0
    assert b'"id":1' in rec.stdout
    assert b"newer than this mcptape" in rec.stderr
    assert rdb.rows(any_db_url, "SELECT count(*) AS n FROM sessions")[0]["n"] == 0


def test_postgresql_behind_needs_db_upgrade_once(pg_server: PgServer):
    url = pg_server.create_database()
    try:
        downgrade(url, "0002")
        out = cli("sessions", "--db", url)
        assert out.returncode == 3
        line = one_line(out.stderr)
        assert "schema 0002" in line and "mcptape db upgrade --db" in line, line
        status = cli("db", "status", "--db", url, "--json")
        assert status.returncode == 3
        assert b'"state": "behind"' in status.stdout and b'"auto_upgrade": false' in status.stdout
        up = cli("db", "upgrade", "--db", url)
        assert up.returncode == 0, up.stderr
        assert f"schema 0002 → {SCHEMA_HEAD}".encode() in up.stdout
        again = cli("db", "upgrade", "--db", url)
        assert again.returncode == 0 and b"already at schema" in again.stdout
        assert cli("sessions", "--db", url).returncode == 0
        assert cli("db", "status", "--db", url).returncode == 0
    finally:
        pg_server.drop_database(url)


def test_sqlite_behind_is_upgraded_by_whoever_opens_it(tmp_path: Path):
    url = "sqlite:///" + str(tmp_path / "old.db")
    engine_mod.ensure_schema(url)
    downgrade(url, "0002")
    status = cli("db", "status", "--db", url)
    assert status.returncode == 0 and b"upgraded the next time" in status.stdout
    assert cli("sessions", "--db", url).returncode == 0
    engine = engine_mod.sync_engine(url)
    assert engine_mod.current_revision(engine) == SCHEMA_HEAD
    engine.dispose()


def test_an_empty_postgresql_database_is_created_on_first_use(pg_server: PgServer):
    url = pg_server.create_database(migrated=False)
    try:
        status = cli("db", "status", "--db", url)
        assert status.returncode == 0 and b"empty" in status.stdout
        # Through MCPTAPE_DB, the way a team sets it once in a shell profile or CI variable.
        out = cli("sessions", env={"MCPTAPE_DB": url})
        assert out.returncode == 0, out.stderr
        assert rdb.rows(url, "SELECT version_num FROM alembic_version") == [
            {"version_num": SCHEMA_HEAD}
        ]
    finally:
        pg_server.drop_database(url)


@pytest.mark.timeout(120)
def test_db_upgrade_by_many_at_once_migrates_once(pg_server: PgServer):
    """Four ``mcptape db upgrade`` started together on an empty database: all succeed."""
    url = pg_server.create_database(migrated=False)
    try:
        procs = [
            subprocess.Popen(
                [*mcptape_cmd(), "db", "upgrade", "--db", url],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        results = [(p.wait(90), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        assert all(rc == 0 for rc, _, _ in results), results
        created = [out for _, out, _ in results if b"empty" in out]
        assert len(created) == 1, results  # the others found it done behind the lock
        assert rdb.rows(url, "SELECT count(*) AS n FROM alembic_version")[0]["n"] == 1
    finally:
        pg_server.drop_database(url)
