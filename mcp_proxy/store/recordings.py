"""The SQL behind recording files: bulk reads for export, bulk writes for import.

Export and import move whole sessions, tens of thousands of frames at a time, so they do not
go through the dashboard's async read API (one awaited round trip per page of rows) nor through
the recorder (built for a live trickle of frames, with classification, numbering and handshake
tracking that an import already has from the file). This module reads a session's rows in
pages over one sync connection and writes an import in one transaction, a page of frames at a
time (:class:`ImportWriter`) — the store keeps every SQL statement; callers see plain dicts.

It imports nothing of the project above the store: the recording package converts these rows
to and from its model.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mcp_proxy.errors import StoreError
from mcp_proxy.frames import column_id
from mcp_proxy.limits import IMPORT_METHOD_CACHE, IMPORT_SQLITE_CACHE_KIB
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store import schema
from mcp_proxy.store.columns import (
    CHANNEL_CODES,
    DIRECTION_CODES,
    FRAME_COLUMNS,
    KIND_CODES,
    STORED_FRAME_COLS,
)
from mcp_proxy.store.rows import storable
from mcp_proxy.store.schema import findings, http_exchanges, sessions

__all__ = [
    "FRAME_COLUMNS",
    "ImportWriter",
    "RecordingStore",
    "SessionRows",
]


#: Column limits of the schema that a derived value must fit (the raw bytes always go in whole).
_METHOD_MAX = 200
_MSG_ID_MAX = 300
_SSE_ID_MAX = 200
_SSE_EVENT_MAX = 100
#: SQLite page cache for an import's connection, in KiB (``limits.IMPORT_SQLITE_CACHE_KIB``).
BULK_CACHE_KIB = IMPORT_SQLITE_CACHE_KIB


def _short(exc: BaseException) -> str:
    return engine_mod._short(exc)


@dataclass
class SessionRows:
    """One session as rows: what an export reads and an import writes."""

    session: dict[str, Any]
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)


class RecordingStore:
    """A sync handle on one database for export and import (open, use, :meth:`close`)."""

    def __init__(self, url: str, *, write: bool = False) -> None:
        try:
            self.engine: Engine = engine_mod.sync_engine(url)
            if write:
                engine_mod.ensure_schema(url, self.engine)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(_short(exc)) from exc

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> RecordingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def _rows(self, stmt: sa.Executable) -> list[dict[str, Any]]:
        try:
            with self.engine.connect() as conn:
                return [dict(r._mapping) for r in conn.execute(stmt)]
        except sa.exc.DBAPIError as exc:
            raise StoreError(_short(exc)) from exc

    def session_rows(self, session_id: str) -> SessionRows:
        """A session's row, exchanges (numbered 1, 2, … in order), findings and annotations."""
        found = self._rows(sa.select(sessions).where(sessions.c.id == session_id))
        if not found:
            raise StoreError(f"session {session_id} disappeared while it was read")
        exchanges = self._rows(
            sa.select(http_exchanges)
            .where(http_exchanges.c.session_id == session_id)
            .order_by(http_exchanges.c.started_at, http_exchanges.c.id)
        )
        recorded = self._rows(
            sa.select(*[c for c in findings.c if c.name not in ("id", "session_id")])
            .where(findings.c.session_id == session_id)
            .order_by(findings.c.id)
        )
        notes = self._rows(
            sa.select(
                schema.annotations.c.frame_seq,
                schema.annotations.c.tag,
                schema.annotations.c.note,
                schema.annotations.c.created_at,
                schema.annotations.c.updated_at,
            )
            .where(schema.annotations.c.session_id == session_id)
            .order_by(schema.annotations.c.created_at, schema.annotations.c.id)
        )
        return SessionRows(found[0], exchanges, recorded, notes)

    # ------------------------------------------------------------------ writing
    def import_writer(self) -> ImportWriter:
        """A writer for one import, in one transaction (use it as a context manager)."""
        return ImportWriter(self.engine)


