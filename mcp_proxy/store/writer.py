"""The recorder's writes: how a :class:`~mcp_proxy.store.rows.Batch` goes into a database.

:class:`BatchWriter` owns the rules; a *backend* owns the statements:

- one transaction per batch (sessions → exchanges → frames → updates → findings → gaps);
- a batch refused for a *transient* reason (locked past the busy timeout, disk full, I/O)
  raises :class:`TransientWriteError` — the runner retries or counts the loss;
- a batch refused because of *one row* (a value the driver cannot bind, a constraint) is
  written again row by row, so a bad row never costs its neighbours: a frame row that still
  fails is written with its derived columns cleared (the exact bytes always go in), and only a
  row that cannot be written even then is returned as lost.

Backends: :class:`SqliteBackend` (plain :mod:`sqlite3`, SQL written out ahead of time — the
recorder process of ``mcptape record`` never imports SQLAlchemy, which was most of its start-up
cost) and ``store.writes.DriverBackend`` (PostgreSQL through psycopg, SQLite URLs with options;
a SQLite file that must be migrated first is migrated by alembic, then written here). This
module imports no SQLAlchemy.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any, Protocol

from orjson import dumps as _orjson_dumps

from mcp_proxy.limits import ENDED_EXCHANGES_KEPT, MAX_OPEN_EXCHANGES
from mcp_proxy.store.codes import encode_known
from mcp_proxy.store.columns import STORED_FRAME_COLS
from mcp_proxy.store.rows import (
    EXCHANGE_COLUMNS,
    FINDING_COLUMNS,
    JSON_COLUMNS,
    SCHEMA_HEAD,
    SESSION_COLUMNS,
    Batch,
    FrameRow,
    Gap,
    gap_finding,
    storable,
)

#: Frames larger than this are written to SQLite through incremental blob I/O.
BIG_BLOB = 4 << 20
#: Every exchange column, in ``EXCHANGE_COLUMNS`` order (SQLite's one exchange insert).
_EXCHANGE_INSERT = (
    f"INSERT INTO http_exchanges ({', '.join(EXCHANGE_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(EXCHANGE_COLUMNS))})"
)
_KNOWN = {
    "sessions": frozenset(SESSION_COLUMNS),
    "http_exchanges": frozenset(EXCHANGE_COLUMNS),
    "findings": frozenset(FINDING_COLUMNS),
}


def _unserializable(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


#: ``json.dumps`` with the default settings, its C encoder made once: ``json.dumps`` makes one
#: per call, half of its time on a small dict. The same text (``json.dumps`` where the
#: interpreter has no C encoder).
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
_ENCODER = (
    _C_MAKE_ENCODER(
        None, _unserializable, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    if _C_MAKE_ENCODER is not None
    else None
)


def _json_text(value: Any) -> str:
    """A JSON column's text, exactly as ``json.dumps(value)`` writes it (SQLAlchemy's JSON type
    writes the same), including ``NaN`` and escaped surrogates."""
    if _ENCODER is None or isinstance(value, str):
        return json.dumps(value)
    return "".join(_ENCODER(value, 0))


def _pairs_text(pairs: Any) -> str:
    """A header column (``[[name, value], …]`` of text) as JSON text: orjson, a tenth of
    ``json.dumps``'s time. Anything orjson refuses (a lone surrogate) goes through ``json.dumps``;
    readers parse the column, so the spacing of the two does not matter."""
    try:
        return _orjson_dumps(pairs).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _json_text(pairs)


class TransientWriteError(Exception):
    """The database refused the whole batch for a reason that may pass (lock, full disk)."""


def known_columns(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without keys that are not columns of ``table`` (a producer's extra field)."""
    cols = _KNOWN[table]
    return row if cols.issuperset(row) else {k: v for k, v in row.items() if k in cols}


