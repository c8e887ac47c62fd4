"""The store's statements for replay and mock: which sessions exist, and linking a replay.

Replay records its traffic through a real relay (in-process for stdio, a ``mcptape record``
child for HTTP), then has to find the session that relay wrote and mark it as the replay of the
original (``meta["replay_of"]``). Those are the only statements replay needs; they live here so
that the store owns all SQL.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from mcp_proxy.store import writes
from mcp_proxy.store.schema import sessions


def session_names(db_url: str) -> list[tuple[str, str | None]]:
    """(id, name) of every session in the database, oldest first."""
    engine = writes.open_for_writing(db_url)
    try:
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(sessions.c.id, sessions.c.name).order_by(
                    sessions.c.started_at, sessions.c.id
                )
            ).all()
    finally:
        engine.dispose()
    return [(str(r[0]), r[1]) for r in rows]


def merge_session_meta(db_url: str, session_id: str, extra: dict[str, Any]) -> None:
    """Merge ``extra`` into a session's ``meta`` (after the recorder wrote its own)."""
    engine = writes.open_for_writing(db_url)
    try:
        with engine.begin() as conn:
            meta = conn.execute(
                sa.select(sessions.c.meta).where(sessions.c.id == session_id)
            ).scalar()
            merged = {**(meta or {}), **extra}
            conn.execute(sessions.update().where(sessions.c.id == session_id).values(meta=merged))
    finally:
        engine.dispose()


__all__ = ["merge_session_meta", "session_names"]