class ImportWriter:
    """One import's writes, in one transaction: nothing is kept unless :meth:`commit` is reached.

    Sessions are written as the file declares them (:meth:`session`), their exchanges and frames
    a page at a time (:meth:`exchanges`, :meth:`frames`), their findings, annotations and final
    counts at the end (:meth:`finish`). Frames go to ``frame_rows`` directly, with their codes:
    ``executemany`` on SQLite, binary ``COPY`` on PostgreSQL. Leaving the ``with`` block without
    :meth:`commit` (a bad line further on, an interrupt) rolls everything back.

    Derived columns are made storable as the recorder makes them (:func:`storable`: lone
    surrogates escaped, integers beyond 64 bits dropped; text cut to its column; a long id
    shortened by :func:`mcp_proxy.frames.column_id`) — the raw bytes, which they are derived
    from, always go in whole.
    """

    def __init__(self, engine: Engine) -> None:
        from mcp_proxy.store.writes import frame_insert_sql

        self.engine = engine
        self.pg = engine.dialect.name == "postgresql"
        self.sql = None if self.pg else frame_insert_sql(engine)
        #: Method name (as the file has it) → code; bounded (``IMPORT_METHOD_CACHE``).
        self.methods: dict[str, int] = {}
        self._conn: sa.Connection | None = None
        self._trans: sa.RootTransaction | None = None

    def __enter__(self) -> ImportWriter:
        try:
            self._conn = self.engine.connect()
            self._trans = self._conn.begin()
            if not self.pg:
                # Five indexes on frames: with SQLite's default 2 MiB page cache a large import
                # spends its time re-reading index pages. This connection only.
                self._conn.exec_driver_sql(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
        except sa.exc.DBAPIError as exc:
            self.__exit__(None, None, None)
            raise StoreError(f"import failed: {_short(exc)}") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if self._trans is not None and self._trans.is_active:
                self._trans.rollback()
        finally:
            conn.close()

    @property
    def conn(self) -> sa.Connection:
        if self._conn is None:
            raise StoreError("import failed: the writer is closed")
        return self._conn

    def commit(self) -> None:
        try:
            if self._trans is not None:
                self._trans.commit()
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"import failed: {_short(exc)}") from exc

    def session(self, session: dict[str, Any]) -> tuple[str, int]:
        """Insert a session row (a new id; ``frame_count`` 0 until :meth:`finish`): its id, key."""
        from mcp_proxy.store.codes import resolve

        new_id = uuid.uuid4().hex
        row = {k: v for k, v in session.items() if k in sessions.c and k != "id"}
        row.update(id=new_id, frame_count=0)
        keys: dict[str, int] = {}
        try:
            self.conn.execute(sessions.insert(), [row])
            resolve(self.conn.connection.driver_connection, keys, {}, [(new_id,) + (None,) * 7])
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"import failed: {_short(exc)}") from exc
        key = keys.get(new_id)
        if key is None:
            raise StoreError(f"import failed: session {new_id} has no key")
        return new_id, key

    def exchanges(self, session_id: str, exchanges: Sequence[dict[str, Any]]) -> dict[int, int]:
        """Insert exchanges (each with its per-session number as ``id``): number → database id."""
        if not exchanges:
            return {}
        names = [c.name for c in http_exchanges.c if c.name not in ("id", "session_id")]
        params = [{"session_id": session_id, **{n: ex.get(n) for n in names}} for ex in exchanges]
        stmt = http_exchanges.insert().returning(http_exchanges.c.id, sort_by_parameter_order=True)
        try:
            result = self.conn.execute(stmt, params)
            return {int(ex["id"]): int(db[0]) for ex, db in zip(exchanges, result, strict=True)}
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"import failed: {_short(exc)}") from exc

    def frames(
        self,
        key: int,
        before: int,
        page: Sequence[tuple[Any, ...]],
        marked: Collection[int],
        exchange_ids: dict[int, int],
    ) -> None:
        """Write a page of frame rows (:data:`FRAME_COLUMNS` order), numbered after ``before``
        (the rows' own ``seq`` is ignored), ``marked`` rows flagged ``redacted``."""
        if not page:
            return
        conn = self.conn
        dbapi = conn.connection.driver_connection
        if len(self.methods) > IMPORT_METHOD_CACHE:
            self.methods.clear()
        try:
            stored = _stored_page(dbapi, key, before, page, marked, exchange_ids, self.methods)
            if self.pg:
                from mcp_proxy.store import pg as pg_mod

                pg_mod.copy_into(conn, "frame_rows", STORED_FRAME_COLS, stored)
            else:
                conn.exec_driver_sql(self.sql, stored)  # type: ignore[arg-type]
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"import failed: {_short(exc)}") from exc

    def finish(
        self,
        session_id: str,
        values: dict[str, Any],
        recorded: Sequence[dict[str, Any]],
        notes: Sequence[dict[str, Any]],
    ) -> None:
        """A session's last word: its row's ``values`` (frame count, times), findings, notes."""
        conn = self.conn
        try:
            conn.execute(sessions.update().where(sessions.c.id == session_id).values(**values))
            if recorded:
                conn.execute(findings.insert(), [{**f, "session_id": session_id} for f in recorded])
            if notes:
                conn.execute(
                    schema.annotations.insert(), [{**n, "session_id": session_id} for n in notes]
                )
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"import failed: {_short(exc)}") from exc


