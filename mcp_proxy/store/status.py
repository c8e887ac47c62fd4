"""Is a database there, reachable, and at the schema this mcptape writes? (``mcptape doctor``)

Read-only questions about a store that must not create it: asked before anything is recorded,
so a typo in ``--db`` is reported rather than silently becoming a new empty database. Asked
through the driver (``engine.Driver``): one connection, ``SELECT 1``, the revision.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa

from mcp_proxy.errors import StoreError
from mcp_proxy.store.engine import Driver, error_line, sqlite_path
from mcp_proxy.store.rows import SCHEMA_HEAD

#: Whether ``alembic_version`` is there (a database without it is empty, not broken).
_HAS_VERSION_PG = "SELECT to_regclass('alembic_version') IS NOT NULL"
_HAS_VERSION_SQLITE = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
)


def url_has_password(url: str) -> bool:
    """Whether a database URL carries a password (which would then be visible in host configs
    and the process list)."""
    try:
        return bool(sa.engine.make_url(url).password)
    except sa.exc.ArgumentError:
        return False


@dataclass
class DbStatus:
    state: Literal["missing", "current", "behind", "ahead", "unreachable"]
    revision: str | None
    message: str


def database_status(url: str) -> DbStatus:
    """Is the database there, reachable and at the schema this mcptape writes? Creates nothing
    (a SQLite file that does not exist yet is fine: the first recording creates it)."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if os.access(parent, os.W_OK):
            return DbStatus("missing", None, "not created yet (the first recording creates it)")
        return DbStatus("unreachable", None, f"cannot create {path}: {parent} is not writable")
    try:
        db = Driver(url)
    except sa.exc.ArgumentError:
        return DbStatus("unreachable", None, f"not a database URL: {url}")
    except ModuleNotFoundError as exc:
        return DbStatus("unreachable", None, f"no driver for {url}: {exc}")
    except StoreError as exc:
        return DbStatus("unreachable", None, str(exc))
    try:
        with db.connection() as conn:
            conn.execute("SELECT 1")
            rev = _revision(db, conn)
    except (db.error, StoreError) as exc:
        return DbStatus("unreachable", None, error_line(exc))
    finally:
        db.close()
    if rev == SCHEMA_HEAD:
        return DbStatus("current", rev, f"schema {rev} (current)")
    if rev is None:
        return DbStatus("behind", None, f"no mcptape schema yet (needs {SCHEMA_HEAD})")
    if rev > SCHEMA_HEAD:
        return DbStatus("ahead", rev, f"schema {rev} is newer than this mcptape ({SCHEMA_HEAD})")
    return DbStatus("behind", rev, f"schema {rev}, needs migrating to {SCHEMA_HEAD}")


def _revision(db: Driver, conn: Any) -> str | None:
    """The alembic revision the database is at (None: no mcptape schema yet)."""
    if not conn.execute(_HAS_VERSION_PG if db.pg else _HAS_VERSION_SQLITE).fetchone()[0]:
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return None if row is None else str(row[0])
