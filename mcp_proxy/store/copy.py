"""``mcptape db copy SRC DST``: move recordings between stores (SQLite ⇄ PostgreSQL).

What is kept: every session row as it is (its id too — that is what links a replay to its
original through ``meta.replay_of``), its frames byte for byte with their sequence numbers, its
HTTP exchanges (with the frames pointing at them: exchange ids are the destination's own and are
mapped), its findings, its stored statistics (``session_stats``) and its annotations.

Idempotent, per session (a session is written whole in one transaction of the destination; small
sessions share one, a big one has its own):

- a session the destination lacks is copied whole;
- a session the destination has with the same traffic (frame count, gap count, status, end) is
  left alone, except that annotations the source has and the destination lacks are added — so a
  note written in the team's dashboard survives a second ``db copy`` from a laptop;
- a session whose traffic differs (copied while it was still recording) has its traffic
  replaced — frames, exchanges, findings, stored statistics, the session row — and its
  annotations merged.

Running it twice copies nothing the second time. The destination is created (migrated) if it is
empty; both sides must be at this mcptape's schema. Through the driver on both sides
(``engine.Driver``: ``sqlite3``, psycopg): the columns are ``store/rows.py``'s lists (a test holds
them to the schema), a JSON column is decoded and written again as ``sa.JSON`` wrote it (SQL
NULL stays NULL, a JSON ``null`` stays ``null``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from mcp_proxy.errors import StoreError, UserError
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.codes import resolve
from mcp_proxy.store.columns import STORED_FRAME_COLS, keyset_pages
from mcp_proxy.store.engine import Driver
from mcp_proxy.store.rows import (
    EXCHANGE_COLUMNS,
    FINDING_COLUMNS,
    JSON_COLUMNS,
    SESSION_COLUMNS,
    SESSION_STATS_COLUMNS,
)
from mcp_proxy.store.writer import FRAME_INSERT

#: Frames read and written per round trip.
CHUNK = 10_000
#: Small sessions share a destination transaction up to about this many frames: a commit per
#: session would cost 10,000 commits (each a disk flush on a durable server) for 10,000 sessions.
GROUP_FRAMES = 20_000
#: What decides that a session's traffic is already in the destination.
TRAFFIC_KEYS = ("frame_count", "gap_count", "status", "ended_at")
#: An annotation is the same one when all of these agree.
ANNOTATION_KEYS = ("frame_seq", "tag", "note", "created_at")
#: The columns of ``annotations`` but its id (a test holds them to the schema).
ANNOTATION_COLUMNS = ("session_id", "frame_seq", "tag", "note", "created_at", "updated_at")
#: Each copied table's columns, ``id`` first where the source's id is read.
_COLUMNS = {
    "sessions": SESSION_COLUMNS,
    "http_exchanges": ("id", *EXCHANGE_COLUMNS),
    "findings": FINDING_COLUMNS,
    "session_stats": SESSION_STATS_COLUMNS,
    "annotations": ANNOTATION_COLUMNS,
}


@dataclass
class CopyResult:
    """What one ``db copy`` did (printed by the command, checked by the tests)."""

    copied: int = 0  # sessions new to the destination
    replaced: int = 0  # sessions whose traffic was replaced
    unchanged: int = 0  # sessions already there
    frames: int = 0
    exchanges: int = 0
    findings: int = 0
    annotations: int = 0
    session_ids: list[str] = field(default_factory=list)


@dataclass
class _Side:
    """One database of the copy: its driver and the DBAPI connection the copy holds."""

    db: Driver
    conn: Any

    def run(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.conn.execute(self.db.sql(sql), tuple(args))

    def read(self, table: str, sid: str, order: str) -> list[dict[str, Any]]:
        """The session's rows of ``table`` as dicts, a JSON column as its text (None: SQL NULL,
        told apart from a JSON ``null``, which :meth:`insert` writes back as it was)."""
        cols = _COLUMNS[table]
        js = JSON_COLUMNS.get(table, frozenset())
        cast = "CAST({0} AS TEXT) AS {0}" if self.db.pg else "{0}"
        listed = ", ".join(cast.format(c) if c in js else c for c in cols)
        key = "id" if table == "sessions" else "session_id"
        cur = self.run(f"SELECT {listed} FROM {table} WHERE {key} = ? ORDER BY {order}", (sid,))
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def values(self, table: str, cols: Sequence[str], row: dict[str, Any]) -> tuple[Any, ...]:
        """``row`` for an insert here: a JSON column's text decoded and written as ``sa.JSON``
        writes a value (``json.dumps`` text, psycopg's ``Json``), SQL NULL as NULL."""
        js, json_in = JSON_COLUMNS.get(table, frozenset()), self.db.json_in
        return tuple(
            json_in(json.loads(row[c])) if c in js and row[c] is not None else row[c] for c in cols
        )

    def insert_sql(self, table: str, cols: Sequence[str]) -> str:
        marks = ", ".join("?" * len(cols))
        return self.db.sql(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})")

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        cols = [c for c in _COLUMNS[table] if c != "id"]
        if rows:
            cur = self.conn.cursor()
            try:
                cur.executemany(
                    self.insert_sql(table, cols), [self.values(table, cols, r) for r in rows]
                )
            finally:
                cur.close()


