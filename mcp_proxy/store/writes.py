"""The recorder's writes through SQLAlchemy: any database it speaks (PostgreSQL for teams), and
SQLite files that must be created or migrated first.

The rules of a batch (one transaction, row by row when one row is refused, transient errors
raised) live in :class:`mcp_proxy.store.writer.BatchWriter`; this module is its SQLAlchemy
backend. ``open_for_writing`` is also what tools use for their own small writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.codes import encode_known
from mcp_proxy.store.columns import STORED_FRAME_COLS
from mcp_proxy.store.rows import EXCHANGE_COLUMNS, FRAME_COLS, FrameRow, storable
from mcp_proxy.store.schema import (
    findings,
    frame_rows,
    http_exchanges,
    key_of,
    sessions,
)
from mcp_proxy.store.writer import BIG_BLOB, BatchWriter, TransientWriteError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "FRAME_COLS",
    "BatchWriter",
    "SqlAlchemyBackend",
    "TransientWriteError",
    "open_for_writing",
    "storable",
]

_frame_sql: dict[str, str] = {}


def open_for_writing(url: str) -> Engine:
    """A migrated, ready engine; raises StoreError with one line when that is impossible."""
    eng = engine_mod.sync_engine(url)
    engine_mod.ensure_schema(url, eng)
    return eng


def frame_insert_sql(engine: Engine) -> str:
    """The INSERT for ``frame_rows`` compiled once per dialect, executed at the driver level.

    Row tuples go straight to the DBAPI's ``executemany``: SQLAlchemy's per-row parameter
    processing was half of the writer's cost per frame.
    """
    key = engine.dialect.name
    cached = _frame_sql.get(key)
    if cached is None:
        stmt = sa.insert(frame_rows).values({c: sa.bindparam(c) for c in STORED_FRAME_COLS})
        dialect = engine.dialect
        if not dialect.positional:  # psycopg's default is pyformat; tuples need "%s" markers
            make: Any = type(dialect)  # each DefaultDialect takes paramstyle=
            dialect = make(paramstyle="format")
        compiled = stmt.compile(dialect=dialect)
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        assert order == STORED_FRAME_COLS, order  # positional drivers (sqlite, psycopg)
        cached = _frame_sql[key] = str(compiled)
    return cached


class SqlAlchemyBackend:
    """The batch statements in SQLAlchemy Core, for any dialect."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: session id → ``session_keys.key``, learnt from committed transactions only.
        self._keys: dict[str, int] = {}
        #: method name → ``methods.code``, likewise.
        self._methods: dict[str, int] = {}

    @classmethod
    def open(cls, url: str) -> SqlAlchemyBackend:
        return cls(open_for_writing(url))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except BaseException:
            self._keys.clear()  # keys/codes seen in a rolled-back transaction may not exist
            self._methods.clear()
            raise

    def is_transient(self, exc: BaseException) -> bool:
        """Lock, full disk, I/O, lost connection: the batch may go in later as it is."""
        import sqlite3

        return isinstance(exc, (sa.exc.OperationalError, sqlite3.OperationalError))

    def close(self) -> None:
        self.engine.dispose()

    def insert_sessions(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        for row in rows:  # one statement per key set: rows may carry different columns
            conn.execute(sessions.insert(), [row])

    def insert_exchanges(self, conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
        stmt = http_exchanges.insert().returning(http_exchanges.c.id, sort_by_parameter_order=True)
        # One statement for all rows: every row needs the same keys (a missing column is NULL).
        full = [dict.fromkeys(EXCHANGE_COLUMNS) | r for r in rows]
        return [int(r[0]) for r in conn.execute(stmt, full)]

    def update_exchange(self, conn: Connection, db_id: int, fields: dict[str, Any]) -> None:
        conn.execute(http_exchanges.update().where(http_exchanges.c.id == db_id).values(**fields))

    def insert_frames(self, conn: Connection, rows: list[FrameRow]) -> None:
        if self.engine.dialect.name == "postgresql":
            from mcp_proxy.store import pg  # binary COPY: several times executemany's rate

            # converts driver errors as SQLAlchemy does
            pg.copy_frames(conn, rows, self._keys, self._methods)
            return
        dbapi: Any = conn.connection.driver_connection
        stored = encode_known(dbapi, self._keys, self._methods, rows)
        if self.engine.dialect.name == "sqlite" and any(len(r.raw) > BIG_BLOB for r in rows):
            # Huge frames: sqlite3 blob I/O avoids two more copies of them.
            from mcp_proxy.store.writer import SqliteBackend

            raw = STORED_FRAME_COLS.index("raw")
            for r in stored:
                if len(r[raw]) > BIG_BLOB:
                    SqliteBackend._insert_big(dbapi, r)
            stored = [r for r in stored if len(r[raw]) <= BIG_BLOB]
        if stored:
            conn.exec_driver_sql(frame_insert_sql(self.engine), stored)  # type: ignore[arg-type]

    def update_session(self, conn: Connection, sid: str, fields: dict[str, Any]) -> None:
        conn.execute(sessions.update().where(sessions.c.id == sid).values(**fields))

    def insert_findings(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            conn.execute(findings.insert(), [row])

    def add_gap(self, conn: Connection, sid: str, lost: int) -> None:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == sid)
            .values(gap_count=sessions.c.gap_count + sa.literal(lost))
        )

    def session_progress(self, sid: str) -> tuple[bool, int, int, int]:
        with self.engine.connect() as conn:
            exists = conn.execute(
                sa.select(sessions.c.gap_count).where(sessions.c.id == sid)
            ).first()
            row = conn.execute(
                sa.select(sa.func.max(frame_rows.c.seq), sa.func.count()).where(
                    frame_rows.c.session_key == key_of(sid)
                )
            ).first()
        last, count = (row[0] or 0, row[1] or 0) if row is not None else (0, 0)
        gaps = int(exists[0] or 0) if exists is not None else 0
        return exists is not None, int(last), int(count), gaps
