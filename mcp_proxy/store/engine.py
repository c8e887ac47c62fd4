"""Where the database is, how to connect to it, and how its schema is kept current.

The default database lives in the user's data directory (XDG on Linux, the platform equivalents
elsewhere); ``--db`` or ``MCPTAPE_DB`` override it with a path or a SQLAlchemy URL. SQLite runs
in WAL mode with a busy timeout so that many ``mcptape record`` processes (one per server, as
Claude Desktop runs them) can write to one file at once.

PostgreSQL (``postgresql://user@host/db``) is the store for a team: psycopg 3 is the driver on
both the sync side (recorder, migrations, ``db copy``) and the async side (reads, dashboard).

The schema is created and upgraded only by alembic. Importing alembic costs about a second, so
the fast path reads ``alembic_version`` directly and runs alembic only when it is behind. A
SQLite file is upgraded by whoever opens it; a shared PostgreSQL database only by ``mcptape db
upgrade`` (see :func:`auto_migrates`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import StoreError

# SQLAlchemy is imported inside the functions that need it: resolving the database location is
# on the start-up path of `mcptape record`, whose relay process never touches the database.
if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

ENV_DB = "MCPTAPE_DB"
#: Milliseconds a SQLite writer waits for another process's lock before giving up.
BUSY_TIMEOUT_MS = int(os.environ.get("MCPTAPE_BUSY_TIMEOUT_MS", "30000"))

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"


def default_db_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("mcptape", appauthor=False)) / "mcptape.db"


def resolve_url(db: str | None = None) -> str:
    """A sync SQLAlchemy URL from ``--db``, ``MCPTAPE_DB`` or the default location.

    A value with ``://`` is a URL; anything else is a file path for SQLite.
    """
    value = db or os.environ.get(ENV_DB) or str(default_db_path())
    if "://" in value:
        return value
    return "sqlite:///" + str(Path(value).expanduser().resolve())


def plain_sqlite_file(url: str) -> Path | None:
    """The file of a plain ``sqlite:///PATH`` URL, read without SQLAlchemy (the recorder
    process must not import it); None for anything else — other databases, memory, and URLs with
    something to decode or parse (``%``, options, a host part), which :func:`sqlite_path`
    leaves to SQLAlchemy."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        rest = url[len(prefix) :] if url.startswith(prefix) else ""
        if rest and rest != ":memory:" and not any(c in rest for c in "%?#@"):
            return Path(rest)
    return None


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for other databases and in-memory SQLite."""
    plain = plain_sqlite_file(url)
    if plain is not None:
        return plain
    import sqlalchemy as sa

    try:
        u = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    if str(u.query.get("uri", "")).lower() in ("true", "1") and u.database.startswith("file:"):
        # SQLite's URI form (``file:PATH?mode=ro``): the file is its path, not the text.
        from urllib.parse import unquote, urlparse

        path = unquote(urlparse(u.database).path)
        return Path(path) if path and path != ":memory:" else None
    return Path(u.database)


#: How a user installs the PostgreSQL driver when it is missing (it is a dependency of mcptape,
#: so this only happens in a hand-made environment: a vendored copy, ``--no-deps``, a platform
#: without psycopg's binary wheels).
PG_DRIVER_HINT = "pip install 'psycopg[binary]'  (or: uv pip install 'psycopg[binary]')"
#: Seconds a PostgreSQL connection attempt may take before the store reports it unreachable.
PG_CONNECT_TIMEOUT = int(os.environ.get("MCPTAPE_PG_CONNECT_TIMEOUT", "10"))
#: Identifies mcptape's connections in ``pg_stat_activity`` unless the URL names them itself.
PG_APPLICATION_NAME = "mcptape"
# psycopg 3 serves both sides: sync (recorder, migrations, copy) and async (store reads,
# dashboard). One driver means one reading of the URL — libpq's: sslmode, connect_timeout,
# service files, .pgpass and PG* variables behave the same for the recorder and the dashboard
# (asyncpg rejects sslmode and connect_timeout in the URL).
_PG_SYNC_DRIVERS = frozenset({"psycopg", "psycopg2", "psycopg2cffi", "pg8000"})
_PG_ASYNC_DRIVERS = frozenset({"psycopg", "psycopg_async", "asyncpg"})


def _pg_driver(url: Any, *, is_async: bool) -> Any:
    """``postgresql://`` (and Heroku's ``postgres://``) means psycopg; an explicit driver that
    fits the side (sync or async) is kept, one that does not is swapped for psycopg."""
    name = url.drivername
    base, _, driver = name.partition("+")
    if base not in ("postgresql", "postgres"):
        return url
    keep = _PG_ASYNC_DRIVERS if is_async else _PG_SYNC_DRIVERS
    if driver not in keep:
        driver = "psycopg"
    return url.set(drivername=f"postgresql+{driver}")


def is_postgresql(url: str) -> bool:
    """True for any PostgreSQL URL (whatever driver it names)."""
    return url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")


def _async_url(url: str) -> str:
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        return u.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if backend in ("postgresql", "postgres"):
        return _pg_driver(u, is_async=True).render_as_string(hide_password=False)
    return url


def _sync_url(url: str) -> str:
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        return u.set(drivername="sqlite").render_as_string(hide_password=False)
    if backend in ("postgresql", "postgres"):
        return _pg_driver(u, is_async=False).render_as_string(hide_password=False)
    return url


def display_url(url: str) -> str:
    """The URL with its password masked, for messages and ``mcptape db status``."""
    from urllib.parse import unquote

    import sqlalchemy as sa

    try:
        # Unquoted: ``?host=/run/postgresql`` reads better than ``%2Frun%2Fpostgresql``.
        return unquote(sa.engine.make_url(url).render_as_string(hide_password=True))
    except sa.exc.ArgumentError:
        return url


def _pg_connect_args(url: str) -> dict[str, Any]:
    """A bounded connect timeout and an application name, unless the URL sets them.

    Without a timeout libpq waits for the kernel (minutes) on an unreachable host, and a
    recorder would sit on its batch that long before counting the loss.
    """
    import sqlalchemy as sa

    query = sa.engine.make_url(url).query
    args: dict[str, Any] = {}
    if "connect_timeout" not in query:
        args["connect_timeout"] = PG_CONNECT_TIMEOUT
    if "application_name" not in query:
        args["application_name"] = PG_APPLICATION_NAME
    return args


def _create(url: str, factory: Any, **kwargs: Any) -> Any:
    """Build an engine, turning a missing driver or a malformed URL into one clear line."""
    import sqlalchemy as sa

    try:
        return factory(url, **kwargs)
    except ModuleNotFoundError as exc:
        if is_postgresql(url):
            raise StoreError(
                f"the PostgreSQL driver (psycopg) is not installed; install it with: {PG_DRIVER_HINT}"
            ) from exc
        raise StoreError(f"no driver for {display_url(url)}: {exc}") from exc
    except sa.exc.NoSuchModuleError as exc:
        raise StoreError(f"unsupported database URL {display_url(url)}: {exc}") from exc
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"not a database URL: {display_url(url)}") from exc


def sqlite_connect(path: Path | str, **kwargs: Any) -> Any:
    """A plain ``sqlite3`` connection to an existing file with the pragmas every connection of
    an engine gets (busy timeout, WAL, ``synchronous=NORMAL``, foreign keys): for the readers
    and writers that talk to the driver without SQLAlchemy (``store/direct.py``,
    ``store/recordings.py``). A driver error is one :class:`StoreError` line."""
    import sqlite3

    try:
        conn = sqlite3.connect(path, **kwargs)
        _sqlite_pragmas(conn, None)
    except sqlite3.Error as exc:
        raise StoreError(error_line(exc)) from exc
    return conn


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


#: A recording holds what hosts and servers said — prompts, tool results, whatever credentials
#: redaction did not know — so only its owner may read it: a SQLite file mcptape creates is
#: ``0600`` (SQLite gives its ``-wal`` and ``-shm`` files the main file's mode), a directory it
#: creates for one ``0700``. Files and folders that already exist keep the mode they have.
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def _private_dirs(folder: Path) -> None:
    """Create ``folder`` and every missing parent, each readable by its owner only."""
    missing: list[Path] = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another recorder made it meanwhile
            each.mkdir(mode=PRIVATE_DIR)


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode ``0600`` unless it exists (an existing file is left as
    it is). An empty file is an empty SQLite database."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


def _prepare_sqlite_file(url: str) -> None:
    """The one place a SQLite database file is created, for every engine (record, import,
    ``db copy``, the dashboard, …): its folder ``0700`` and the file ``0600`` when new."""
    path = sqlite_path(url)
    if path is None:
        return
    try:
        _private_dirs(path.parent)
    except OSError as exc:
        raise StoreError(f"cannot create the database folder {path.parent}: {exc}") from exc
    try:
        private_file(path)
    except OSError as exc:
        raise StoreError(f"cannot create the database {path}: {exc}") from exc


def sync_engine(url: str) -> Engine:
    """A sync engine (used by the recorder's writer thread and by migrations)."""
    import sqlalchemy as sa
    from sqlalchemy import event

    url = _sync_url(url)
    _prepare_sqlite_file(url)
    kwargs: dict[str, Any] = {}
    if is_postgresql(url):
        # pre_ping: after a server restart the pool's connections are dead; one cheap round
        # trip at checkout replaces them, so a recorder reconnects by itself.
        kwargs = {"pool_pre_ping": True, "connect_args": _pg_connect_args(url)}
    engine: Engine = _create(url, sa.create_engine, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def async_engine(url: str) -> AsyncEngine:
    """An async engine (aiosqlite for SQLite, psycopg for PostgreSQL) for reads and the dashboard."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    _prepare_sqlite_file(url)
    aurl = _async_url(url)
    kwargs: dict[str, Any] = {}
    if is_postgresql(aurl):
        kwargs = {"pool_pre_ping": True, "connect_args": _pg_connect_args(aurl)}
    engine: AsyncEngine = _create(aurl, create_async_engine, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def current_revision(engine: Engine) -> str | None:
    """The alembic revision the database is at; None for an empty database.

    SQLite: an unreadable or locked file also reads as None (the migration path takes the lock
    and looks again). PostgreSQL: connection errors propagate, so that an unreachable server is
    reported as such and never mistaken for an empty database.
    """
    import sqlalchemy as sa

    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            return _revision(conn)
    insp_sql = sa.text("SELECT version_num FROM alembic_version")
    try:
        with engine.connect() as conn:
            return conn.execute(insp_sql).scalar()
    except sa.exc.OperationalError:
        return None
    except sa.exc.ProgrammingError:
        return None


def _revision(conn: Any) -> str | None:
    """The revision seen through ``conn`` without failing its transaction when there is none."""
    import sqlalchemy as sa

    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    value = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return str(value) if value is not None else None


def known_revisions() -> list[str]:
    """The revisions this mcptape ships, oldest first (read from the file names: importing
    alembic to ask it costs about a second on every start)."""
    versions = MIGRATIONS_DIR / "versions"
    names = sorted(p.name.split("_", 1)[0] for p in versions.glob("[0-9]*_*.py"))
    return names


def is_newer(rev: str | None, head: str) -> bool:
    """A revision this mcptape does not know, or later than its head: written by a newer one."""
    if rev is None or rev == head:
        return False
    return rev > head or rev not in known_revisions()


@dataclass(frozen=True)
class SchemaState:
    """Where a database's schema stands against this mcptape (``mcptape db status``)."""

    url: str
    dialect: str
    current: str | None
    head: str

    @property
    def state(self) -> str:
        """``empty`` | ``current`` | ``behind`` | ``newer``."""
        if self.current is None:
            return "empty"
        if self.current == self.head:
            return "current"
        return "newer" if is_newer(self.current, self.head) else "behind"


def schema_state(url: str) -> SchemaState:
    """Read the schema revision of ``url`` (raises StoreError with one line when unreachable)."""
    import sqlalchemy as sa

    from mcp_proxy.store.schema import SCHEMA_HEAD

    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            rev = _revision(conn)
        return SchemaState(display_url(url), engine.dialect.name, rev, SCHEMA_HEAD)
    except sa.exc.DBAPIError as exc:
        raise StoreError(error_line(exc)) from exc
    finally:
        engine.dispose()


def auto_migrates(url: str) -> bool:
    """Whether opening the store upgrades an older schema by itself.

    SQLite: yes — a file belongs to one person, whose mcptape is the only one writing it.
    PostgreSQL: no — the database is shared, and a recorder on one laptop with a newer mcptape
    must not change the schema under everybody else's; ``mcptape db upgrade`` does it, once.
    An *empty* PostgreSQL database is still created by whoever opens it first, so that a first
    try with ``--db postgresql://…`` just works.
    """
    return not is_postgresql(url)


@contextlib.contextmanager
def _migration_lock(url: str) -> Iterator[None]:
    """Serialise migrations between processes that start at the same moment (SQLite only).

    SQLite DDL under pysqlite is not transactional by default, so two processes upgrading at
    once could both try to create the tables. A lock file beside the database orders them.
    """
    path = sqlite_path(url)
    if path is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # Windows: rely on the retry in ensure_schema
        yield
        return
    lock_path = path.with_name(path.name + ".migrate.lock")
    private_file(lock_path)
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", _sync_url(url).replace("%", "%%"))
    return cfg


#: Key of the PostgreSQL advisory lock that orders concurrent migrations ("mcpt").
PG_MIGRATION_LOCK = 0x6D637074


def upgrade(url: str, engine: Engine | None = None) -> str | None:
    """Run alembic's upgrade to head (slow path; takes the migration lock).

    Returns the revision the database was at before (None: it was empty). On PostgreSQL the
    whole upgrade is one transaction (its DDL is transactional) behind an advisory lock, so
    fifty recorders opening an empty database at once create the schema once, and a failed
    migration leaves the database as it was.
    """
    from alembic import command

    from mcp_proxy.store.schema import SCHEMA_HEAD

    own = engine is None
    engine = engine or sync_engine(url)
    try:
        with _migration_lock(url):
            if engine.dialect.name != "postgresql" and current_revision(engine) == SCHEMA_HEAD:
                return SCHEMA_HEAD
            cfg = alembic_config(url)
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    import sqlalchemy as sa

                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(PG_MIGRATION_LOCK)))
                before = _revision(conn)
                if before == SCHEMA_HEAD:
                    return before
                if is_newer(before, SCHEMA_HEAD):
                    raise StoreError(_newer_message(before, SCHEMA_HEAD))
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                return before
    finally:
        if own:
            engine.dispose()


