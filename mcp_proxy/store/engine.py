"""Where the database is, how to connect to it, and how its schema is kept current.

The default database lives in the user's data directory (XDG on Linux, the platform equivalents
elsewhere); ``--db`` or ``MCPTAPE_DB`` override it with a path or a SQLAlchemy URL. SQLite runs
in WAL mode with a busy timeout so that many ``mcptape record`` processes (one per server, as
Claude Desktop runs them) can write to one file at once.

The schema is created and upgraded only by alembic. Importing alembic costs about a second, so
the fast path reads ``alembic_version`` directly and runs alembic only when it is behind.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
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


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for other databases and in-memory SQLite."""
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def _async_url(url: str) -> str:
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        return str(u.set(drivername="sqlite+aiosqlite"))
    if backend == "postgresql":
        return str(u.set(drivername="postgresql+asyncpg"))
    return url


def _sync_url(url: str) -> str:
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() == "sqlite":
        return str(u.set(drivername="sqlite"))
    return url


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _prepare_sqlite_file(url: str) -> None:
    path = sqlite_path(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the database folder {path.parent}: {exc}") from exc


def sync_engine(url: str) -> Engine:
    """A sync engine (used by the recorder's writer thread and by migrations)."""
    import sqlalchemy as sa
    from sqlalchemy import event

    url = _sync_url(url)
    _prepare_sqlite_file(url)
    engine = sa.create_engine(url, future=True)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def async_engine(url: str) -> AsyncEngine:
    """An async engine (aiosqlite for SQLite) for the store's read API and the dashboard."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    _prepare_sqlite_file(url)
    engine = create_async_engine(_async_url(url))
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def current_revision(engine: Engine) -> str | None:
    import sqlalchemy as sa

    insp_sql = sa.text("SELECT version_num FROM alembic_version")
    try:
        with engine.connect() as conn:
            return conn.execute(insp_sql).scalar()
    except sa.exc.OperationalError:
        return None
    except sa.exc.ProgrammingError:  # PostgreSQL: relation does not exist
        return None


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


def upgrade(url: str, engine: Engine | None = None) -> None:
    """Run alembic's upgrade to head (slow path; takes the migration lock)."""
    from alembic import command

    from mcp_proxy.store.schema import SCHEMA_HEAD

    own = engine is None
    engine = engine or sync_engine(url)
    try:
        with _migration_lock(url):
            if current_revision(engine) == SCHEMA_HEAD:
                return
            cfg = alembic_config(url)
            with engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
    finally:
        if own:
            engine.dispose()


def ensure_schema(url: str, engine: Engine | None = None) -> None:
    """Make sure the database exists and is migrated to :data:`SCHEMA_HEAD`.

    Raises :class:`StoreError` with one clear line when the database cannot be reached.
    """
    import sqlalchemy as sa

    from mcp_proxy.store.schema import SCHEMA_HEAD

    own = engine is None
    try:
        engine = engine or sync_engine(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"not a database URL: {url}") from exc
    except ModuleNotFoundError as exc:
        raise StoreError(f"no driver for {url}: {exc}") from exc
    try:
        for attempt in range(5):
            try:
                rev = current_revision(engine)
                if rev == SCHEMA_HEAD:
                    return
                if rev is not None and rev > SCHEMA_HEAD:
                    raise StoreError(
                        f"the database is at schema {rev}, newer than this mcptape ({SCHEMA_HEAD});"
                        " upgrade mcptape"
                    )
                try:
                    upgrade(url, engine)
                except sa.exc.SQLAlchemyError:
                    raise
                except Exception as exc:  # alembic's CommandError and friends: one line
                    raise StoreError(f"cannot migrate the database: {_short(exc)}") from exc
                return
            except sa.exc.OperationalError as exc:
                if attempt == 4:
                    raise StoreError(_short(exc)) from exc
                time.sleep(0.2 * (attempt + 1))
    except sa.exc.DBAPIError as exc:
        raise StoreError(_short(exc)) from exc
    finally:
        if own:
            engine.dispose()


def _short(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig or exc).splitlines()[0]
