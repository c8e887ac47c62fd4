"""Is a database there, reachable, and at the schema this mcptape writes? (``mcptape doctor``)

Read-only questions about a store that must not create it: asked before anything is recorded,
so a typo in ``--db`` is reported rather than silently becoming a new empty database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

from mcp_proxy.store.engine import current_revision, error_line, sqlite_path, sync_engine
from mcp_proxy.store.schema import SCHEMA_HEAD


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
        engine = sync_engine(url)
    except sa.exc.ArgumentError:
        return DbStatus("unreachable", None, f"not a database URL: {url}")
    except ModuleNotFoundError as exc:
        return DbStatus("unreachable", None, f"no driver for {url}: {exc}")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        rev = current_revision(engine)
    except sa.exc.DBAPIError as exc:
        return DbStatus("unreachable", None, error_line(exc))
    finally:
        engine.dispose()
    if rev == SCHEMA_HEAD:
        return DbStatus("current", rev, f"schema {rev} (current)")
    if rev is None:
        return DbStatus("behind", None, f"no mcptape schema yet (needs {SCHEMA_HEAD})")
    if rev > SCHEMA_HEAD:
        return DbStatus("ahead", rev, f"schema {rev} is newer than this mcptape ({SCHEMA_HEAD})")
    return DbStatus("behind", rev, f"schema {rev}, needs migrating to {SCHEMA_HEAD}")
