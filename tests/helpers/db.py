"""Read a recording straight from the SQLite file (sync), independent of the store API."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def rows(db: Path, sql: str, *args: Any) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def sessions(db: Path) -> list[dict[str, Any]]:
    return rows(db, "SELECT * FROM sessions ORDER BY started_at")


def frames(db: Path, session_id: str | None = None) -> list[dict[str, Any]]:
    if session_id is None:
        return rows(db, "SELECT * FROM frames ORDER BY session_id, seq")
    return rows(db, "SELECT * FROM frames WHERE session_id = ? ORDER BY seq", session_id)


def stream(db: Path, session_id: str, direction: str, channel: str = "stdio") -> bytes:
    """The concatenated bytes of one direction/channel: must equal what crossed the wire."""
    return b"".join(
        f["raw"]
        for f in frames(db, session_id)
        if f["direction"] == direction and f["channel"] == channel
    )
