"""The store's statements for replay and mock: which sessions exist, and linking a replay.

Replay records its traffic through a real relay (in-process for stdio, a ``mcptape record``
child for HTTP), then has to find the session that relay wrote and mark it as the replay of the
original (``meta["replay_of"]``). Those are the only statements replay needs; they live here so
that the store owns all SQL.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.store.engine import Driver, ensure_schema


def _driver(db_url: str) -> Driver:
    ensure_schema(db_url)
    return Driver(db_url)


def session_names(db_url: str) -> list[tuple[str, str | None]]:
    """(id, name) of every session in the database, oldest first."""
    db = _driver(db_url)
    try:
        with db.transaction() as conn:
            rows = conn.execute("SELECT id, name FROM sessions ORDER BY started_at, id").fetchall()
    finally:
        db.close()
    return [(str(r[0]), r[1]) for r in rows]


def merge_session_meta(db_url: str, session_id: str, extra: dict[str, Any]) -> None:
    """Merge ``extra`` into a session's ``meta`` (after the recorder wrote its own)."""
    db = _driver(db_url)
    try:
        with db.transaction() as conn:
            sql = "SELECT meta FROM sessions WHERE id = ?" + (" FOR UPDATE" if db.pg else "")
            found = conn.execute(db.sql(sql), (session_id,)).fetchone()
            meta = None if found is None else found[0]
            if isinstance(meta, str):  # SQLite holds JSON as text
                meta = json.loads(meta)
            merged = {**(meta or {}), **extra}
            sql = "UPDATE sessions SET meta = ? WHERE id = ?"
            conn.execute(db.sql(sql), (db.json_in(merged), session_id))
    finally:
        db.close()


__all__ = ["merge_session_meta", "session_names"]
