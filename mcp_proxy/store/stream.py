"""One session's frames as a stream of plain tuples, for the commands that print them all.

``mcptape show`` on a 1,000,000-frame session must print 200,000 frames a second to a pipe
with bounded memory. Row dictionaries from the async API cost more than printing the frame, so
this reader is synchronous, fetches in batches and yields tuples in the fixed order of
:data:`~mcp_proxy.store.columns.FRAME_COLUMNS`: for SQLite straight from the standard library's driver, elsewhere
through SQLAlchemy with a server-side cursor.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from mcp_proxy.errors import StoreError
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.columns import FRAME_COLUMNS, stream_sql
from mcp_proxy.store.schema import frames

#: Kept for callers of the old name: the tuples carry :data:`FRAME_COLUMNS`, the store's one list.
SHOW_COLUMNS = FRAME_COLUMNS
BATCH = 5000


def stream_frames(url: str, session_id: str, *, batch: int = BATCH) -> Iterator[tuple[Any, ...]]:
    """The session's frames in order, as tuples of :data:`FRAME_COLUMNS` (memory: one batch)."""
    for rows in frame_batches(url, session_id, batch=batch):
        yield from rows


def frame_batches(
    url: str,
    session_id: str,
    *,
    batch: int = BATCH,
    columns: tuple[str, ...] = FRAME_COLUMNS,
) -> Iterator[list[tuple[Any, ...]]]:
    """The session's frames in order, ``batch`` tuples of ``columns`` at a time.

    What the analysis reads (``mcp_proxy.analysis.service``): plain tuples from the driver,
    one list per fetch, instead of the async API's row objects and a thread hop per query.
    ``columns`` (names from :data:`FRAME_COLUMNS`, default all of them) lets a reader that
    needs a few (``stats``) leave the rest in the database.
    """
    unknown = set(columns) - set(FRAME_COLUMNS)
    if unknown:
        raise ValueError(f"not frame columns: {sorted(unknown)}")
    path = engine_mod.sqlite_path(url)
    if path is not None:
        yield from _sqlite_rows(str(path), session_id, batch, columns)
        return
    engine = engine_mod.sync_engine(url)
    stmt = (
        sa.select(*(frames.c[name] for name in columns))
        .where(frames.c.session_id == session_id)
        .order_by(frames.c.seq)
    )
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=batch).execute(stmt)
            for part in result.partitions():
                yield [tuple(row) for row in part]
    except sa.exc.DBAPIError as exc:
        raise StoreError(engine_mod._short(exc)) from exc
    finally:
        engine.dispose()


def _sqlite_rows(
    path: str, session_id: str, batch: int, columns: tuple[str, ...] = FRAME_COLUMNS
) -> Iterator[list[tuple[Any, ...]]]:
    try:
        conn = sqlite3.connect(path, timeout=engine_mod.BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise StoreError(str(exc)) from exc
    try:
        conn.execute("PRAGMA query_only = 1")
        # frame_rows on its (session_key, seq) key, decoded in SQL: the view ``frames`` gives
        # the same tuples but joins the method names whether or not they are asked for.
        cur = conn.execute(stream_sql(columns), (session_id,))
        while rows := cur.fetchmany(batch):
            yield rows
    except sqlite3.Error as exc:
        raise StoreError(str(exc)) from exc
    finally:
        conn.close()
