"""Session keys and method codes for frame writers: what ``frame_rows`` stores instead of text.

Every frame writer (the recorder's SQLite and SQLAlchemy backends, PostgreSQL's COPY, ``db
copy``, ``import``) keeps two caches — session id → ``session_keys.key`` and method name →
``methods.code`` — and calls :func:`resolve` for what a batch adds to them: one query for the
missing keys, one insert-if-absent and one query for the missing methods. A session key is
given by a trigger when the session row is inserted; a method gets its code the first time a
frame carries it. Works on the DBAPI connection (``sqlite3`` or ``psycopg``) inside the caller's
transaction; a caller whose transaction fails must forget both caches (the rows it learnt them
from may be gone). No SQLAlchemy here: the recorder process imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_proxy.store.columns import encode_frames, missing

#: Names per lookup statement (SQLite's variable limit is 999 on old builds).
_CHUNK = 500


def resolve(dbapi: Any, keys: dict[str, int], methods: dict[str, int], rows: list[Any]) -> None:
    """Add the session keys and method codes ``rows`` (``FrameRow`` tuples) need to the caches.

    A session without a key (no such session) stays missing: encoding its rows raises
    ``KeyError`` and the writer refuses them, as the foreign key of revision 0003 did.
    """
    sids, names = missing(keys, methods, rows)
    pg = not _is_sqlite(dbapi)
    if sids:
        keys.update(_select(dbapi, pg, "SELECT id, key FROM session_keys", "id", sids))
    if names:
        if pg:
            with dbapi.cursor() as cur:
                cur.execute(
                    "INSERT INTO methods (name) SELECT unnest(%s::text[])"
                    " ON CONFLICT (name) DO NOTHING",
                    (sorted(names),),
                )
        else:
            dbapi.executemany(
                "INSERT OR IGNORE INTO methods (name) VALUES (?)", [(n,) for n in sorted(names)]
            )
        methods.update(_select(dbapi, pg, "SELECT name, code FROM methods", "name", names))


def encode_known(
    dbapi: Any,
    keys: dict[str, int],
    methods: dict[str, int],
    rows: list[Any],
    exchanges: Callable[[int], int | None],
) -> list[tuple[Any, ...]]:
    """:func:`~mcp_proxy.store.columns.encode_frames` of ``rows`` (their exchange ids mapped by
    ``exchanges``), resolving what the caches miss first. The common case (every key and method
    known) costs one pass over the rows."""
    try:
        return encode_frames(keys, methods, rows, exchanges)
    except KeyError:
        resolve(dbapi, keys, methods, rows)
        return encode_frames(keys, methods, rows, exchanges)


def _is_sqlite(dbapi: Any) -> bool:
    import sqlite3

    return isinstance(dbapi, sqlite3.Connection)


def _select(dbapi: Any, pg: bool, sql: str, column: str, values: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    if pg:
        with dbapi.cursor() as cur:
            cur.execute(f"{sql} WHERE {column} = ANY(%s)", (list(values),))
            out.update((name, int(code)) for name, code in cur.fetchall())
        return out
    wanted = sorted(values)
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i : i + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        out.update(
            (name, int(code))
            for name, code in dbapi.execute(f"{sql} WHERE {column} IN ({marks})", chunk)
        )
    return out
