"""The SQL behind recording files: bulk reads for export, bulk writes for import.

Export and import move whole sessions, tens of thousands of frames at a time, so they do not
go through the dashboard's async read API (one awaited round trip per page of rows) nor through
the recorder (built for a live trickle of frames, with classification, numbering and handshake
tracking that an import already has from the file). Like the bulk frame stream
(``store/stream.py``), this module talks to the driver itself — ``sqlite3`` or ``psycopg``, on
one connection — with statements written once per table from the schema's column names: a
session's rows are read with one statement per table, an import is written in one transaction,
a page of frames at a time (:class:`ImportWriter`). SQLAlchemy's sync engine only opens that
connection (with the pragmas and connect arguments every other connection gets) and, for an
import, brings the schema to its head first (alembic needs it); it runs no statement here.

It imports nothing of the project above the store: the recording package converts these rows
to and from its model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from types import NoneType
from typing import Any, NamedTuple

from mcp_proxy.errors import StoreError
from mcp_proxy.frames import column_id
from mcp_proxy.limits import IMPORT_DEFER_INDEXES, IMPORT_METHOD_CACHE, IMPORT_SQLITE_CACHE_KIB
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.columns import (
    CHANNEL_CODES,
    DIRECTION_CODES,
    FRAME_COLUMNS,
    KIND_CODES,
    STORED_FRAME_COLS,
)
from mcp_proxy.store.rows import (
    EXCHANGE_COLUMNS,
    FINDING_COLUMNS,
    JSON_COLUMNS,
    SESSION_COLUMNS,
    storable,
)

__all__ = [
    "FRAME_COLUMNS",
    "FramePage",
    "ImportWriter",
    "RecordingStore",
    "SessionRows",
    "frame_page",
]


#: Column limits of the schema that a derived value must fit (the raw bytes always go in whole).
_METHOD_MAX = 200
_MSG_ID_MAX = 300
_SSE_ID_MAX = 200
_SSE_EVENT_MAX = 100
#: SQLite page cache for an import's connection, in KiB (``limits.IMPORT_SQLITE_CACHE_KIB``).
BULK_CACHE_KIB = IMPORT_SQLITE_CACHE_KIB

#: Each table's columns this module reads and writes, in the schema's order (``store/rows.py``
#: has them without SQLAlchemy; ``tests/recorder/test_store_writes.py`` checks them against the
#: schema), so that an export from a SQLite file imports no SQLAlchemy.
_SESSION_COLS = SESSION_COLUMNS
_EXCHANGE_COLS = EXCHANGE_COLUMNS
_FINDING_COLS = FINDING_COLUMNS
_NOTE_COLS = ("session_id", "frame_seq", "tag", "note", "created_at", "updated_at")
#: The JSON columns (``sa.JSON``): text on SQLite, ``json`` on PostgreSQL (annotations have none).
_JSON_COLS = frozenset().union(*JSON_COLUMNS.values())


@dataclass
class SessionRows:
    """One session as rows: what an export reads and an import writes."""

    session: dict[str, Any]
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)


class _Driver:
    """One DBAPI connection and what differs between the two drivers: the parameter marker,
    how a JSON value goes in and comes out, the driver's error class."""

    def __init__(self, url: str) -> None:
        plain = engine_mod.plain_sqlite_file(url)
        self.engine: Any = None
        if plain is not None and plain.is_file():  # sqlite3 itself: no SQLAlchemy to import
            import sqlite3

            self.pg = False
            self.error: type[Exception] = sqlite3.Error
            # check_same_thread off, as SQLAlchemy has it for a file: a generator reading
            # through it (stream_jsonl) may be resumed on another thread, never two at once.
            self.proxy: Any = engine_mod.sqlite_connect(plain, check_same_thread=False)
            self.dbapi: Any = self.proxy
            self.mark = "?"
            self._json_in: Any = _json_text
            return
        self.engine = engine_mod.sync_engine(url)
        self.pg = self.engine.dialect.name == "postgresql"
        self.error = self.engine.dialect.loaded_dbapi.Error
        try:
            self.proxy = self.engine.raw_connection()
        except Exception as exc:
            self.engine.dispose()
            raise StoreError(engine_mod.error_line(exc)) from exc
        self.dbapi = self.proxy.driver_connection
        self.mark = "%s" if self.pg else "?"
        if self.pg:
            from psycopg.types.json import Json

            self._json_in = Json
        else:
            self._json_in = _json_text

    def close(self) -> None:
        try:
            self.proxy.close()
        finally:
            if self.engine is not None:
                self.engine.dispose()

    def value_in(self, name: str, value: Any) -> Any:
        return self._json_in(value) if value is not None and name in _JSON_COLS else value

    def value_out(self, name: str, value: Any) -> Any:
        if not self.pg and type(value) is str and name in _JSON_COLS:
            return json.loads(value)
        return value

    def insert_sql(self, table: str, cols: Sequence[str], returning: str | None = None) -> str:
        marks = ", ".join([self.mark] * len(cols))
        tail = f" RETURNING {returning}" if returning else ""
        return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}){tail}"

    def params(self, cols: Sequence[str], row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(self.value_in(c, row.get(c)) for c in cols)

    def dicts(self, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        cur = self.dbapi.cursor()
        try:
            cur.execute(sql, tuple(args))
            names = [d[0] for d in cur.description]
            return [
                {n: self.value_out(n, v) for n, v in zip(names, row, strict=True)}
                for row in cur.fetchall()
            ]
        finally:
            cur.close()


def _json_text(value: Any) -> str:
    """A JSON column's value as SQLite holds it (what SQLAlchemy's ``sa.JSON`` writes)."""
    return json.dumps(value)


class RecordingStore:
    """A sync handle on one database for export and import (open, use, :meth:`close`)."""

    def __init__(self, url: str, *, write: bool = False) -> None:
        try:
            if write:
                engine_mod.ensure_schema(url)
            self.driver = _Driver(url)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    def close(self) -> None:
        self.driver.close()

    def __enter__(self) -> RecordingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def _rows(self, sql: str, session_id: str) -> list[dict[str, Any]]:
        d = self.driver
        try:
            return d.dicts(sql.replace("?", d.mark), (session_id,))
        except d.error as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc
        finally:
            if d.pg:
                d.dbapi.rollback()  # a read leaves no transaction open on the server

    def session_rows(self, session_id: str) -> SessionRows:
        """A session's row, exchanges (numbered 1, 2, … in order), findings and annotations."""
        found = self._rows(
            f"SELECT {', '.join(_SESSION_COLS)} FROM sessions WHERE id = ?", session_id
        )
        if not found:
            raise StoreError(f"session {session_id} disappeared while it was read")
        exchanges = self._rows(
            f"SELECT id, {', '.join(_EXCHANGE_COLS)} FROM http_exchanges WHERE session_id = ?"
            " ORDER BY started_at, id",
            session_id,
        )
        recorded = self._rows(
            f"SELECT {', '.join(c for c in _FINDING_COLS if c != 'session_id')} FROM findings"
            " WHERE session_id = ? ORDER BY id",
            session_id,
        )
        notes = self._rows(
            f"SELECT {', '.join(_NOTE_COLS[1:])} FROM annotations WHERE session_id = ?"
            " ORDER BY created_at, id",
            session_id,
        )
        return SessionRows(found[0], exchanges, recorded, notes)

    # ------------------------------------------------------------------ writing
    def import_writer(self) -> ImportWriter:
        """A writer for one import, in one transaction (use it as a context manager)."""
        return ImportWriter(self.driver)


#: The ``frame_rows`` indexes a large SQLite import drops and builds again when it commits: the
#: one whose keys land all over its B-tree (ids as text: ``"10"`` sorts between ``"1"`` and
#: ``"2"``). The other secondary indexes take a session's rows in order — appended at the end of
#: a run — and are kept up to date row by row while the reader still reads: at 1M frames,
#: deferring all four left 1.8 s of serial work after the file's end, deferring this one 1.2 s.
_DEFERRED_INDEXES = frozenset({"ix_frames_session_msgid"})


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

    On SQLite, once an import has written :data:`~mcp_proxy.limits.IMPORT_DEFER_INDEXES` frames
    and at least as many as the table held before, the secondary indexes of ``frame_rows`` (not
    the unique one) are dropped in the import's transaction and created again, from their own
    ``CREATE INDEX`` text, by :meth:`commit`: one sorted build instead of a B-tree insert per
    row and index. Readers (WAL) see the indexes of the last commit throughout; a rollback
    restores them with the rows; the schema after a commit is the one before.
    """

    def __init__(self, driver: _Driver) -> None:
        self.driver = driver
        self.pg = driver.pg
        #: Method name (as the file has it) → code; bounded (``IMPORT_METHOD_CACHE``).
        self.methods: dict[str, int] = {}
        self._open = False
        #: Frames written so far, and the rows the table held before (SQLite only).
        self._written = 0
        self._before = 0
        #: None: indexes kept up to date; else the ``CREATE INDEX`` texts of those dropped.
        self._deferred: list[str] | None = None

    def __enter__(self) -> ImportWriter:
        d = self.driver
        try:
            if d.pg:
                d.dbapi.rollback()  # whatever a read left: the import starts its own
            else:
                d.dbapi.commit()
                # Five indexes on frames: with SQLite's default 2 MiB page cache a large import
                # spends its time re-reading index pages. This connection only.
                d.dbapi.execute(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
                d.dbapi.execute("BEGIN")
                self._before = d.dbapi.execute(
                    "SELECT coalesce(max(id), 0) FROM frame_rows"
                ).fetchone()[0]
        except d.error as exc:
            raise StoreError(f"import failed: {engine_mod.error_line(exc)}") from exc
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._open:
            return
        self._open = False
        d = self.driver
        try:
            d.dbapi.rollback()  # after commit(): nothing left to undo
        except d.error:
            pass

    def _fail(self, exc: BaseException) -> StoreError:
        return StoreError(f"import failed: {engine_mod.error_line(exc)}")

    def commit(self) -> None:
        if not self._open:
            raise StoreError("import failed: the writer is closed")
        d = self.driver
        try:
            for sql in self._deferred or ():
                d.dbapi.execute(sql)
            self._deferred = None
            d.dbapi.commit()
        except d.error as exc:
            raise self._fail(exc) from exc

    def _defer_indexes(self) -> None:
        """Drop ``frame_rows``' secondary indexes for the rest of this transaction (SQLite, no
        ``sqlite_stat1`` whose rows a drop would lose); :meth:`commit` creates them again."""
        db = self.driver.dbapi
        self._deferred = []
        if db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
        ).fetchone():
            return
        found = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'frame_rows'"
            " AND sql IS NOT NULL ORDER BY rowid"
        ).fetchall()
        for name, sql in found:
            if name in _DEFERRED_INDEXES:
                db.execute(f'DROP INDEX "{name}"')
                self._deferred.append(sql)

    def _execute(self, sql: str, args: Sequence[Any]) -> Any:
        if not self._open:
            raise StoreError("import failed: the writer is closed")
        cur = self.driver.dbapi.cursor()
        try:
            cur.execute(sql, tuple(args))
            return cur.fetchone() if cur.description else None
        finally:
            cur.close()

    def session(self, session: dict[str, Any]) -> tuple[str, int]:
        """Insert a session row (a new id; ``frame_count`` 0 until :meth:`finish`): its id, key."""
        from mcp_proxy.store.codes import resolve

        d = self.driver
        new_id = uuid.uuid4().hex
        row = {k: v for k, v in session.items() if k in _SESSION_COLS and k != "id"}
        row.update(id=new_id, frame_count=0)
        cols = tuple(row)
        keys: dict[str, int] = {}
        try:
            self._execute(d.insert_sql("sessions", cols), d.params(cols, row))
            resolve(d.dbapi, keys, {}, [(new_id,) + (None,) * 7])
        except d.error as exc:
            raise self._fail(exc) from exc
        key = keys.get(new_id)
        if key is None:
            raise StoreError(f"import failed: session {new_id} has no key")
        return new_id, key

    def exchanges(self, session_id: str, exchanges: Sequence[dict[str, Any]]) -> dict[int, int]:
        """Insert exchanges (each with its per-session number as ``id``): number → database id."""
        d = self.driver
        sql = d.insert_sql("http_exchanges", _EXCHANGE_COLS, returning="id")
        out: dict[int, int] = {}
        try:
            for ex in exchanges:
                row = self._execute(sql, d.params(_EXCHANGE_COLS, {**ex, "session_id": session_id}))
                out[int(ex["id"])] = int(row[0])
        except d.error as exc:
            raise self._fail(exc) from exc
        return out

    def frames(
        self,
        key: int,
        before: int,
        page: FramePage,
        marked: Collection[int],
        exchange_ids: dict[int, int],
    ) -> None:
        """Write a page of frames (:func:`frame_page`), numbered after ``before`` (the file's
        ``seq`` is ignored), the ``marked`` rows flagged ``redacted``.

        The stored tuples are made by ``zip`` as ``executemany`` (or ``COPY``) takes them: no
        row is built in Python; the method names and the file's exchange numbers are mapped to
        codes and ids by the dicts' own ``get`` (``None`` stays ``None``). On SQLite a column
        that holds one value on the whole page (the session key; on most pages the flags, the
        exchange, the SSE fields and the error code) is written into the statement as a literal
        (:func:`_literal_insert`) rather than bound per row: 18 values bound a row cost ~20%
        more than the 9 or so that vary."""
        n = len(page.raw)
        if not n:
            return
        if not self._open:
            raise StoreError("import failed: the writer is closed")
        d = self.driver
        if len(self.methods) > IMPORT_METHOD_CACHE:
            self.methods.clear()
        # Typed as the ``get`` below takes them: a None name or number gives None.
        methods: dict[Any, int] = self.methods
        exchanges: dict[Any, int] = exchange_ids
        try:
            fresh: set[Any] = set(page.method).difference(methods)
            fresh.discard(None)
            if fresh:
                _resolve_methods(d.dbapi, fresh, methods)
            redacted: Sequence[bool | None] = (
                [True if i in marked else None for i in range(n)] if marked else (None,) * n
            )
            columns: list[Iterable[Any]] = [
                (key,) * n, range(before + 1, before + n + 1), page.ts, page.mono_ns,
                page.direction, page.channel, page.kind, list(map(methods.get, page.method)),
                page.msg_id, page.error_code, page.size, page.complete, page.partial_parse,
                page.raw, list(map(exchanges.get, page.http_exchange_id)), page.sse_id,
                page.sse_event, redacted,
            ]  # fmt: skip
            if self.pg:
                from mcp_proxy.store import pg as pg_mod

                rows = zip(*columns, strict=True)
                pg_mod.copy_rows(d.dbapi, "frame_rows", STORED_FRAME_COLS, rows)
            else:
                sql, bound = _literal_insert(columns)
                d.dbapi.executemany(sql, zip(*bound, strict=True))
                self._written += n
                if self._deferred is None and self._written >= max(
                    IMPORT_DEFER_INDEXES, self._before
                ):
                    self._defer_indexes()
        except d.error as exc:
            raise self._fail(exc) from exc

    def finish(
        self,
        session_id: str,
        values: dict[str, Any],
        recorded: Sequence[dict[str, Any]],
        notes: Sequence[dict[str, Any]],
    ) -> None:
        """A session's last word: its row's ``values`` (frame count, times), findings, notes."""
        d = self.driver
        names = [n for n in values if n in _SESSION_COLS]
        sets = ", ".join(f"{n} = {d.mark}" for n in names)
        try:
            self._execute(
                f"UPDATE sessions SET {sets} WHERE id = {d.mark}",
                (*d.params(names, values), session_id),
            )
            cur = d.dbapi.cursor()
            try:
                if recorded:
                    cur.executemany(
                        d.insert_sql("findings", _FINDING_COLS),
                        [
                            d.params(_FINDING_COLS, {**f, "session_id": session_id})
                            for f in recorded
                        ],
                    )
                if notes:
                    cur.executemany(
                        d.insert_sql("annotations", _NOTE_COLS),
                        [d.params(_NOTE_COLS, {**n, "session_id": session_id}) for n in notes],
                    )
            finally:
                cur.close()
        except d.error as exc:
            raise self._fail(exc) from exc


_INT64 = (-(2**63), 2**63 - 1)


def _fits(value: Any, limit: int) -> Any:
    """A derived text value as its column holds it: escaped if need be, cut to the column."""
    if value is None:
        return None
    if type(value) is str and value.isascii() and len(value) <= limit:
        return value  # the common case, decided without encoding it
    fixed = storable(value)
    return fixed[:limit] if isinstance(fixed, str) else fixed


class FramePage(NamedTuple):
    """A page of an import's frames by column, as :meth:`ImportWriter.frames` writes them: the
    columns of :data:`FRAME_COLUMNS` in its order, a list each, the values as stored —
    direction, channel and kind as their codes, the derived text made storable — except the
    method (its name: the writer has the codes) and the exchange (the file's number: the
    writer has the ids). What the import's reader hands its writer across the pipe (a tuple
    of lists: a few objects a row, no tuple per row)."""

    seq: list[int]
    ts: list[Any]
    mono_ns: list[Any]
    direction: list[int]
    channel: list[int]
    kind: list[int]
    method: list[str | None]
    msg_id: list[str | None]
    error_code: list[Any]
    size: list[int]
    complete: list[bool]
    partial_parse: list[bool]
    raw: list[bytes]
    http_exchange_id: list[int | None]
    sse_id: list[str | None]
    sse_event: list[str | None]


def frame_page(rows: Sequence[tuple[Any, ...]]) -> FramePage:
    """Frame row tuples (:data:`FRAME_COLUMNS` order) as a :class:`FramePage`, in one pass per
    column: codes for the strings, storable derived values (a value out of its column's range
    is fixed as the recorder fixes it; a long id shortened by
    :func:`mcp_proxy.frames.column_id`). An unknown direction, channel or kind is refused with
    one line."""
    if not rows:
        return FramePage(*([] for _ in FRAME_COLUMNS))
    (seq, ts, mono, direction, channel, kind, method, msg_id, code, size, complete, partial,
        raw, ex, sse_id, sse_event) = map(list, zip(*rows, strict=True))  # fmt: skip
    lo, hi = _INT64
    if not _ints_within(mono, lo, hi, none=False):
        mono = [m if type(m) is int and lo <= m <= hi else storable(m) or 0 for m in mono]
    if not _ints_within(code, lo, hi, none=True):
        code = [c if c is None or (type(c) is int and lo <= c <= hi) else storable(c) for c in code]
    if max(map(len, filter(None, msg_id)), default=0) > _MSG_ID_MAX:
        msg_id = [_fitted_id(i) for i in msg_id]
    if set(sse_id) != {None} or set(sse_event) != {None}:
        sse_id = [_fits(v, _SSE_ID_MAX) for v in sse_id]
        sse_event = [_fits(v, _SSE_EVENT_MAX) for v in sse_event]
    try:
        return FramePage(
            seq, ts, mono, list(map(DIRECTION_CODES.__getitem__, direction)),
            list(map(CHANNEL_CODES.__getitem__, channel)), list(map(KIND_CODES.__getitem__, kind)),
            method, msg_id, code, size, list(map(bool, complete)), list(map(bool, partial)), raw,
            ex, sse_id, sse_event,
        )  # fmt: skip
    except KeyError as exc:
        raise StoreError(f"import failed: unknown frame direction/channel/kind {exc}") from None


def _ints_within(values: list[Any], lo: int, hi: int, *, none: bool) -> bool:
    """Every value an ``int`` (or None, if ``none``) within ``lo``..``hi``: decided in C."""
    kinds = set(map(type, values))
    if kinds == {NoneType}:
        return none
    if not kinds <= ({int, NoneType} if none else {int}):
        return False
    present = [v for v in values if v is not None] if NoneType in kinds else values
    return lo <= min(present) and max(present) <= hi


#: The stored columns whose value may be written into the statement when a page holds one value
#: in it (a None, bool or int): not ``seq``, ``ts``, ``mono_ns``, ``size``, ``raw``, ``msg_id``.
_LITERAL_AT = tuple(
    STORED_FRAME_COLS.index(c)
    for c in (
        "session_key", "direction", "channel", "kind", "method_code", "error_code", "complete",
        "partial_parse", "http_exchange_id", "sse_id", "sse_event", "redacted",
    )
)  # fmt: skip


def _literal_insert(columns: list[Iterable[Any]]) -> tuple[str, list[Iterable[Any]]]:
    """The SQLite ``INSERT`` of a page's columns (:data:`STORED_FRAME_COLS` order) and the
    columns it binds: a column of one value (None, a bool or an int) is a literal of the
    statement (``NULL``, ``0``/``1``, the number: what binding it stores), the others are bound."""
    marks: list[str] = ["?"] * len(columns)
    for i in _LITERAL_AT:
        values = set(columns[i])
        if len(values) != 1:
            continue
        (value,) = values
        if value is None:
            marks[i] = "NULL"
        elif type(value) in (bool, int):
            marks[i] = str(int(value))
    sql = f"INSERT INTO frame_rows ({', '.join(STORED_FRAME_COLS)}) VALUES ({', '.join(marks)})"
    return sql, [c for c, m in zip(columns, marks, strict=True) if m == "?"]


def _fitted_id(msg_id: str | None) -> str | None:
    """A ``msg_id`` as its column holds it: a long one shortened (or None if it cannot be)."""
    if msg_id is None or len(msg_id) <= _MSG_ID_MAX:
        return msg_id
    short = column_id(msg_id)
    return short if short is not None and len(short) <= _MSG_ID_MAX else None


def _resolve_methods(dbapi: Any, names: set[str], methods: dict[str, int]) -> None:
    """``methods`` given the code of each of ``names`` (as the file has them; the code is the
    one of the name as stored, cut to its column)."""
    from mcp_proxy.store.codes import resolve

    fitted = {name: _fits(name, _METHOD_MAX) for name in names}
    known: dict[str, int] = {}
    resolve(dbapi, {"": 0}, known, [("", *(None,) * 6, f) for f in set(fitted.values())])
    methods.update((name, known[f]) for name, f in fitted.items())
