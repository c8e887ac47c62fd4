"""One session's frames as a stream of plain tuples, for the commands that print them all.

``mcptape show`` on a 1,000,000-frame session must print 200,000 frames a second to a pipe
with bounded memory. Row dictionaries from the async API cost more than printing the frame, so
this reader is synchronous, fetches in batches and yields tuples in the fixed order of
:data:`~mcp_proxy.store.columns.FRAME_COLUMNS`: for SQLite straight from the standard library's
driver (``shaped_batches``: ``frame_rows`` as stored), elsewhere from the driver's cursor in
keyset pages (SQLAlchemy, imported only then, opens the connection). Bulk reads of frames take
this one stream, :func:`shaped_pages` (``show``, ``export``, the analysis, a session read into
the model, ``check --injected``); pages and small queries take the async store
(``queries.py``, ``pages.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any

from mcp_proxy.errors import StoreError
from mcp_proxy.limits import SHAPE_CACHE
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.columns import (
    CHANNEL_CODES,
    CHANNEL_NAMES,
    DIRECTION_CODES,
    DIRECTION_NAMES,
    FRAME_COLUMNS,
    KIND_CODES,
    KIND_NAMES,
    keyset_pages,
)

BATCH = 5000


def _connect(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, timeout=engine_mod.BUSY_TIMEOUT_MS / 1000)
        conn.execute("PRAGMA query_only = 1")
    except sqlite3.Error as exc:
        raise StoreError(str(exc)) from exc
    return conn


# ---------------------------------------------------------------------------------- shapes
# A frame's direction, channel, kind and method as ONE integer, its *shape*: sqlite3 hands each
# selected value to Python separately (~0.17 s per column per million rows on the benchmark
# machine), and decoding three codes with ``CASE`` and joining the method names in SQL cost as
# much again. A session has a few dozen shapes; the readers that touch every frame (``show``,
# ``stats``) look each one up in a small table and precompute what they print or test per shape.

#: ``shape = direction + channel * _CH + kind * _KI + (method_code + 1) * _ME`` (0: no method);
#: a code outside 0..254 is stored as 255, which no name has (NULL, as the view's CASE gives).
_CH, _KI, _ME = 1 << 8, 1 << 16, 1 << 24


def _bounded(column: str) -> str:
    return f"(CASE WHEN {column} BETWEEN 0 AND 254 THEN {column} ELSE 255 END)"


SHAPE_SQL = (
    f"{_bounded('direction')} + {_bounded('channel')} * {_CH} + {_bounded('kind')} * {_KI}"
    f" + COALESCE(method_code + 1, 0) * {_ME}"
)
#: The same on PostgreSQL, whose integers are 32 bits unless told (a method code past 126
#: times ``_ME`` would overflow).
SHAPE_SQL_BIGINT = SHAPE_SQL.replace(
    "COALESCE(method_code + 1, 0)", "CAST(COALESCE(method_code + 1, 0) AS BIGINT)"
)


class Shapes:
    """Decodes a shape into ``(direction, channel, kind, method)``, the view's strings."""

    def __init__(self, methods: dict[int, str]) -> None:
        self.methods = methods
        self.cache: dict[int, tuple[str | None, str | None, str | None, str | None]] = {}

    def __call__(self, shape: int) -> tuple[str | None, str | None, str | None, str | None]:
        found = self.cache.get(shape)
        if found is None:
            if len(self.cache) >= SHAPE_CACHE:
                self.cache.clear()
            m = shape // _ME
            found = self.cache[shape] = (
                DIRECTION_NAMES.get(shape % _CH),
                CHANNEL_NAMES.get(shape // _CH % (_KI // _CH)),
                KIND_NAMES.get(shape // _KI % (_ME // _KI)),
                self.methods.get(m - 1) if m else None,
            )
        return found


class RowShapes:
    """Frames held as mappings (a recording's, the dashboard's, a test's) as the rows
    :func:`shaped_pages` gives: the same columns, with direction, channel, kind and method as
    one integer that calling this object decodes, as :class:`Shapes` decodes stored ones — so
    the analysis and the renderer have one row shape, whichever store the frames come from.

    The integers number this object's own table of the four strings as given (a frame may carry
    names no stored code has), never twice: the table holds at most :data:`SHAPE_CACHE` shapes
    past the rows of one :meth:`rows` call, then starts over (rows made before are not decoded
    after), so a cache keyed by shape (the renderer's) never sees one integer name two shapes.
    """

    __slots__ = ("codes", "made", "table")

    def __init__(self) -> None:
        self.codes: dict[tuple[Any, Any, Any, Any], int] = {}
        self.table: dict[int, tuple[Any, Any, Any, Any]] = {}
        self.made = 0

    def __call__(self, shape: int) -> tuple[Any, Any, Any, Any]:
        return self.table[shape]

    def rows(self, frames: Iterable[Any], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
        """``frames`` (mappings, named rows, or tuples in :data:`FRAME_COLUMNS` order) as rows of
        ``columns`` (:func:`shaped_pages`' specs but :data:`RAW_READ`)."""
        _stored_columns(columns)
        if len(self.table) >= SHAPE_CACHE:
            self.codes.clear()
            self.table.clear()
        codes, table = self.codes, self.table
        picks = [_pick(c) for c in columns]
        # The usual frame has every column: its values in one C call, the shape put in place.
        plain = [c for c in columns if c not in _SPECS]
        at = [(i, c) for i, c in enumerate(columns) if c in _SPECS]
        values = itemgetter(*plain, *_NAMED) if plain else itemgetter(*_NAMED)
        n = len(plain)
        # One spec (the decoder's SHAPE_FLAGS, the renderer's shape): put in by slicing.
        one = at[0][0] if len(at) == 1 else -1
        out: list[tuple[Any, ...]] = []
        for frame in frames:
            f = frame if type(frame) is dict else _as_mapping(frame)
            try:
                got = values(f)
            except KeyError:  # a partial frame (a hand-written one): column by column
                got = None
                names = (f["direction"], f["channel"], f["kind"], f.get("method"))
            else:
                names = got[n : n + 4]
            shape = codes.get(names)
            if shape is None:
                shape = codes[names] = self.made
                table[shape] = names
                self.made += 1
            if got is None:
                out.append(tuple(pick(f, shape) for pick in picks))
            elif one >= 0:
                out.append((*got[:one], _spec(at[0][1], shape, got[n + 4], got[n + 5]),
                            *got[one:n]))  # fmt: skip
            else:
                row = list(got[:n])
                for i, c in at:
                    row.insert(i, _spec(c, shape, got[n + 4], got[n + 5]))
                out.append(tuple(row))
        return out


#: What :meth:`RowShapes.rows` reads of every frame besides the plain columns asked for.
_NAMED = ("direction", "channel", "kind", "method", "complete", "partial_parse")


def _spec(column: str, shape: int, complete: Any, partial: Any) -> Any:
    if column == SHAPE_FLAGS:
        flags = (0 if complete is None or complete else 1) + (2 if partial else 0)
        return shape + flags * _FLAGS_AT
    return shape if column == "shape" else None


def _as_mapping(frame: Any) -> Mapping[str, Any]:
    if isinstance(frame, Mapping):
        return frame
    fields = getattr(frame, "_fields", None)
    return dict(zip(FRAME_COLUMNS if fields is None else fields, frame, strict=True))


def _pick(column: str) -> Callable[[Mapping[str, Any], int], Any]:
    """How :meth:`RowShapes.rows` reads ``column`` of a frame given its shape."""
    if column == "shape":
        return lambda f, shape: shape
    if column == SHAPE_FLAGS:
        return lambda f, shape: shape + _flags(f) * _FLAGS_AT
    if column == NULL:
        return lambda f, shape: None
    if column == RAW_READ:
        raise ValueError("RAW_READ is a database's saving; in memory, read raw")
    if column == "complete":
        return lambda f, shape: f.get("complete", True)
    if column in ("seq", "ts"):
        return lambda f, shape: f[column]
    return lambda f, shape: f.get(column)


def _flags(f: Mapping[str, Any]) -> int:
    """A frame's ``complete`` and ``partial_parse`` as :data:`_FLAGS_SQL` computes them."""
    complete = f.get("complete", True)
    return (0 if complete is None or complete else 1) + (2 if f.get("partial_parse") else 0)


#: Column specs beside the stored names (what the handshake pass reads, :data:`FACTS_COLUMNS`):
#: a ``NULL`` in a column's place (sqlite3 hands ``None`` over for nothing), and ``raw`` only for
#: the frames whose body an outcome or the handshake depends on (``None`` for the rest).
NULL = "null"
RAW_READ = "raw_read"
#: A column spec: the shape with ``complete`` and ``partial_parse`` in its high bits
#: (:func:`split_flags`), two columns fewer per row for the analysis (``Decoder.feed``).
#: Every column costs each row more than its value: CPython's sqlite3 releases and takes back
#: the GIL around each column's type look-up (``_pysqlite_fetch_one_row``, 3.12), ~600
#: instructions a column (callgrind, issue 24); a session has a few such values per shape.
SHAPE_FLAGS = "shape_flags"
_FLAGS_AT = 1 << 40  # above the shape's bits (< 2**32)
_FLAGS_SQL = (
    "(CASE WHEN complete IS NULL OR complete THEN 0 ELSE 1 END"
    " + CASE WHEN partial_parse THEN 2 ELSE 0 END)"
)


#: The column specs that are not stored columns (what :meth:`RowShapes.rows` makes itself).
_SPECS = frozenset({"shape", SHAPE_FLAGS, NULL})


def split_flags(value: int) -> tuple[int, bool, bool]:
    """A :data:`SHAPE_FLAGS` value as ``(shape, complete, partial)``: the frame's ``complete``
    as the analysis reads it (NULL counts as complete) and its ``partial_parse``."""
    flags = value // _FLAGS_AT
    return value % _FLAGS_AT, not flags & 1, bool(flags & 2)


#: The kinds whose bodies an exchange's outcome depends on (request, response, error, batch),
#: plus the ``inject`` channel (the decoder keeps injected frames aside whatever their kind),
#: notifications/cancelled and a task's status notifications (a task's end, hence its duration,
#: may come by one; ``analysis/tasks.py``) — their method codes are the database's, looked up
#: when the statement is written.
_READ_KINDS = tuple(KIND_CODES[k] for k in ("request", "response", "error", "batch"))
_INJECT_CHANNEL = CHANNEL_CODES["inject"]
_READ_METHODS = ("notifications/cancelled", "notifications/tasks/status", "notifications/tasks")

#: The handshake pass of ``check`` (``analysis.facts.FactsBuilder``): the positions of
#: ``analysis.facts.DECODER_COLUMNS`` (what ``Decoder.feed`` unpacks) with ``size``
#: left in the database and ``raw`` fetched only where a body may be read
#: (:data:`RAW_READ`: the frames whose body it reads, requests and their answers, are among
#: them).
FACTS_COLUMNS: tuple[str, ...] = (
    "seq", "ts", "mono_ns", SHAPE_FLAGS, "msg_id", "error_code", NULL, RAW_READ,
    "http_exchange_id", "sse_event",
)  # fmt: skip


#: A row filter of :func:`shaped_pages`: the frames the handshake pass reads
#: (``analysis.facts.FactsBuilder.feed``): batches, notifications/initialized, the HTTP and SSE
#: channels' frames, the ``initialize`` and ``server/discover`` requests and the answers bearing
#: their ids (every answer after the session's first batch, whose elements may be such
#: requests), plus the session's first and last frame (whose ``ts`` are the session's span).
#: Every other frame stays in the database: a busy session's tool calls, their answers and its
#: notifications are nearly all of it, and the handshake is a few frames. The first request
#: carrying the 2026-07-28 envelope is looked for apart (:data:`REQUEST_ROWS`).
FACTS_ROWS = "facts"
#: A row filter of :func:`shaped_pages`: the host's requests, which the handshake pass reads in
#: order only until the first that carries the envelope
#: (``analysis.facts.FactsBuilder.envelope``).
REQUEST_ROWS = "requests"
_ROW_FILTERS = (FACTS_ROWS, REQUEST_ROWS)
_FACT_CHANNELS = (CHANNEL_CODES["http"], CHANNEL_CODES["sse"])
_HANDSHAKE_METHODS = ("notifications/initialized", "initialize", "server/discover")
_ANSWERED_METHODS = ("initialize", "server/discover")


def _codes(methods: dict[int, str], names: tuple[str, ...]) -> str:
    """The method codes of ``names`` as an SQL list ("" when the session's database has none)."""
    return ", ".join(str(code) for code in sorted(int(c) for c, n in methods.items() if n in names))


def _row_filter(
    rows: str | None, methods: dict[int, str], key: str, *, every_answer: bool = False
) -> str:
    """`` AND (…)`` for a row filter (``key``: how the statement binds the session key);
    ``every_answer``: :data:`FACTS_ROWS` with every answer (read after a batch)."""
    if rows is None:
        return ""
    if rows not in _ROW_FILTERS:
        raise ValueError(f"not a row filter: {rows!r}")
    k = KIND_CODES
    if rows == REQUEST_ROWS:
        return f" AND kind = {k['request']} AND direction = {DIRECTION_CODES['c2s']}"
    mine = f"FROM frame_rows WHERE session_key = {key}"
    answers = f"kind IN ({k['response']}, {k['error']})"
    answered = _codes(methods, _ANSWERED_METHODS)
    if answered and not every_answer:
        answers += (
            f" AND msg_id IN (SELECT msg_id {mine} AND kind = {k['request']}"
            f" AND method_code IN ({answered}))"
        )
    cond = f"kind = {k['batch']} OR channel IN ({', '.join(map(str, _FACT_CHANNELS))})"
    if answered or every_answer:
        cond += f" OR ({answers})"
    codes = _codes(methods, _HANDSHAKE_METHODS)
    if codes:
        cond += f" OR method_code IN ({codes})"
    for end in ("MIN", "MAX"):
        cond += f" OR seq = (SELECT {end}(seq) {mine})"
    return f" AND ({cond})"


def _stored_columns(columns: tuple[str, ...]) -> None:
    bad = (
        set(columns)
        - (set(FRAME_COLUMNS) - {"direction", "channel", "kind", "method"})
        - {"shape", SHAPE_FLAGS, NULL, RAW_READ}
    )
    if bad:
        raise ValueError(f"not stored frame columns: {sorted(bad)}")


def _select_list(columns: tuple[str, ...], shape_sql: str, methods: dict[int, str]) -> str:
    """The SELECT list of ``columns`` (stored names and the specs above) on ``frame_rows``."""
    read_methods = sorted(int(code) for code, name in methods.items() if name in _READ_METHODS)
    read = f"kind IN ({', '.join(map(str, _READ_KINDS))}) OR channel = {_INJECT_CHANNEL}"
    if read_methods:
        read += f" OR method_code IN ({', '.join(map(str, read_methods))})"
    special = {
        "shape": shape_sql,
        SHAPE_FLAGS: f"{shape_sql} + {_FLAGS_SQL} * {_FLAGS_AT}",
        NULL: "NULL",
        RAW_READ: f"CASE WHEN {read} THEN raw END",
    }
    return ", ".join(special.get(c, c) for c in columns)


def shaped_pages(
    url: str,
    session_id: str,
    columns: tuple[str, ...],
    *,
    batch: int = BATCH,
    rows: str | None = None,
) -> tuple[Shapes, Iterator[list[tuple[Any, ...]]]]:
    """A session's rows of ``columns`` in ``seq`` order, read from ``frame_rows`` as stored:
    names of :data:`FRAME_COLUMNS` other than direction/channel/kind/method, ``"shape"``
    (those four as one integer, decoded by the returned :class:`Shapes`), :data:`SHAPE_FLAGS`,
    :data:`NULL` and :data:`RAW_READ` (:data:`FACTS_COLUMNS`); only the rows of a filter when ``rows`` names
    one (:data:`FACTS_ROWS`, :data:`REQUEST_ROWS`). On SQLite :func:`shaped_batches`; elsewhere keyset pages from the
    driver's cursor. What ``show`` and ``export`` read."""
    _stored_columns(columns)
    path = engine_mod.sqlite_path(url)
    if path is not None:
        return shaped_batches(str(path), session_id, columns, batch=batch, rows=rows)
    import sqlalchemy as sa

    engine = engine_mod.sync_engine(url)
    try:
        with engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cursor.execute("SELECT key FROM session_keys WHERE id = %s", (session_id,))
            found = cursor.fetchone()
            cursor.execute("SELECT code, name FROM methods")
            methods = {int(code): str(name) for code, name in cursor.fetchall()}
            cursor.close()
    except (sa.exc.DBAPIError, engine.dialect.loaded_dbapi.Error) as exc:
        engine.dispose()
        raise StoreError(engine_mod.error_line(exc)) from exc
    if found is None:
        engine.dispose()
        return Shapes(methods), iter(())
    wanted = columns if "seq" in columns else (*columns, "seq")
    cols = _select_list(wanted, SHAPE_SQL_BIGINT, methods)
    key = int(found[0])
    sqls = [
        f"SELECT {cols} FROM frame_rows WHERE session_key = %s AND seq > %s"
        f"{_row_filter(rows, methods, str(key), every_answer=every)}"
        f" ORDER BY seq LIMIT {int(batch)}"
        for every in ((False, True) if rows == FACTS_ROWS else (False,))
    ]
    pages = _keyset(engine, sqls, key, batch, wanted.index("seq"), _positions(wanted, rows))
    extra = len(wanted) > len(columns)
    return Shapes(methods), ([r[:-1] for r in rows] for rows in pages) if extra else pages


def _positions(columns: tuple[str, ...], rows: str | None) -> tuple[int, int]:
    """Where ``seq`` and ``shape`` are among ``columns`` (a :data:`FACTS_ROWS` read needs
    both: its reader switches statements at the first batch, :func:`_then_every_answer`)."""
    if rows != FACTS_ROWS:
        return -1, -1  # (one statement: nothing to look for)
    shape = "shape" if "shape" in columns else SHAPE_FLAGS  # (the kind is in the low bits)
    if not {"seq", shape} <= set(columns):
        raise ValueError("a read of FACTS_ROWS needs the seq and shape columns")
    return columns.index("seq"), columns.index(shape)


_BATCH = KIND_CODES["batch"]


def _then_every_answer(
    pages: Callable[[str, int], Iterator[list[tuple[Any, ...]]]],
    sqls: list[str],
    at: tuple[int, int],
) -> Iterator[list[tuple[Any, ...]]]:
    """The pages of ``sqls[0]`` (``pages(sql, after)``: rows past seq ``after``); with a second
    statement (:data:`FACTS_ROWS` with every answer), the rows after the first batch come from
    it: a batch's elements may be ``initialize`` or ``server/discover`` requests, whose ids no
    stored request row bears, so every later answer is read (a session with no batch — nearly
    every one — is read by the narrow statement alone, in one scan)."""
    seq_at, shape_at = at
    first = pages(sqls[0], -1)
    try:
        for rows in first:
            if len(sqls) > 1:
                for i, row in enumerate(rows):
                    if row[shape_at] // _KI % (_ME // _KI) == _BATCH:
                        yield rows[: i + 1]
                        yield from pages(sqls[1], row[seq_at])
                        return
            yield rows
    finally:
        close = getattr(first, "close", None)
        if close is not None:
            close()


def _keyset(
    engine: Any, sqls: list[str], key: int, batch: int, seq_at: int, at: tuple[int, int]
) -> Iterator[list[tuple[Any, ...]]]:
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()

            def pages(sql: str, after: int) -> Iterator[list[tuple[Any, ...]]]:
                return keyset_pages(
                    cursor, sql, lambda after: (key, after), batch, key_at=seq_at, after=after
                )

            try:
                yield from _then_every_answer(pages, sqls, at)
            finally:
                cursor.close()
    except (sa.exc.DBAPIError, engine.dialect.loaded_dbapi.Error) as exc:
        raise StoreError(engine_mod.error_line(exc)) from exc
    finally:
        engine.dispose()


def shaped_batches(
    path: str,
    session_id: str,
    columns: tuple[str, ...],
    *,
    batch: int = BATCH,
    rows: str | None = None,
) -> tuple[Shapes, Iterator[list[tuple[Any, ...]]]]:
    """:func:`shaped_pages` of a SQLite file, with the standard library's driver alone.

    The session key and the method names are read first (an unknown session has no rows);
    the batches then stream.
    """
    _stored_columns(columns)
    conn = _connect(path)
    try:
        found = conn.execute("SELECT key FROM session_keys WHERE id = ?", (session_id,)).fetchone()
        methods = {int(code): name for code, name in conn.execute("SELECT code, name FROM methods")}
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(str(exc)) from exc
    if found is None:
        conn.close()
        return Shapes(methods), iter(())
    cols = _select_list(columns, SHAPE_SQL, methods)
    key = int(found[0])
    sqls = [
        f"SELECT {cols} FROM frame_rows WHERE session_key = ? AND seq > ?"
        f"{_row_filter(rows, methods, str(key), every_answer=every)} ORDER BY seq"
        for every in ((False, True) if rows == FACTS_ROWS else (False,))
    ]
    return Shapes(methods), _fetch(conn, sqls, key, batch, _positions(columns, rows))


def _fetch(
    conn: sqlite3.Connection, sqls: list[str], key: int, batch: int, at: tuple[int, int]
) -> Iterator[list[tuple[Any, ...]]]:
    def pages(sql: str, after: int) -> Iterator[list[tuple[Any, ...]]]:
        cur = conn.execute(sql, (key, after))
        try:
            while rows := cur.fetchmany(batch):
                yield rows
        finally:
            cur.close()

    try:
        yield from _then_every_answer(pages, sqls, at)
    except sqlite3.Error as exc:
        raise StoreError(str(exc)) from exc
    finally:
        conn.close()


#: :data:`FRAME_COLUMNS` as :func:`shaped_pages` reads them: direction, channel, kind and method
#: as the one ``shape``, which the returned :class:`Shapes` decodes (what the readers that carry
#: frames by name ask for: a session read into the model, ``check --injected``).
SHAPED_FRAME_COLUMNS: tuple[str, ...] = (*FRAME_COLUMNS[:3], "shape", *FRAME_COLUMNS[7:])


def named_rows(
    shapes: Callable[[int], tuple[Any, Any, Any, Any]], rows: Iterable[Sequence[Any]]
) -> list[tuple[Any, ...]]:
    """Rows of :data:`SHAPED_FRAME_COLUMNS` as tuples of :data:`FRAME_COLUMNS`, the shape
    decoded by ``shapes`` (what :func:`shaped_pages` returned beside them) into the view's
    strings: the one way back from the stored row to the named columns."""
    return [(*r[:3], *shapes(r[3]), *r[4:]) for r in rows]