def _newer_message(rev: str | None, head: str) -> str:
    return (
        f"the database is at schema {rev}, newer than this mcptape knows ({head});"
        " upgrade mcptape to use it"
    )


def create_sqlite_at_head(path: Path) -> bool:
    """Make a new SQLite file at the schema head with plain ``sqlite3`` (True), from the
    snapshot of what the migrations leave an empty file with (``store/sqlite_head.py``): no
    SQLAlchemy or alembic, which cost a first ``mcptape record`` into a new file more CPU than
    the recording. True as well when the file is already at the head.

    False — the caller migrates — when the file holds anything else (an older schema, other
    tables) or the snapshot is not of the schema's head. Under the migration lock, in one
    transaction: two recorders making one file at once make it once. The file and a folder
    made for it are private (``0600``/``0700``), as every database file mcptape makes.
    """
    import sqlite3

    from mcp_proxy.store import sqlite_head
    from mcp_proxy.store.rows import SCHEMA_HEAD

    if sqlite_head.HEAD != SCHEMA_HEAD:
        return False
    if path.exists():  # read-only first: a file in use or not ours to write is only looked at
        state = _sqlite_state(path, SCHEMA_HEAD)
        if state != "empty":
            return state == "head"
    url = "sqlite:///" + str(path)
    _prepare_sqlite_file(url)
    with _migration_lock(url):
        try:
            conn = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(error_line(exc)) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                made = _from_snapshot(conn, sqlite_head.STATEMENTS, SCHEMA_HEAD)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return made
        except sqlite3.Error as exc:
            raise StoreError(error_line(exc)) from exc
        finally:
            conn.close()