_INT64 = (-(2**63), 2**63 - 1)


def _fits(value: Any, limit: int) -> Any:
    """A derived text value as its column holds it: escaped if need be, cut to the column."""
    if value is None:
        return None
    if type(value) is str and value.isascii() and len(value) <= limit:
        return value  # the common case, decided without encoding it
    fixed = storable(value)
    return fixed[:limit] if isinstance(fixed, str) else fixed


def _stored_page(
    dbapi: Any,
    key: int,
    before: int,
    page: Sequence[tuple[Any, ...]],
    marked: Collection[int],
    exchange_ids: dict[int, int],
    methods: dict[str, int],
) -> list[tuple[Any, ...]]:
    """Import rows (:data:`FRAME_COLUMNS`) as ``frame_rows`` tuples (``STORED_FRAME_COLS``), in
    one pass: numbered after ``before``, codes for the strings, storable derived values.

    ``methods`` caches method name → code across pages (the names as the file has them; the
    code is the one of the name as stored, cut to its column). An unknown direction, channel
    or kind is refused with one line.
    """
    from mcp_proxy.store.codes import resolve

    fresh = {r[6] for r in page if r[6] is not None and r[6] not in methods}
    if fresh:
        fitted = {name: _fits(name, _METHOD_MAX) for name in fresh}
        known: dict[str, int] = {}
        resolve(dbapi, {"": 0}, known, [("", *(None,) * 6, f) for f in set(fitted.values())])
        methods.update((name, known[f]) for name, f in fitted.items())
    d_codes, c_codes, k_codes = DIRECTION_CODES, CHANNEL_CODES, KIND_CODES
    lo, hi = _INT64
    out: list[tuple[Any, ...]] = []
    append = out.append
    n = before
    try:
        for (_seq, ts, mono, direction, channel, kind, method, msg_id, code, size, complete,
                partial, raw, ex, sse_id, sse_event) in page:  # fmt: skip
            n += 1
            if type(mono) is not int or not lo <= mono <= hi:
                mono = storable(mono) or 0
            if code is not None and (type(code) is not int or not lo <= code <= hi):
                code = storable(code)
            if msg_id is not None and len(msg_id) > _MSG_ID_MAX:
                msg_id = column_id(msg_id)
                msg_id = msg_id if msg_id is not None and len(msg_id) <= _MSG_ID_MAX else None
            if sse_id is not None or sse_event is not None:
                sse_id, sse_event = _fits(sse_id, _SSE_ID_MAX), _fits(sse_event, _SSE_EVENT_MAX)
            append(
                (
                    key, n, ts, mono, d_codes[direction], c_codes[channel], k_codes[kind],
                    None if method is None else methods[method], msg_id, code, size,
                    bool(complete), bool(partial), raw,
                    None if ex is None else exchange_ids.get(ex), sse_id, sse_event, None,
                )
            )  # fmt: skip
    except KeyError as exc:
        raise StoreError(f"import failed: unknown frame direction/channel/kind {exc}") from None
    for i in marked:  # the few redacted rows, marked afterwards (no test per row)
        out[i] = (*out[i][:-1], True)
    return out
