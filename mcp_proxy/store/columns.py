"""The one list of a frame's columns as readers and bulk writers carry them in row tuples.

``show`` (:mod:`mcp_proxy.store.stream`), the analysis
(:mod:`mcp_proxy.analysis.facts`), ``export`` and ``import`` (:mod:`mcp_proxy.store.recordings`)
all move frames as plain tuples in this order: one definition, so that a new column is added
once and no reader unpacks a tuple in an order another module changed. Plain Python (no
SQLAlchemy), so that the analysis and the renderers can import it cheaply.

Not in the list: the database's own ``id`` and ``session_id`` (a reader asks for one session;
an import supplies the new key), and ``redacted`` (a mark the recorder writes, not part of a
frame's content).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

FRAME_COLUMNS: tuple[str, ...] = (
    "seq",
    "ts",
    "mono_ns",
    "direction",
    "channel",
    "kind",
    "method",
    "msg_id",
    "error_code",
    "size",
    "complete",
    "partial_parse",
    "raw",
    "http_exchange_id",
    "sse_id",
    "sse_event",
)

#: Positions in :data:`FRAME_COLUMNS`, for readers that pick single fields out of a row tuple.
SEQ, TS, MONO_NS, DIRECTION, CHANNEL, KIND, METHOD, MSG_ID, ERROR_CODE, SIZE = range(10)
COMPLETE, PARTIAL_PARSE, RAW, HTTP_EXCHANGE_ID, SSE_ID, SSE_EVENT = range(10, 16)


# ---------------------------------------------------------------------------------------------
# Schema v2 (revision 0004): how a frame is stored. The table ``frame_rows`` holds the session's
# integer ``key`` (``sessions.key``) instead of its 32-character id, and small integer codes
# instead of the direction/channel/kind strings; the view ``frames`` decodes both, so readers
# and ad hoc SQL see the rows of revision 0003. The codes are fixed forever (they are data on
# disk): new values get new numbers, none is ever reused.

DIRECTION_CODES: dict[str, int] = {"c2s": 0, "s2c": 1}
CHANNEL_CODES: dict[str, int] = {"stdio": 0, "http": 1, "sse": 2, "stderr": 3, "inject": 4}
KIND_CODES: dict[str, int] = {
    "request": 0,
    "response": 1,
    "notification": 2,
    "error": 3,
    "batch": 4,
    "invalid": 5,
    "noise": 6,
    "stderr": 7,
    "empty": 8,
    "undecodable": 9,
}
DIRECTION_NAMES: dict[int, str] = {v: k for k, v in DIRECTION_CODES.items()}
CHANNEL_NAMES: dict[int, str] = {v: k for k, v in CHANNEL_CODES.items()}
KIND_NAMES: dict[int, str] = {v: k for k, v in KIND_CODES.items()}

#: The answers to a session's first ``:limit`` requests of ``:method`` (``tools/list``), in
#: request order, one row each — ``seq``, ``kind`` and ``size`` of the first response or error
#: the other side sent with the request's id after it — for ``stats``'s context cost (through
#: the driver, ``store/direct.py``) and the dashboard's (through the async store): one query for
#: both. Served by ``ix_frames_session_method`` and ``ix_frames_session_msgid``.
ANSWERS_SQL = (
    "SELECT f.seq AS seq, f.kind AS kind, f.size AS size FROM ("
    " SELECT a.seq AS asked, (SELECT min(+g.seq) FROM frame_rows g"
    "  WHERE g.session_key = a.session_key AND g.msg_id = a.msg_id AND g.msg_id IS NOT NULL"
    f"  AND g.direction <> a.direction AND g.kind IN ({KIND_CODES['response']},"
    f" {KIND_CODES['error']}) AND +g.seq > a.seq) AS answer"
    " FROM (SELECT session_key, seq, direction, msg_id FROM frame_rows"
    "  WHERE session_key = (SELECT key FROM session_keys WHERE id = :sid)"
    "  AND method_code = (SELECT code FROM methods WHERE name = :method)"
    f"  AND method_code IS NOT NULL AND kind = {KIND_CODES['request']}"
    "  ORDER BY +seq LIMIT :limit) AS a"
    ") AS p JOIN frame_rows f"
    " ON f.session_key = (SELECT key FROM session_keys WHERE id = :sid) AND f.seq = p.answer"
    " ORDER BY p.asked"
)
#: (The unary ``+`` on ``seq`` and the ``IS NOT NULL`` terms keep SQLite on the two partial
#: indexes: on ``seq`` it would walk the session's ``(session_key, seq)`` index instead — a
#: million-frame session's every row for a lookup of a few.)


def responses_only(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of :data:`ANSWERS_SQL` that are responses (an error answers nothing to count),
    with ``kind`` by name."""
    response = KIND_CODES["response"]
    return [{**r, "kind": "response"} for r in rows if r["kind"] == response]


