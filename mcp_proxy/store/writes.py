"""The recorder's writes through the driver on PostgreSQL (psycopg), and on SQLite URLs that
are not a plain file path (``sqlite:///…?…``): :class:`DriverBackend`.

The rules of a batch (one transaction, row by row when one row is refused, transient errors
raised) live in :class:`mcp_proxy.store.writer.BatchWriter`; this module is a backend of it, on
the DBAPI connection :class:`~mcp_proxy.store.engine.Driver` gives (SQLAlchemy only as
PostgreSQL's pool). Its SQL is written once with ``?`` markers (``%s`` for psycopg); JSON
columns go in as SQLAlchemy's ``sa.JSON`` wrote them (``json.dumps`` text on SQLite, ``json``
on PostgreSQL; ``None`` as JSON ``null``). Frames go to PostgreSQL by binary ``COPY``
(``store/pg.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from mcp_proxy.store.codes import encode_known
from mcp_proxy.store.columns import STORED_FRAME_COLS
from mcp_proxy.store.engine import Driver, ensure_schema
from mcp_proxy.store.rows import EXCHANGE_COLUMNS, FRAME_COLS, JSON_COLUMNS, FrameRow, storable
from mcp_proxy.store.writer import (
    BIG_BLOB,
    FRAME_INSERT,
    BatchWriter,
    TransientWriteError,
    insert_big,
)

__all__ = [
    "FRAME_COLS",
    "BatchWriter",
    "DriverBackend",
    "TransientWriteError",
    "storable",
]

_RAW = STORED_FRAME_COLS.index("raw")


class DriverBackend:
    """The batch statements on one database's DBAPI connections, either dialect."""

    def __init__(self, db: Driver) -> None:
        self.db = db
        #: The driver's error for a lock, a full disk, a lost connection: the batch may retry.
        self._transient = db.transient
        #: session id → ``session_keys.key``, learnt from committed transactions only.
        self._keys: dict[str, int] = {}
        #: method name → ``methods.code``, likewise.
        self._methods: dict[str, int] = {}

    @classmethod
    def open(cls, url: str) -> DriverBackend:
        """A backend on ``url``, its schema made current first (one StoreError line if not)."""
        ensure_schema(url)
        return cls(Driver(url))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        try:
            with self.db.connection() as conn:
                yield conn
                conn.commit()
        except BaseException:
            self._keys.clear()  # keys/codes seen in a rolled-back transaction may not exist
            self._methods.clear()
            raise

    def is_transient(self, exc: BaseException) -> bool:
        """Lock, full disk, I/O, lost connection: the batch may go in later as it is."""
        return isinstance(exc, self._transient)

    def close(self) -> None:
        self.db.close()

    def _values(self, table: str, row: dict[str, Any]) -> tuple[tuple[str, ...], list[Any]]:
        js, json_in = JSON_COLUMNS[table], self.db.json_in
        keys = tuple(row)
        return keys, [json_in(row[k]) if k in js else row[k] for k in keys]

    def _insert(self, conn: Any, table: str, row: dict[str, Any], tail: str = "") -> Any:
        keys, values = self._values(table, row)
        sql = f"INSERT INTO {table} ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})"
        return conn.execute(self.db.sql(sql + tail), values)

    def _update(self, conn: Any, table: str, key: tuple[str, Any], fields: dict[str, Any]) -> None:
        keys, values = self._values(table, fields)
        sets = ", ".join(f"{k} = ?" for k in keys)
        sql = f"UPDATE {table} SET {sets} WHERE {key[0]} = ?"
        conn.execute(self.db.sql(sql), [*values, key[1]])

    def insert_sessions(self, conn: Any, rows: list[dict[str, Any]]) -> None:
        for row in rows:  # one statement per key set: rows may carry different columns
            self._insert(conn, "sessions", row)

    def insert_exchanges(self, conn: Any, rows: list[dict[str, Any]]) -> list[int]:
        """Every column (a missing one is NULL; a JSON one JSON ``null``, as ``sa.JSON``
        wrote it); the new ids in the order of ``rows``."""
        ids, tail = [], " RETURNING id"
        for row in rows:
            full = dict.fromkeys(EXCHANGE_COLUMNS) | row
            if self.db.pg:  # (SQLite before 3.35 has no RETURNING: its cursor has the row id)
                ids.append(int(self._insert(conn, "http_exchanges", full, tail).fetchone()[0]))
            else:
                ids.append(int(self._insert(conn, "http_exchanges", full).lastrowid))
        return ids

    def update_exchange(self, conn: Any, db_id: int, fields: dict[str, Any]) -> None:
        self._update(conn, "http_exchanges", ("id", db_id), fields)

    def insert_frames(
        self, conn: Any, rows: list[FrameRow], exchanges: Callable[[int], int | None]
    ) -> None:
        stored = encode_known(conn, self._keys, self._methods, rows, exchanges)
        if self.db.pg:
            from mcp_proxy.store import pg  # binary COPY: several times executemany's rate

            pg.copy_rows(conn, "frame_rows", STORED_FRAME_COLS, stored)
            return
        if any(len(r[_RAW]) > BIG_BLOB for r in stored):
            # Huge frames: sqlite3 blob I/O avoids two more copies of them.
            for r in stored:
                if len(r[_RAW]) > BIG_BLOB:
                    insert_big(conn, r)
            stored = [r for r in stored if len(r[_RAW]) <= BIG_BLOB]
        if stored:
            conn.executemany(FRAME_INSERT, stored)

    def update_session(self, conn: Any, sid: str, fields: dict[str, Any]) -> None:
        self._update(conn, "sessions", ("id", sid), fields)

    def insert_findings(self, conn: Any, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._insert(conn, "findings", row)

    def add_gap(self, conn: Any, sid: str, lost: int) -> None:
        sql = "UPDATE sessions SET gap_count = gap_count + ? WHERE id = ?"
        conn.execute(self.db.sql(sql), (lost, sid))

    def session_progress(self, sid: str) -> tuple[bool, int, int, int]:
        db = self.db
        with db.transaction() as conn:
            sql = "SELECT gap_count FROM sessions WHERE id = ?"
            exists = conn.execute(db.sql(sql), (sid,)).fetchone()
            sql = (
                "SELECT MAX(seq), COUNT(*) FROM frame_rows"
                " WHERE session_key = (SELECT key FROM session_keys WHERE id = ?)"
            )
            row = conn.execute(db.sql(sql), (sid,)).fetchone()
        last, count = (row[0] or 0, row[1] or 0) if row is not None else (0, 0)
        gaps = int(exists[0] or 0) if exists is not None else 0
        return exists is not None, int(last), int(count), gaps
