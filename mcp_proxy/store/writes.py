"""The write side of the store: what the recorder's writer thread executes.

Sync SQLAlchemy Core over one connection per batch; each batch is one transaction. Kept apart
from the read API (:mod:`mcp_proxy.store.queries`) because only the recorder writes traffic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.schema import findings, frames, http_exchanges, sessions

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from mcp_proxy.recorder import writes_ops


def open_for_writing(url: str) -> Engine:
    """A migrated, ready engine; raises StoreError with one line when that is impossible."""
    eng = engine_mod.sync_engine(url)
    engine_mod.ensure_schema(url, eng)
    return eng


def apply_batch(engine: Engine, ops: writes_ops, exchange_ids: dict[int, int]) -> None:
    """Write one batch in one transaction (sessions → exchanges → frames → updates)."""
    with engine.begin() as conn:
        if ops.sessions:
            conn.execute(sessions.insert(), ops.sessions)
        new_ids: dict[int, int] = {}
        for local, row in ops.exchanges:
            res = conn.execute(http_exchanges.insert().values(**row))
            new_ids[local] = int(res.inserted_primary_key[0])
        for local, fields in ops.exchange_updates:
            db_id = new_ids.get(local) or exchange_ids.get(local)
            if db_id is not None:
                conn.execute(
                    http_exchanges.update().where(http_exchanges.c.id == db_id).values(**fields)
                )
        if ops.frames:
            rows = ops.frames
            if any(r["http_exchange_id"] is not None for r in rows):
                rows = [dict(r) for r in rows]
                for r in rows:
                    local = r["http_exchange_id"]
                    if local is not None:
                        r["http_exchange_id"] = new_ids.get(local) or exchange_ids.get(local)
            conn.execute(frames.insert(), rows)
        for sid, (count, last) in ops.session_counts.items():
            conn.execute(
                sessions.update()
                .where(sessions.c.id == sid)
                .values(frame_count=count, updated_at=last)
            )
        for sid, fields in ops.session_updates.items():
            conn.execute(sessions.update().where(sessions.c.id == sid).values(**fields))
        if ops.findings:
            conn.execute(findings.insert(), ops.findings)
    # Only after the commit: a rolled-back batch must not leave ids pointing at nothing.
    exchange_ids.update(new_ids)


def record_gap(engine: Engine, session_id: str, finding: dict[str, Any], lost: int) -> None:
    with engine.begin() as conn:
        conn.execute(findings.insert(), [finding])
        conn.execute(
            sessions.update()
            .where(sessions.c.id == session_id)
            .values(gap_count=sessions.c.gap_count + sa.literal(lost))
        )