class Backend(Protocol):
    """The statements of one database; every method runs inside :meth:`transaction`."""

    def transaction(self) -> contextlib.AbstractContextManager[Any]: ...
    def is_transient(self, exc: BaseException) -> bool: ...
    def insert_sessions(self, conn: Any, rows: list[dict[str, Any]]) -> None: ...
    def insert_exchanges(self, conn: Any, rows: list[dict[str, Any]]) -> list[int]:
        """Insert ``rows`` (each any subset of ``EXCHANGE_COLUMNS``; a missing column is NULL)
        in order; their database ids, in the same order."""
        ...

    def update_exchange(self, conn: Any, db_id: int, fields: dict[str, Any]) -> None: ...
    def insert_frames(
        self, conn: Any, rows: list[FrameRow], exchanges: Callable[[int], int | None]
    ) -> None:
        """Insert ``rows``, each local HTTP exchange id mapped by ``exchanges`` as it is
        encoded (None: the exchange never made it in)."""
        ...

    def update_session(self, conn: Any, sid: str, fields: dict[str, Any]) -> None: ...
    def insert_findings(self, conn: Any, rows: list[dict[str, Any]]) -> None: ...
    def add_gap(self, conn: Any, sid: str, lost: int) -> None: ...
    def session_progress(self, sid: str) -> tuple[bool, int, int, int]: ...
    def close(self) -> None: ...


class ExchangeIds:
    """The producers' local HTTP exchange ids → database ids, bounded.

    An exchange is remembered from the commit of its row until it ends (an ``ended_at`` in its
    row or in an update), then among the last ``ended_limit`` ended ones (a late frame or update
    still finds it), then forgotten: a relay that runs for weeks keeps only its open exchanges.
    Exchanges that never end are bounded too: past ``open_limit`` the oldest is forgotten and
    counted in ``forgotten`` (``limits.MAX_OPEN_EXCHANGES``, docs/reliability.md "Limits").
    """

    __slots__ = ("_ended", "_open", "ended_limit", "forgotten", "open_limit")

    def __init__(
        self, open_limit: int = MAX_OPEN_EXCHANGES, ended_limit: int = ENDED_EXCHANGES_KEPT
    ) -> None:
        self._open: dict[int, int] = {}  # insertion order: the oldest first
        self._ended: dict[int, int] = {}
        self.open_limit = open_limit
        self.ended_limit = ended_limit
        #: Open exchanges forgotten because there were more than ``open_limit``.
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self._open) + len(self._ended)

    def get(self, local: int) -> int | None:
        db_id = self._open.get(local)
        return db_id if db_id is not None else self._ended.get(local)

    def add(self, new_ids: dict[int, int]) -> None:
        """Exchanges whose rows were committed."""
        opened = self._open
        opened.update(new_ids)
        while len(opened) > self.open_limit:
            del opened[next(iter(opened))]
            self.forgotten += 1

    def end(self, locals_: Iterable[int]) -> None:
        """Exchanges that ended (committed): kept a while among the ended, then forgotten."""
        ended = self._ended
        for local in locals_:
            db_id = self._open.pop(local, None)
            if db_id is not None:
                ended[local] = db_id
        while len(ended) > self.ended_limit:
            del ended[next(iter(ended))]


def _ended_in(batch: Batch) -> list[int]:
    """Local ids of the exchanges that ``batch`` ends (a row or an update with ``ended_at``)."""
    out = [local for local, row in batch.exchanges if row.get("ended_at") is not None]
    out += [local for local, f in batch.exchange_updates if f.get("ended_at") is not None]
    return out