def _same_database(a: str, b: str) -> bool:
    ua, ub = sa.engine.make_url(a), sa.engine.make_url(b)
    if ua.get_backend_name() != ub.get_backend_name():
        return False
    if ua.get_backend_name() == "sqlite":
        pa, pb = engine_mod.sqlite_path(a), engine_mod.sqlite_path(b)
        return pa is not None and pb is not None and pa.resolve() == pb.resolve()
    return (ua.host, ua.port, ua.database, ua.query.get("host")) == (
        ub.host,
        ub.port,
        ub.database,
        ub.query.get("host"),
    )


def copy_store(
    src_url: str,
    dst_url: str,
    *,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CopyResult:
    """Copy every session of ``src_url`` (or the ids in ``only``) into ``dst_url``."""
    if _same_database(src_url, dst_url):
        raise UserError("the source and the destination are the same database")
    if engine_mod.sqlite_path(src_url) is not None:
        path = engine_mod.sqlite_path(src_url)
        if path is not None and not path.exists():
            raise UserError(f"no database at {path}")
    engine_mod.ensure_schema(src_url)
    engine_mod.ensure_schema(dst_url)
    src = Driver(src_url)
    dst = Driver(dst_url)
    result = CopyResult()
    try:
        with src.connection() as sconn, dst.connection() as dconn:
            s, d = _Side(src, sconn), _Side(dst, dconn)
            ids = _source_ids(s, only)
            sconn.rollback()  # (a read: nothing to keep)
            existing = _destination_sessions(d, ids)
            group = 0  # frames written in the open destination transaction
            codes = _Codes()
            for i, sid in enumerate(ids, 1):
                rows = s.read("sessions", sid, "id")  # one read transaction per session
                group += _copy_session(s, d, rows[0], existing.get(sid), result, codes) + 1
                sconn.rollback()
                if group >= GROUP_FRAMES:
                    dconn.commit()
                    group = 0
                result.session_ids.append(sid)
                if progress is not None:
                    progress(f"{i}/{len(ids)} {sid[:12]}")
            dconn.commit()
    except (src.error, dst.error) as exc:
        raise StoreError(engine_mod.error_line(exc)) from exc
    finally:
        src.close()
        dst.close()
    return result


def _source_ids(s: _Side, only: Sequence[str] | None) -> list[str]:
    ids = [r[0] for r in s.run("SELECT id FROM sessions ORDER BY started_at, id").fetchall()]
    if only is None:
        return ids
    have = set(ids)
    missing = [x for x in only if x not in have]
    if missing:
        raise UserError(f"no session {missing[0]!r} in the source database")
    wanted = set(only)
    return [x for x in ids if x in wanted]


def _destination_sessions(d: _Side, ids: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    cols = ("id", *TRAFFIC_KEYS)
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        sql = f"SELECT {', '.join(cols)} FROM sessions WHERE id IN ({', '.join('?' * len(part))})"
        for r in d.run(sql, part).fetchall():
            out[r[0]] = dict(zip(cols, r, strict=True))
    d.conn.commit()  # (a read, before the writes' transaction)
    return out


def _copy_session(
    s: _Side,
    d: _Side,
    row: dict[str, Any],
    there: dict[str, Any] | None,
    result: CopyResult,
    codes: _Codes,
) -> int:
    """Copy one session; returns the number of frames written."""
    sid = row["id"]
    if there is not None and all(there[k] == row[k] for k in TRAFFIC_KEYS):
        result.unchanged += 1
        result.annotations += _merge_annotations(s, d, sid)
        return 0
    if there is None:
        d.run(d.insert_sql("sessions", SESSION_COLUMNS), d.values("sessions", SESSION_COLUMNS, row))
        result.copied += 1
    else:
        # Traffic changed (copied while live): replace it; annotations stay and are merged.
        d.run(
            "DELETE FROM frame_rows WHERE session_key ="
            " (SELECT key FROM session_keys WHERE id = ?)",
            (sid,),
        )
        for table in ("findings", "session_stats", "http_exchanges"):
            d.run(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
        cols = SESSION_COLUMNS[1:]
        sets = ", ".join(f"{c} = ?" for c in cols)
        d.run(f"UPDATE sessions SET {sets} WHERE id = ?", (*d.values("sessions", cols, row), sid))
        result.replaced += 1
    exchange_map = _copy_exchanges(s, d, sid)
    result.exchanges += len(exchange_map)
    written = _copy_frames(s, d, sid, exchange_map, codes)
    result.frames += written
    found = s.read("findings", sid, "id")
    d.insert("findings", found)
    result.findings += len(found)
    # (derived: recomputed when missing or stale)
    d.insert("session_stats", s.read("session_stats", sid, "session_id"))
    result.annotations += _merge_annotations(s, d, sid)
    return written


def _copy_exchanges(s: _Side, d: _Side, sid: str) -> dict[int, int]:
    """Insert the session's exchanges; the source id → the destination's id."""
    src_rows = s.read("http_exchanges", sid, "id")
    if not src_rows:
        return {}
    old_ids = [r["id"] for r in src_rows]
    sql = d.insert_sql("http_exchanges", EXCHANGE_COLUMNS)
    params = [d.values("http_exchanges", EXCHANGE_COLUMNS, r) for r in src_rows]
    new_ids: list[int] = []
    if d.db.pg:  # one pipelined round of statements, each id in the order of the rows
        cur = d.conn.cursor()
        try:
            cur.executemany(sql + " RETURNING id", params, returning=True)
            while True:
                new_ids.append(int(cur.fetchone()[0]))
                if not cur.nextset():
                    break
        finally:
            cur.close()
    else:  # (SQLite before 3.35 has no RETURNING: its cursor has the row id)
        new_ids = [int(d.conn.execute(sql, p).lastrowid) for p in params]
    return dict(zip(old_ids, new_ids, strict=True))


#: ``frame_rows`` columns copied as they are, after the session key (``STORED_FRAME_COLS``).
_STORED = STORED_FRAME_COLS[1:]
_METHOD = _STORED.index("method_code") + 1  # positions in a stored row (key first)
_EXCHANGE = _STORED.index("http_exchange_id") + 1


@dataclass
class _Codes:
    """Method codes on both sides, learnt once per copy: source code → destination code."""

    source: dict[int, str] | None = None
    dest: dict[str, int] = field(default_factory=dict)
    mapped: dict[int, int] = field(default_factory=dict)

    def map(self, s: _Side, d: _Side, codes: set[int]) -> dict[int, int]:
        missing = codes - self.mapped.keys()
        if missing:
            if self.source is None or not missing <= self.source.keys():
                found = s.run("SELECT code, name FROM methods").fetchall()
                self.source = {int(c): str(n) for c, n in found}
            # ``resolve`` reads a row's session id (known here) and method name (missing).
            names = [("", *(None,) * 6, self.source[c]) for c in missing]
            resolve(d.conn, {"": 0}, self.dest, names)
            self.mapped.update((c, self.dest[self.source[c]]) for c in missing)
        return self.mapped


def _session_key(side: _Side, sid: str) -> int | None:
    found = side.run("SELECT key FROM session_keys WHERE id = ?", (sid,)).fetchone()
    return None if found is None else int(found[0])


def _stored_chunks(s: _Side, key: int) -> Iterator[list[tuple[Any, ...]]]:
    """The session's ``frame_rows`` as stored (codes, not names), ``CHUNK`` at a time in ``seq``
    order (keyset), straight from the DBAPI cursor: no view, no per-row result objects."""
    sql = s.db.sql(
        f"SELECT session_key, {', '.join(_STORED)} FROM frame_rows"
        f" WHERE session_key = ? AND seq > ? ORDER BY seq LIMIT {CHUNK}"
    )
    cursor = s.conn.cursor()
    try:
        for chunk in keyset_pages(cursor, sql, lambda after: (key, after), CHUNK, key_at=1):
            yield list(chunk)
    finally:
        cursor.close()


def _copy_frames(
    s: _Side,
    d: _Side,
    sid: str,
    exchange_map: dict[int, int],
    codes: _Codes,
) -> int:
    """The session's frames, stored row for stored row: only the session key, the method codes
    and the exchange ids are the destination's own. Binary ``COPY`` into PostgreSQL,
    ``executemany`` into SQLite, a chunk at a time.

    Read through the ``frames`` view and written back through the codes, each frame was
    decoded and encoded again and crossed SQLAlchemy's result rows: most of a copy's time.
    """
    skey = _session_key(s, sid)
    dkey = _session_key(d, sid)
    if skey is None or dkey is None:
        raise StoreError(
            f"session {sid} has no key in the {'source' if skey is None else 'destination'}"
        )
    n = 0
    for chunk in _stored_chunks(s, skey):
        used = {r[_METHOD] for r in chunk if r[_METHOD] is not None}
        mc = codes.map(s, d, used) if used else {}
        rows = [
            (
                dkey, *r[1:_METHOD],
                None if r[_METHOD] is None else mc[r[_METHOD]],
                *r[_METHOD + 1 : _EXCHANGE],
                None if r[_EXCHANGE] is None else exchange_map.get(r[_EXCHANGE]),
                *r[_EXCHANGE + 1 :],
            )
            for r in chunk
        ]  # fmt: skip
        if d.db.pg:
            from mcp_proxy.store import pg as pg_mod

            pg_mod.copy_rows(d.conn, "frame_rows", STORED_FRAME_COLS, rows)
        else:
            d.conn.executemany(FRAME_INSERT, rows)
        n += len(rows)
    return n


def _merge_annotations(s: _Side, d: _Side, sid: str) -> int:
    """Add the source's annotations the destination lacks; keep the destination's own."""
    src_rows = s.read("annotations", sid, "id")
    if not src_rows:
        return 0
    have = {tuple(r[k] for k in ANNOTATION_KEYS) for r in d.read("annotations", sid, "id")}
    new = [r for r in src_rows if tuple(r[k] for k in ANNOTATION_KEYS) not in have]
    d.insert("annotations", new)
    return len(new)
