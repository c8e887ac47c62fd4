"""Test databases: read a recording straight from the store, and run a throwaway PostgreSQL.

Reading (independent of the store API, so a test checks what is really in the database):
``rows``, ``sessions``, ``frames`` and ``stream`` take either a SQLite file (a ``Path`` or a plain
path string) or a database URL (``sqlite:///…`` or ``postgresql://…``). SQL is written with
``?`` placeholders, as for sqlite3; for PostgreSQL they are turned into psycopg's ``%s``.

PostgreSQL for the tests (:class:`PgCluster`, :class:`PgServer`):

- ``.ci/run`` starts one cluster for the whole CI run (``python -m tests.helpers.db start DIR``)
  and exports its URL as ``MCPTAPE_TEST_PG``; the test session uses it.
- Without ``MCPTAPE_TEST_PG`` the test session starts a cluster of its own (initdb into a
  temporary folder, a Unix socket only, no TCP port) and stops it at the end.
- PostgreSQL refuses to run as root: when the tests run as root (CI containers do), the cluster
  runs as ``nobody`` in a folder owned by ``nobody``.
- Every test gets a fresh database, created from a template that is already migrated to the
  head revision (``CREATE DATABASE … TEMPLATE``: a few tens of milliseconds instead of running
  alembic each time).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The URL of a running PostgreSQL (a superuser's, any database) that tests may create
#: databases in. Set by ``.ci/run``; without it the tests start a cluster of their own.
ENV_PG = "MCPTAPE_TEST_PG"
#: ``sqlite``, ``postgresql`` or both (comma-separated): which dialects the parametrised
#: fixtures offer. Default: both.
ENV_DIALECTS = "MCPTAPE_TEST_DIALECTS"
SUPERUSER = "mcptape"


# --------------------------------------------------------------------------- reading rows
def _is_pg(db: Path | str) -> bool:
    return isinstance(db, str) and db.split(":", 1)[0].split("+", 1)[0] in (
        "postgresql",
        "postgres",
    )


def _sqlite_file(db: Path | str) -> Path:
    if isinstance(db, str) and db.startswith("sqlite"):
        import sqlalchemy as sa

        return Path(sa.engine.make_url(db).database or "")
    return Path(db)


def libpq_conninfo(url: str) -> str:
    """A SQLAlchemy-style ``postgresql+driver://`` URL as libpq understands it."""
    scheme, rest = url.split("://", 1)
    del scheme
    return "postgresql://" + rest


def rows(db: Path | str, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Rows of ``sql`` (``?`` placeholders) as dicts, the same on both dialects: ``bytes`` for
    blobs, JSON columns as their text (booleans are ``0``/``1`` on SQLite, ``False``/``True`` on
    PostgreSQL — equal either way)."""
    if _is_pg(db):
        import psycopg
        from psycopg.rows import dict_row
        from psycopg.types.string import TextLoader

        assert isinstance(db, str)
        with psycopg.connect(libpq_conninfo(db), row_factory=dict_row, autocommit=True) as conn:
            # JSON as text, as sqlite3 returns it: tests read either dialect the same way.
            conn.adapters.register_loader("json", TextLoader)
            conn.adapters.register_loader("jsonb", TextLoader)
            cur = conn.execute(sql.replace("%", "%%").replace("?", "%s"), args)  # type: ignore[arg-type]
            out = [dict(r) for r in cur.fetchall()] if cur.description else []
        return [
            {k: (bytes(v) if isinstance(v, memoryview) else v) for k, v in r.items()} for r in out
        ]
    conn = sqlite3.connect(_sqlite_file(db))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def execute(db: Path | str, sql: str, *args: Any) -> None:
    """Run one statement (``?`` placeholders) and commit, on either dialect."""
    if _is_pg(db):
        import psycopg

        assert isinstance(db, str)
        with psycopg.connect(libpq_conninfo(db), autocommit=True) as conn:
            conn.execute(sql.replace("%", "%%").replace("?", "%s"), args)  # type: ignore[arg-type]
        return
    conn = sqlite3.connect(_sqlite_file(db))
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def sessions(db: Path | str) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM sessions ORDER BY started_at")


def frames(db: Path | str, session_id: str | None = None) -> list[dict[str, Any]]:
    if session_id is None:
        return rows(db, "SELECT * FROM frames ORDER BY session_id, seq")
    return rows(db, "SELECT * FROM frames WHERE session_id = ? ORDER BY seq", session_id)


def stream(db: Path | str, session_id: str, direction: str, channel: str = "stdio") -> bytes:
    """The concatenated bytes of one direction/channel: must equal what crossed the wire."""
    return b"".join(
        f["raw"]
        for f in frames(db, session_id)
        if f["direction"] == direction and f["channel"] == channel
    )


def db_arg(db: Path | str) -> str:
    """What to pass to ``mcptape --db``: the file path for SQLite, the URL otherwise."""
    return str(db)


def url_of(db: Path | str) -> str:
    """A SQLAlchemy URL for a SQLite file or a URL."""
    if isinstance(db, str) and "://" in db:
        return db
    return "sqlite:///" + str(Path(db))


# --------------------------------------------------------------------------- a cluster
def pg_bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: PATH, ``pg_config``, or Debian's versioned folders."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").exists():
            return Path(out.stdout.strip())
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def _run_as() -> dict[str, Any]:
    """PostgreSQL will not run as root: drop to ``nobody`` when we are root."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        import grp
        import pwd

        user = pwd.getpwnam("nobody")
        group = grp.getgrgid(user.pw_gid).gr_name
        return {"user": user.pw_uid, "group": group, "extra_groups": []}
    return {}


@dataclass
class PgCluster:
    """A throwaway PostgreSQL cluster in ``root``: data in ``root/data``, socket in ``root``.

    Tuned for tests and benchmarks that own their data: no fsync (a crash loses a test
    database, nothing else), Unix socket only (nothing listens on the network).
    """

    root: Path
    bindir: Path
    port: int = 5432
    durable: bool = False  # True: keep fsync/synchronous_commit (the benchmark's honest mode)
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "server.log"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @classmethod
    def create(cls, root: Path | None = None, *, durable: bool = False) -> PgCluster:
        """``initdb`` a new cluster (as ``nobody`` when we are root)."""
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql);"
                " on Debian: apt-get install postgresql"
            )
        if root is None:
            # Directly under /tmp: the socket path must stay short (107 bytes) and ``nobody``
            # must be able to reach it (pytest's own temp folders are private to root).
            root = Path(tempfile.mkdtemp(prefix="mcptape-pg-", dir="/tmp"))
        root.mkdir(parents=True, exist_ok=True)
        as_user = _run_as()
        if as_user:
            os.chown(root, as_user["user"], -1)
        os.chmod(root, 0o700)
        cluster = cls(root, bindir, durable=durable)
        cmd = [
            str(bindir / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **as_user)
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {(out.stderr or out.stdout).strip()[-500:]}")
        return cluster

    def _ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            **_run_as(),
        )

    def start(self) -> None:
        opts = [
            "-c listen_addresses=''",
            f"-c unix_socket_directories={self.root}",
            f"-c port={self.port}",
            "-c max_connections=300",
            "-c shared_buffers=128MB",
        ]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        out = self._ctl("-l", str(self.log), "-w", "-t", "60", "-o", " ".join(opts), "start")
        if out.returncode != 0:
            tail = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr.strip()} {tail}".strip())

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "stop")

    def running(self) -> bool:
        return self._ctl("status").returncode == 0

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.root}&port={self.port}"


