"""A session's rows and its analyzer findings through the driver: their one implementation.

A session's row (by id, prefix or name; the newest first), its HTTP exchanges, its recorded
findings and the analyzer's summary row, its ``tools/list`` answers, and the swap of the
analyzer's rows are read and written here only. The recorder process (``analysis.service.
settle``), ``show``, ``export``, ``check`` and ``stats`` call this directly: plain
:mod:`sqlite3` on a SQLite file — no SQLAlchemy is imported, which cost the recorder process of
every ``mcptape record`` more CPU than the recording — and, elsewhere, the DBAPI connection of a
sync engine. The async store (``store/queries.py``, the dashboard) calls the same methods in a
worker thread, on one :class:`DirectStore` of its own (``store/base.py``). The rows are dicts of
every column, JSON columns decoded.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from mcp_proxy.errors import NotFoundError, StoreError
from mcp_proxy.store.columns import ANSWERS_SQL, responses_only
from mcp_proxy.store.engine import error_line, sqlite_connect
from mcp_proxy.store.rows import (
    EXCHANGE_COLUMNS,
    FINDING_COLUMNS,
    JSON_COLUMNS,
    SESSION_COLUMNS,
    SESSION_STATS_COLUMNS,
    AnswerRow,
    FindingRow,
    HttpExchangeRow,
    SessionRow,
    SessionStatsRow,
    StoredFinding,
    storable,
)
from mcp_proxy.store.writer import sqlite_file

__all__ = ["DirectStore"]

_SUMMARY = "analysis.summary"
_FINDING_SELECT = f"SELECT id, {', '.join(FINDING_COLUMNS)} FROM findings"


class DirectStore:
    """One DBAPI connection (open, use, :meth:`close`); each call its own transaction."""

    def __init__(self, url: str) -> None:
        self._engine: Any = None
        path = sqlite_file(url)
        try:
            if path is not None:
                self._open_sqlite(path)
            else:
                self._open_engine(url)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(error_line(exc)) from exc

    def _open_sqlite(self, path: str) -> None:
        self.conn: Any = sqlite_connect(path, isolation_level=None, check_same_thread=False)
        self.pg = False
        self.error: type[Exception] = sqlite3.Error

    def _open_engine(self, url: str) -> None:
        from mcp_proxy.store import engine as engine_mod

        self._engine = engine = engine_mod.sync_engine(url)
        self.pg = engine.dialect.name == "postgresql"
        self.error = engine.dialect.loaded_dbapi.Error
        try:
            self._proxy = engine.raw_connection()
        except Exception:
            engine.dispose()
            raise
        self.conn = self._proxy.driver_connection
        if not self.pg:
            self.conn.isolation_level = None  # explicit BEGIN/COMMIT, as on a file

    def close(self) -> None:
        with contextlib.suppress(Exception):
            (self._proxy if self._engine is not None else self.conn).close()
        if self._engine is not None:
            self._engine.dispose()

    def __enter__(self) -> DirectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def _dicts(
        self, table: str, sql: str, args: Sequence[Any] | Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Rows as dicts; ``args`` by position (``?``) or by name (``:name``)."""
        js = JSON_COLUMNS.get(table, frozenset())
        named = isinstance(args, Mapping)
        if self.pg:
            sql = re.sub(r":(\w+)", r"%(\1)s", sql) if named else sql.replace("?", "%s")
        try:
            cur = self.conn.cursor()
            try:
                cur.execute(sql, dict(args) if isinstance(args, Mapping) else tuple(args))
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
            finally:
                cur.close()
            if self.pg:
                self.conn.rollback()  # a read leaves no transaction open on the server
        except self.error as exc:
            if self.pg:  # nor does a failed one (psycopg would refuse every later statement)
                with contextlib.suppress(Exception):
                    self.conn.rollback()
            raise StoreError(error_line(exc)) from exc
        out = []
        for row in rows:
            d = dict(zip(names, row, strict=True))
            if not self.pg:  # SQLite holds JSON columns as text (what sa.JSON writes)
                for k in js:
                    if type(d.get(k)) is str:
                        d[k] = json.loads(d[k])
            out.append(d)
        return out

    def session(self, session_id: str) -> SessionRow | None:
        """The session's row (None: no such session)."""
        rows = self._sessions(
            f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?", (session_id,)
        )
        return rows[0] if rows else None

    def _sessions(self, sql: str, args: Sequence[Any]) -> list[SessionRow]:
        return cast(list[SessionRow], self._dicts("sessions", sql, args))

    def resolve_session(self, ref: str) -> SessionRow:
        """A session by unique id prefix, or by name (the latest with that name): as the async
        store's ``resolve_session``, with its errors (:class:`NotFoundError`, exit 4)."""
        ref = ref.strip()
        if not ref:
            raise NotFoundError("empty session reference")
        select = f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions"
        if all(ch in "0123456789abcdef" for ch in ref.lower()):
            # Hex digits only: nothing in the pattern that LIKE would read as a wildcard.
            rows = self._sessions(f"{select} WHERE id LIKE ? LIMIT 2", (ref.lower() + "%",))
            if len(rows) == 1:
                return rows[0]
            if len(rows) > 1:
                raise NotFoundError(f"session id prefix {ref!r} is ambiguous; give more characters")
        rows = self._sessions(
            f"{select} WHERE name = ? ORDER BY started_at DESC, id DESC LIMIT 1", (ref,)
        )
        if not rows:
            raise NotFoundError(f"no session matches {ref!r} (an id prefix or a session name)")
        return rows[0]

    def list_sessions(
        self,
        *,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 50,
        before: tuple[float, str] | None = None,
    ) -> list[SessionRow]:
        """Sessions newest first. ``before`` = (started_at, id) of the last row seen (keyset)."""
        where: list[str] = []
        args: list[Any] = []
        if name is not None:
            where.append("name = ?")
            args.append(name)
        if since is not None:
            where.append("started_at >= ?")
            args.append(since)
        if until is not None:
            where.append("started_at < ?")
            args.append(until)
        if before is not None:
            where.append("(started_at < ? OR (started_at = ? AND id < ?))")
            args.extend((before[0], before[0], before[1]))
        sql = f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return self._sessions(sql, args)

    def http_exchanges(self, session_id: str) -> list[HttpExchangeRow]:
        rows = self._dicts(
            "http_exchanges",
            f"SELECT id, {', '.join(EXCHANGE_COLUMNS)} FROM http_exchanges"
            " WHERE session_id = ? ORDER BY started_at, id",
            (session_id,),
        )
        return cast(list[HttpExchangeRow], rows)

    def recorded_findings(self, session_id: str) -> list[StoredFinding]:
        """Every stored finding of the session, in insertion order (as the async store's)."""
        return self._findings(f"{_FINDING_SELECT} WHERE session_id = ? ORDER BY id", (session_id,))

    def _findings(self, sql: str, args: Sequence[Any]) -> list[StoredFinding]:
        return cast(list[StoredFinding], self._dicts("findings", sql, args))

    def analysis_summary(self, session_id: str) -> StoredFinding | None:
        """The analyzer's ``analysis.summary`` row for a session (None: never analysed)."""
        rows = self._findings(
            f"{_FINDING_SELECT} WHERE session_id = ? AND source = 'analyzer' AND code = ?"
            " ORDER BY id DESC LIMIT 1",
            (session_id, _SUMMARY),
        )
        return rows[0] if rows else None

    def tools_list_answers(self, session_id: str, limit: int = 20) -> list[AnswerRow]:
        """As the async store's (the same query, :data:`~mcp_proxy.store.columns.ANSWERS_SQL`):
        the responses to the session's first ``limit`` ``tools/list`` requests."""
        args = {"sid": session_id, "method": "tools/list", "limit": limit}
        return cast(list[AnswerRow], responses_only(self._dicts("frames", ANSWERS_SQL, args)))

    def frame_raw(self, session_id: str, seq: int) -> bytes | None:
        """A frame's stored bytes (None: no such frame)."""
        rows = self._dicts(
            "frames",
            "SELECT raw FROM frame_rows WHERE session_key ="
            " (SELECT key FROM session_keys WHERE id = ?) AND seq = ?",
            (session_id, seq),
        )
        return bytes(rows[0]["raw"]) if rows else None

    def session_stats(self, session_id: str) -> SessionStatsRow | None:
        """The session's stored ``session_stats`` row (None: never stored)."""
        rows = self._dicts(
            "session_stats",
            f"SELECT {', '.join(SESSION_STATS_COLUMNS)} FROM session_stats WHERE session_id = ?",
            (session_id,),
        )
        return cast(SessionStatsRow, rows[0]) if rows else None

    # ------------------------------------------------------------------ writing
    def replace_session_stats(self, row: SessionStatsRow) -> None:
        """Store a session's ``session_stats`` row in place of any earlier one, in one
        transaction (the session row locked first on PostgreSQL, as for the findings)."""
        m = "%s" if self.pg else "?"
        sid = row["session_id"]
        values = tuple(self._value("session_stats", c, row.get(c)) for c in SESSION_STATS_COLUMNS)
        delete = f"DELETE FROM session_stats WHERE session_id = {m}"
        insert = (
            f"INSERT INTO session_stats ({', '.join(SESSION_STATS_COLUMNS)})"
            f" VALUES ({', '.join([m] * len(SESSION_STATS_COLUMNS))})"
        )

        def swap(cur: Any) -> None:
            cur.execute(delete, (sid,))
            cur.execute(insert, values)

        self._transaction(sid, swap)

    def _transaction(self, session_id: str, work: Callable[[Any], None]) -> None:
        """``work(cursor)`` in one write transaction, the session row locked first
        (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises writers)."""
        conn = self.conn
        try:
            if self.pg:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
                    work(cur)
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                work(conn)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except self.error as exc:
            raise StoreError(error_line(exc)) from exc

    def replace_analyzer_findings(self, session_id: str, rows: Sequence[FindingRow]) -> None:
        """Swap a session's analyzer findings for ``rows`` in one transaction, the session row
        locked first (``FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises
        writers), so two processes refreshing one session leave one set of rows."""
        m = "%s" if self.pg else "?"
        insert = (
            f"INSERT INTO findings ({', '.join(FINDING_COLUMNS)})"
            f" VALUES ({', '.join([m] * len(FINDING_COLUMNS))})"
        )
        values = [
            tuple(self._value("findings", c, r.get(c)) for c in FINDING_COLUMNS) for r in rows
        ]
        self._transaction(session_id, lambda cur: self._swap(cur, session_id, insert, values))

    def _swap(self, cur: Any, session_id: str, insert: str, values: list[tuple[Any, ...]]) -> None:
        m = "%s" if self.pg else "?"
        cur.execute(
            f"DELETE FROM findings WHERE session_id = {m} AND source = 'analyzer'", (session_id,)
        )
        if values:
            cur.executemany(insert, values)

    def _value(self, table: str, name: str, value: Any) -> Any:
        if name in JSON_COLUMNS[table]:  # None as JSON ``null``, as ``sa.JSON`` writes it
            if self.pg:
                from psycopg.types.json import Json

                return Json(value)
            return json.dumps(value)
        return storable(value)