#: The physical frame columns after ``session_key``, in the order writers bind them: the
#: recorder's ``FrameRow`` fields after ``session_id``, with the three strings as codes.
STORED_FRAME_COLS: tuple[str, ...] = (
    "session_key", "seq", "ts", "mono_ns", "direction", "channel", "kind", "method_code", "msg_id",
    "error_code", "size", "complete", "partial_parse", "raw", "http_exchange_id", "sse_id",
    "sse_event", "redacted",
)  # fmt: skip


def encode_case_sql(column: str, codes: dict[str, int]) -> str:
    """``CASE column WHEN 'c2s' THEN 0 … END``: a string encoded in SQL (triggers, migration)."""
    whens = " ".join(f"WHEN '{name}' THEN {code}" for name, code in codes.items())
    return f"CASE {column} {whens} END"


def encode_frames(
    keys: dict[str, int],
    methods: dict[str, int],
    rows: list[Any],
    exchanges: Callable[[int], int | None],
) -> list[tuple[Any, ...]]:
    """The recorder's ``FrameRow`` tuples as ``STORED_FRAME_COLS`` tuples.

    ``keys`` maps each session id to its ``session_keys.key``, ``methods`` each method name to
    its ``methods.code`` (``None`` stays ``None``). A value outside them raises ``KeyError``
    (the writers look the missing ones up first; the classifier makes only the codes above).
    ``exchanges`` maps a producer's local HTTP exchange id to the database's (None: the
    exchange never made it in); a frame without one stays without.
    """
    d, c, k, m, hx = DIRECTION_CODES, CHANNEL_CODES, KIND_CODES, methods, exchanges
    try:
        # Unpacking into names is the cheapest way through a row in CPython (~0.65 µs a row,
        # against ~0.9 for indexing and a slice): this runs once per recorded frame.
        return [
            (keys[s], q, t, mo, d[di], c[ch], k[ki], None if me is None else m[me], i, e, n,
             co, pp, raw, None if x is None else hx(x), si, se, rd)
            for s, q, t, mo, di, ch, ki, me, i, e, n, co, pp, raw, x, si, se, rd in rows
        ]  # fmt: skip
    except ValueError:  # a row of another length (a caller's extra column): the general form
        return [
            (
                keys[r[0]], r[1], r[2], r[3], d[r[4]], c[r[5]], k[r[6]],
                None if r[7] is None else m[r[7]], *r[8:14],
                None if r[14] is None else hx(r[14]), *r[15:],
            )
            for r in rows
        ]  # fmt: skip


def missing(
    keys: dict[str, int], methods: dict[str, int], rows: list[Any]
) -> tuple[set[str], set[str]]:
    """The session ids and method names of ``rows`` not yet in ``keys`` / ``methods``."""
    sids = {r[0] for r in rows if r[0] not in keys}
    names = {r[7] for r in rows if r[7] is not None and r[7] not in methods}
    return sids, names


__all__ = ["FRAME_COLUMNS", "STORED_FRAME_COLS", "encode_frames"]


def keyset_pages(
    cursor: Any,
    sql: str,
    params: Callable[[int], Sequence[Any]],
    page: int,
    *,
    key_at: int = 0,
    after: int = -1,
) -> Iterator[list[Any]]:
    """Rows of ``sql`` a page at a time through a DBAPI ``cursor``, by keyset.

    ``sql`` selects rows with a key above the one ``params(after)`` binds, in key order, at most
    ``page`` of them; the next page starts after the key (column ``key_at``) of the last row.
    Memory stays one page whatever the session's size, and a page costs one statement —
    the frame readers of export and ``db copy`` page this way.
    """
    while True:
        cursor.execute(sql, params(after))
        rows = cursor.fetchall()
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = rows[-1][key_at]