# --------------------------------------------------------------------------- databases in it
_counter = itertools.count(1)


@dataclass
class PgServer:
    """A PostgreSQL server the tests may create databases in (their own cluster or CI's)."""

    admin_url: str
    cluster: PgCluster | None = None
    created: list[str] = field(default_factory=list)
    _template: str | None = None

    def url_for(self, dbname: str) -> str:
        import sqlalchemy as sa

        return sa.engine.make_url(self.admin_url).set(database=dbname).render_as_string(False)

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(libpq_conninfo(self.admin_url), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def check(self) -> str:
        """The server's version string (raises when it cannot be reached)."""
        import psycopg

        with psycopg.connect(
            libpq_conninfo(self.admin_url), autocommit=True, connect_timeout=10
        ) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def template(self) -> str:
        """A database migrated to head, created once per test session, to copy from."""
        if self._template is None:
            from mcp_proxy.store.engine import ensure_schema
            from mcp_proxy.store.schema import SCHEMA_HEAD

            name = f"mcptape_tpl_{SCHEMA_HEAD}_{os.getpid()}"
            self._admin(f'DROP DATABASE IF EXISTS "{name}"')
            self._admin(f'CREATE DATABASE "{name}"')
            self.created.append(name)
            ensure_schema(self.url_for(name))
            self._template = name
        return self._template

    def create_database(self, *, migrated: bool = True, prefix: str = "t") -> str:
        """A new database (migrated to head, or empty); returns its URL."""
        name = f"mcptape_{prefix}_{os.getpid()}_{next(_counter)}"
        if migrated:
            self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template()}"')
        else:
            self._admin(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.url_for(name)

    def drop_database(self, url: str) -> None:
        import sqlalchemy as sa

        name = sa.engine.make_url(url).database
        with contextlib.suppress(Exception):
            # FORCE: a recorder that outlived its test must not keep the database alive.
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(ValueError):
            self.created.remove(str(name))

    def close(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(Exception):
                self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()
        if self.cluster is not None:
            self.cluster.destroy()


def start_pg_server() -> PgServer:
    """The server named by ``MCPTAPE_TEST_PG``, or a new local cluster (raises with why not)."""
    url = os.environ.get(ENV_PG)
    if url:
        server = PgServer(url)
        try:
            server.check()
        except Exception as exc:
            raise RuntimeError(f"{ENV_PG}={url} is not reachable: {exc}") from exc
        return server
    cluster = PgCluster.create()
    try:
        cluster.start()
        server = PgServer(cluster.url(), cluster)
        server.check()
    except BaseException:
        cluster.destroy()
        raise
    return server


def wait_until(predicate: Any, timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true; an exception (no table yet …) counts as false."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except Exception:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------- .ci/run
def main(argv: list[str]) -> int:
    """``start DIR`` prints the URL of a new cluster in DIR; ``stop DIR`` stops and removes it."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.helpers.db start|stop DIR", file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "start":
        try:
            cluster = PgCluster.create(root)
            cluster.start()
            PgServer(cluster.url()).check()
        except Exception as exc:
            print(f"cannot start PostgreSQL: {exc}", file=sys.stderr)
            return 1
        print(cluster.url())
        return 0
    bindir = pg_bindir()
    if bindir is not None and (root / "data").exists():
        PgCluster(root, bindir).destroy()
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