def _sqlite_state(path: Path, head: str) -> str:
    """``head``, ``empty`` (no table: a new file) or ``other``, read through a read-only
    connection (an unreadable or locked file is ``other``: the migrations' path decides)."""
    import sqlite3

    try:
        from urllib.parse import quote

        uri = f"file:{quote(str(path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error:
        return "other"
    try:
        if not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            return "empty"
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return "head" if row is not None and row[0] == head else "other"
    except sqlite3.Error:
        return "other"
    finally:
        conn.close()


def _from_snapshot(conn: Any, statements: tuple[str, ...], head: str) -> bool:
    """Run the snapshot on an empty file (True); a file at ``head`` is left (True), any other
    content too (False)."""
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except Exception:  # no such table: not ours to change here
            return False
        return row is not None and row[0] == head
    for statement in statements:
        conn.execute(statement)
    conn.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))
    return True


def ensure_schema(url: str, engine: Engine | None = None) -> None:
    """Make sure the database exists and is at :data:`SCHEMA_HEAD`.

    An empty database is created; an older one is upgraded where :func:`auto_migrates` says so
    (SQLite) and refused with the command to run otherwise (PostgreSQL); a newer one is always
    refused. Raises :class:`StoreError` with one clear line when the database cannot be reached.
    """
    path = plain_sqlite_file(url)
    if path is not None and create_sqlite_at_head(path):
        return  # a new file made from the snapshot, or one at the head already
    import sqlalchemy as sa

    from mcp_proxy.store.schema import SCHEMA_HEAD

    own = engine is None
    engine = engine or sync_engine(url)
    try:
        for attempt in range(5):
            try:
                rev = current_revision(engine)
                if rev == SCHEMA_HEAD:
                    return
                if is_newer(rev, SCHEMA_HEAD):
                    raise StoreError(_newer_message(rev, SCHEMA_HEAD))
                if rev is not None and not auto_migrates(url):
                    raise StoreError(
                        f"the database is at schema {rev} and this mcptape needs {SCHEMA_HEAD};"
                        f" upgrade it once with: mcptape db upgrade --db '{display_url(url)}'"
                    )
                try:
                    upgrade(url, engine)
                except (sa.exc.SQLAlchemyError, StoreError):
                    raise
                except Exception as exc:  # alembic's CommandError and friends: one line
                    raise StoreError(f"cannot migrate the database: {error_line(exc)}") from exc
                return
            except sa.exc.OperationalError as exc:
                if attempt == 4 or is_postgresql(url):
                    # PostgreSQL: no file lock to wait for; the driver already waited up to its
                    # connect timeout, so say what is wrong at once.
                    raise StoreError(error_line(exc)) from exc
                time.sleep(0.2 * (attempt + 1))
    except sa.exc.DBAPIError as exc:
        raise StoreError(error_line(exc)) from exc
    finally:
        if own:
            engine.dispose()