class BatchWriter:
    """Writes :class:`Batch` objects through a backend; remembers HTTP exchange ids.

    ``exchange_ids`` (:class:`ExchangeIds`) maps the producers' local exchange ids to database
    ids, filled only after a commit (a rolled-back batch must not leave ids pointing at
    nothing) and emptied as exchanges end.
    """

    def __init__(self, backend: Backend, *, clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.exchange_ids = ExchangeIds()
        self._clock = clock

    @classmethod
    def open(cls, url: str) -> BatchWriter:
        """A writer for ``url``: plain sqlite3 for a SQLite file, psycopg for PostgreSQL."""
        path = sqlite_file(url)
        if path is None or not _at_head(path):
            from mcp_proxy.store.engine import create_sqlite_at_head, plain_sqlite_file

            plain = plain_sqlite_file(url)
            if plain is not None and create_sqlite_at_head(plain):  # a new file: no SQLAlchemy
                return cls(SqliteBackend(str(plain)))
            if path is None:  # PostgreSQL (or a SQLite URL with options): its driver
                from mcp_proxy.store import writes

                return cls(writes.DriverBackend.open(url))
            from mcp_proxy.store.engine import ensure_schema  # an older file: migrate first

            ensure_schema(url)
        return cls(SqliteBackend(path))

    def close(self) -> None:
        self.backend.close()

    def session_progress(self, session_id: str) -> tuple[bool, int, int, int]:
        """``(exists, last seq, frames stored, gap_count)`` — where a new recorder picks up."""
        return self.backend.session_progress(session_id)

    # ------------------------------------------------------------------ the fast path
    def write(self, batch: Batch) -> list[FrameRow]:
        """Write ``batch``; returns the frame rows that could not be written at all.

        Raises :class:`TransientWriteError` when the database refused the whole batch for a
        reason that may pass; nothing of the batch is then in the database.
        """
        try:
            new_ids = self._apply(batch)
        except Exception as exc:
            if self.backend.is_transient(exc):
                raise TransientWriteError(_one_line(exc)) from exc
            return self._write_row_by_row(batch)
        self.exchange_ids.add(new_ids)
        if batch.exchanges or batch.exchange_updates:
            self.exchange_ids.end(_ended_in(batch))
        return []

    def _apply(self, batch: Batch) -> dict[int, int]:
        b = self.backend
        with b.transaction() as conn:
            if batch.sessions:
                b.insert_sessions(conn, [known_columns("sessions", r) for r in batch.sessions])
            new_ids = self._exchanges(conn, batch.exchanges, batch.exchange_updates)
            if batch.frames:
                known = self.exchange_ids.get
                b.insert_frames(conn, batch.frames, lambda x: new_ids.get(x) or known(x))
            for sid, (count, last) in batch.session_counts.items():
                b.update_session(conn, sid, {"frame_count": count, "updated_at": last})
            for sid, fields in batch.session_updates.items():
                if fields:
                    b.update_session(conn, sid, known_columns("sessions", fields))
            if batch.findings:
                b.insert_findings(conn, [known_columns("findings", f) for f in batch.findings])
            for sid, gap in batch.gaps.items():
                self._gap(conn, sid, gap)
        return new_ids

    def _gap(self, conn: Any, sid: str, gap: Gap) -> None:
        self.backend.insert_findings(conn, [gap_finding(sid, gap, self._clock())])
        self.backend.add_gap(conn, sid, gap.lost)

    def _exchanges(
        self,
        conn: Any,
        new: list[tuple[int, dict[str, Any]]],
        updates: list[tuple[int, dict[str, Any]]],
    ) -> dict[int, int]:
        """Insert new exchanges (with the updates of this batch folded in), then the rest.

        An HTTP relay queues one insert and two or three updates per exchange, most of them in
        the same batch: folding them keeps it to one statement per exchange.
        """
        # The rows as given (a backend takes any subset of the columns): no full-column copy of
        # each; an update folded in makes a new dict, so the batch's own rows stay as they were
        # (the row-by-row path folds them again).
        rows = {local: known_columns("http_exchanges", row) for local, row in new}
        later: dict[int, dict[str, Any]] = {}
        for local, fields in updates:
            target = rows.get(local)
            if target is not None:
                rows[local] = target | known_columns("http_exchanges", fields)
            else:
                later.setdefault(local, {}).update(known_columns("http_exchanges", fields))
        new_ids: dict[int, int] = {}
        if rows:
            locals_ = list(rows)
            ids = self.backend.insert_exchanges(conn, [rows[k] for k in locals_])
            new_ids = dict(zip(locals_, ids, strict=True))
        for local, fields in later.items():
            db_id = new_ids.get(local) or self.exchange_ids.get(local)
            if db_id is not None and fields:
                self.backend.update_exchange(conn, db_id, fields)
        return new_ids

    # ------------------------------------------------------------------ the slow, safe path
    def _write_row_by_row(self, batch: Batch) -> list[FrameRow]:
        """Each row in its own transaction: one row the database refuses costs only itself.

        Rows are retried once with their scalar values made storable; a frame is retried a
        last time with every derived column cleared, so its bytes go in whatever they say.
        """
        b = self.backend
        for row in batch.sessions:
            self._each(lambda c, r: b.insert_sessions(c, [r]), known_columns("sessions", row))
        fresh = {local for local, _ in batch.exchanges}
        for local, fields in batch.exchanges:
            folded = [(x, f) for x, f in batch.exchange_updates if x == local]
            self._each(partial(self._op_new_exchange, local, folded), fields)
        for local, fields in batch.exchange_updates:
            if local not in fresh:
                self._each(partial(self._op_exchange_update, local), fields)
        lost = [r for r in batch.frames if not self._one_frame(r)]
        for sid, (count, last) in batch.session_counts.items():
            counts = {"frame_count": count, "updated_at": last}
            self._each(partial(self._op_session, sid), counts)
        for sid, fields in batch.session_updates.items():
            self._each(partial(self._op_session, sid), fields)
        for finding in batch.findings:
            self._each(lambda c, r: b.insert_findings(c, [r]), finding)
        for sid, gap in batch.gaps.items():
            self._each(partial(self._op_gap, sid, gap), {})
        self.exchange_ids.end(_ended_in(batch))
        return lost

    def _op_new_exchange(
        self, local: int, updates: list[tuple[int, dict[str, Any]]], conn: Any, row: dict[str, Any]
    ) -> None:
        self.exchange_ids.add(self._exchanges(conn, [(local, row)], updates))

    def _op_exchange_update(self, local: int, conn: Any, fields: dict[str, Any]) -> None:
        self._exchanges(conn, [], [(local, fields)])

    def _op_session(self, sid: str, conn: Any, fields: dict[str, Any]) -> None:
        self.backend.update_session(conn, sid, known_columns("sessions", fields))

    def _op_gap(self, sid: str, gap: Gap, conn: Any, _row: dict[str, Any]) -> None:
        self._gap(conn, sid, gap)

    def _each(self, op: Callable[[Any, dict[str, Any]], Any], row: dict[str, Any]) -> bool:
        """``op(conn, row)`` in its own transaction; if refused, once more with storable values."""
        for attempt in (row, {k: storable(v) for k, v in row.items()}):
            try:
                with self.backend.transaction() as conn:
                    op(conn, attempt)
                return True
            except Exception as exc:
                if self.backend.is_transient(exc):
                    raise TransientWriteError(_one_line(exc)) from exc
        return False

    def _one_frame(self, row: FrameRow) -> bool:
        derived = ("method", "msg_id", "error_code", "sse_id", "sse_event")
        fixed = row._replace(**{k: storable(getattr(row, k)) for k in derived})
        bare = row._replace(method=None, msg_id=None, error_code=None, sse_id=None, sse_event=None)
        for attempt in (row, fixed, bare):
            try:
                with self.backend.transaction() as conn:
                    self.backend.insert_frames(conn, [attempt], self.exchange_ids.get)
                return True
            except Exception as exc:
                if self.backend.is_transient(exc):
                    raise TransientWriteError(_one_line(exc)) from exc
        return False


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig or exc)
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------------- SQLite
def sqlite_file(url: str) -> str | None:
    """The file of a plain ``sqlite:///PATH`` URL, or None (other databases, memory, options)."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            if path and path != ":memory:" and "?" not in path:
                return path
    return None


def _at_head(path: str) -> bool:
    """True when the file exists and its schema is current (no migration needed)."""
    if not os.path.exists(path):
        return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == SCHEMA_HEAD


_FRAME_VALUES = f"({', '.join('?' * len(STORED_FRAME_COLS))})"
#: One stored frame row (``STORED_FRAME_COLS``, ``?`` markers): every driver backend's insert.
FRAME_INSERT = f"INSERT INTO frame_rows ({', '.join(STORED_FRAME_COLS)}) VALUES {_FRAME_VALUES}"
#: Frames per multi-row ``INSERT … VALUES (…), (…), …``. ``executemany`` pays sqlite3's
#: per-row statement cycle (bind, step, reset) in Python's driver; one statement of many rows
#: pays it once: measured on the frames table (five indexes), ~2× fewer CPU µs per row at any
#: size from 50 to 1,000 rows. 500 (9,000 variables; the compiled form is cached): SQLite lets
#: go of the GIL for each statement's whole step, so longer steps let the recorder's builder
#: thread run beside the insert with fewer hand-overs.
MULTI_ROWS = 500


def _multi_rows(conn: sqlite3.Connection) -> int:
    """How many frame rows one statement may bind here (old SQLite allows 999 variables)."""
    try:
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    except (AttributeError, sqlite3.Error):  # Python < 3.11: assume the old default
        limit = 999
    return max(1, min(MULTI_ROWS, limit // len(STORED_FRAME_COLS)))


_RAW = STORED_FRAME_COLS.index("raw")
_RAW_OF = itemgetter(FrameRow._fields.index("raw"))


class SqliteBackend:
    """Plain :mod:`sqlite3`: the statements written out, one connection, explicit transactions.

    JSON columns hold ``json.dumps`` text and ``None`` as ``'null'`` — what SQLAlchemy's JSON
    type writes — so readers cannot tell which backend wrote a row.
    """

    def __init__(self, path: str) -> None:
        from mcp_proxy.store.engine import BUSY_TIMEOUT_MS

        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in (
            f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=NORMAL",
            "PRAGMA foreign_keys=ON",
        ):
            self.conn.execute(pragma)
        self._sql: dict[tuple[str, tuple[str, ...]], str] = {}
        self._multi = _multi_rows(self.conn)
        self._multi_sql = (
            f"INSERT INTO frame_rows ({', '.join(STORED_FRAME_COLS)}) VALUES "
            + ", ".join([_FRAME_VALUES] * self._multi)
        )
        #: session id → ``session_keys.key``, learnt from committed transactions only.
        self._keys: dict[str, int] = {}
        #: method name → ``methods.code``, likewise.
        self._methods: dict[str, int] = {}

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            self._forget()
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            self._forget()
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _forget(self) -> None:
        """Keys and codes seen in a rolled-back transaction may not exist: learn them again."""
        self._keys.clear()
        self._methods.clear()

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    @staticmethod
    def _values(table: str, row: dict[str, Any]) -> tuple[tuple[str, ...], list[Any]]:
        js = JSON_COLUMNS[table]
        keys = tuple(row)
        return keys, [_json_text(row[k]) if k in js else row[k] for k in keys]

    def _insert_sql(self, table: str, keys: tuple[str, ...]) -> str:
        sql = self._sql.get((table, keys))
        if sql is None:
            sql = f"INSERT INTO {table} ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})"
            self._sql[(table, keys)] = sql
        return sql

    def _insert_dicts(
        self, conn: sqlite3.Connection, table: str, rows: list[dict[str, Any]]
    ) -> list[int]:
        ids = []
        for row in rows:
            keys, values = self._values(table, row)
            cur = conn.execute(self._insert_sql(table, keys), values)
            ids.append(int(cur.lastrowid or 0))
        return ids

    def _update(
        self, conn: sqlite3.Connection, table: str, key: tuple[str, Any], fields: dict[str, Any]
    ) -> None:
        keys, values = self._values(table, fields)
        sets = ", ".join(f"{k} = ?" for k in keys)
        conn.execute(f"UPDATE {table} SET {sets} WHERE {key[0]} = ?", [*values, key[1]])

    def insert_sessions(self, conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
        self._insert_dicts(conn, "sessions", rows)

    def insert_exchanges(self, conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> list[int]:
        """Rows (any subset of the columns; a missing one is NULL) as tuples, in one statement.

        Each value is read from the row as it is (``get``), not from a copy of it with every
        column filled in first. The batch's transaction holds the write lock, so SQLite
        numbers the rows of one ``executemany`` consecutively after the largest id: the last
        id gives them all.
        """
        dumps, pairs = _json_text, _pairs_text
        values = [
            (  # EXCHANGE_COLUMNS' order (_EXCHANGE_INSERT)
                g("session_id"),
                g("method"),
                g("url"),
                g("status"),
                pairs(g("request_headers")),
                pairs(g("response_headers")),
                g("started_at"),
                g("first_byte_at"),
                g("ended_at"),
                g("outcome"),
                g("error"),
                g("request_size"),
                g("response_size"),
                dumps(g("meta")),
            )
            for g in [r.get for r in rows]
        ]
        if len(values) == 1:
            return [int(conn.execute(_EXCHANGE_INSERT, values[0]).lastrowid or 0)]
        before = conn.total_changes
        conn.executemany(_EXCHANGE_INSERT, values)
        n = len(values)
        if conn.total_changes - before != n:  # never: no trigger or conflict clause on the table
            raise sqlite3.IntegrityError("http_exchanges: not every row was inserted")
        last = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
        return list(range(last - n + 1, last + 1))

    def update_exchange(self, conn: sqlite3.Connection, db_id: int, fields: dict[str, Any]) -> None:
        self._update(conn, "http_exchanges", ("id", db_id), fields)

    def insert_findings(self, conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
        self._insert_dicts(conn, "findings", rows)

    def update_session(self, conn: sqlite3.Connection, sid: str, fields: dict[str, Any]) -> None:
        self._update(conn, "sessions", ("id", sid), fields)

    def add_gap(self, conn: sqlite3.Connection, sid: str, lost: int) -> None:
        conn.execute("UPDATE sessions SET gap_count = gap_count + ? WHERE id = ?", (lost, sid))

    def insert_frames(
        self,
        conn: sqlite3.Connection,
        rows: list[FrameRow],
        exchanges: Callable[[int], int | None],
    ) -> None:
        """Encode and insert ``rows`` one statement's worth at a time.

        Slice by slice, so that only one statement's encoded tuples exist at once (the
        recorder holds two batches of rows — one being built, one being written — and an
        encoded copy of a whole batch was a third of that again).
        """
        keys, methods = self._keys, self._methods
        m = self._multi
        sql, flat = self._multi_sql, chain.from_iterable
        for i in range(0, len(rows), m):
            part = rows[i : i + m]
            stored = encode_known(conn, keys, methods, part, exchanges)
            if max(map(len, map(_RAW_OF, part))) > BIG_BLOB:
                # Rare: row by row, so that row ids stay in the order of the frames.
                for r in stored:
                    if len(r[_RAW]) > BIG_BLOB:
                        insert_big(conn, r)
                    else:
                        conn.execute(FRAME_INSERT, r)
            elif len(stored) == m and m > 1:
                conn.execute(sql, list(flat(stored)))
            elif stored:
                conn.executemany(FRAME_INSERT, stored)

    def session_progress(self, sid: str) -> tuple[bool, int, int, int]:
        conn = self.conn
        row = conn.execute("SELECT gap_count FROM sessions WHERE id = ?", (sid,)).fetchone()
        last, count = conn.execute(
            "SELECT MAX(seq), COUNT(*) FROM frame_rows"
            " WHERE session_key = (SELECT key FROM session_keys WHERE id = ?)",
            (sid,),
        ).fetchone()
        return row is not None, int(last or 0), int(count or 0), int(row[0] or 0) if row else 0


def insert_big(conn: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    """Write one huge frame without SQLite holding extra copies of it.

    Binding a 64 MiB blob makes sqlite3 copy it and SQLite build a record of it: two more
    copies. Inserting a ``zeroblob`` of the right size and then writing the bytes through
    the blob handle keeps memory at the one copy the recorder already holds.
    """
    raw = row[_RAW]
    cur = conn.execute(FRAME_INSERT, (*row[:_RAW], b"", *row[_RAW + 1 :]))
    rowid = cur.lastrowid
    conn.execute("UPDATE frame_rows SET raw = zeroblob(?) WHERE id = ?", (len(raw), rowid))
    view = memoryview(raw)
    with conn.blobopen("frame_rows", "raw", rowid or 0) as blob:
        for i in range(0, len(view), 1 << 20):
            blob.write(view[i : i + (1 << 20)])