def error_line(exc: BaseException) -> str:
    """A driver's error (or SQLAlchemy's around one) as one line: what a ``StoreError`` says."""
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


class Driver:
    """DBAPI connections to one database, for the modules that write their SQL themselves
    (``intercepts``, ``writes``, ``copy``, ``travel``, ``status``): plain :mod:`sqlite3` on a
    SQLite file — SQLAlchemy is not imported — and psycopg from a sync engine's pool on
    PostgreSQL (SQLAlchemy as the connection source only: the URL's reading, the connect
    arguments, ``pool_pre_ping``). SQL is written once with ``?`` markers; :meth:`sql` gives the
    dialect's (``%s`` for psycopg).

    Safe to share between threads: a SQLite file has one connection, used by one thread at a
    time (a lock); PostgreSQL checks one out of the pool per :meth:`connection`. Transactions
    are the driver's own (sqlite3's implicit ``BEGIN`` before a write, as SQLAlchemy's pysqlite
    dialect has it; psycopg's before the first statement): :meth:`connection`'s caller commits.
    """

    def __init__(self, url: str) -> None:
        import threading

        self.pg = is_postgresql(url)
        self.mark = "%s" if self.pg else "?"
        self._engine: Engine | None = None
        self._file: Any = None
        self._lock = threading.Lock()
        # A plain file URL only: one with options (`?mode=ro&uri=true`, `?timeout=`) is opened
        # by SQLAlchemy, which reads them (the pool below, as for PostgreSQL).
        self.path = None if self.pg else plain_sqlite_file(url)
        if self.path is not None:
            import sqlite3

            self.error: type[Exception] = sqlite3.Error
            #: A lock, a full disk, I/O, a lost server: what may pass (the writer retries).
            self.transient: type[Exception] = sqlite3.OperationalError
            return
        self._engine = sync_engine(url)  # one StoreError line when the URL is wrong
        self.error = self._engine.dialect.loaded_dbapi.Error
        self.transient = self._engine.dialect.loaded_dbapi.OperationalError

    def sql(self, text: str) -> str:
        """``text`` with its ``?`` markers as this driver wants them."""
        return text.replace("?", "%s") if self.pg else text

    def json_in(self, value: Any) -> Any:
        """A JSON column's value as SQLAlchemy's ``sa.JSON`` wrote it: ``json.dumps`` text on
        SQLite, psycopg's ``Json`` (the same text, typed ``json``) on PostgreSQL; ``None`` is
        JSON ``null``, never SQL NULL."""
        if self.pg:
            from psycopg.types.json import Json

            return Json(value)
        import json

        return json.dumps(value)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """A DBAPI connection for the block (the caller commits; an error rolls back). A
        driver error escapes as it is: callers tell transient ones apart (``writes``) or make
        them one :class:`StoreError` line (:meth:`transaction`)."""
        if self._engine is None:
            with self._lock:
                if self._file is None:
                    assert self.path is not None
                    self._file = sqlite_connect(self.path, check_same_thread=False)
                file = self._file
                try:
                    yield file
                except BaseException:
                    with contextlib.suppress(Exception):
                        file.rollback()
                    raise
            return
        proxy = self._checkout(self._engine)
        try:
            conn: Any = proxy.driver_connection
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.rollback()
                raise
        finally:
            proxy.close()

    @staticmethod
    def _checkout(engine: Engine) -> Any:
        """A pooled connection; the driver's own error when there is none (the pool wraps it
        in SQLAlchemy's, which only it would then have to know)."""
        import sqlalchemy as sa

        try:
            return engine.raw_connection()
        except sa.exc.DBAPIError as exc:
            if isinstance(exc.orig, Exception):
                raise exc.orig from exc
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """:meth:`connection` committed at the end; a driver error is one StoreError line."""
        try:
            with self.connection() as conn:
                yield conn
                conn.commit()
        except self.error as exc:
            raise StoreError(error_line(exc)) from exc

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                with contextlib.suppress(Exception):
                    self._file.close()
                self._file = None
        if self._engine is not None:
            self._engine.dispose()
