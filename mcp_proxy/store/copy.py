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
empty; both sides must be at this mcptape's schema. Tables are read through the models, so the
copy follows the schema instead of listing columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from mcp_proxy.errors import StoreError, UserError
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.codes import resolve
from mcp_proxy.store.columns import STORED_FRAME_COLS, keyset_pages
from mcp_proxy.store.schema import annotations as annotations_t
from mcp_proxy.store.schema import (
    findings,
    frame_rows,
    http_exchanges,
    key_of,
    session_keys,
    session_stats,
    sessions,
)
from mcp_proxy.store.schema import methods as methods_t
from mcp_proxy.store.writes import FRAME_INSERT

#: Frames read and written per round trip.
CHUNK = 10_000
#: Small sessions share a destination transaction up to about this many frames: a commit per
#: session would cost 10,000 commits (each a disk flush on a durable server) for 10,000 sessions.
GROUP_FRAMES = 20_000
#: What decides that a session's traffic is already in the destination.
TRAFFIC_KEYS = ("frame_count", "gap_count", "status", "ended_at")
#: An annotation is the same one when all of these agree.
ANNOTATION_KEYS = ("frame_seq", "tag", "note", "created_at")


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


def _columns(table: sa.Table, *, without_id: bool) -> list[sa.Column[Any]]:
    return [c for c in table.columns if not (without_id and c.name == "id")]


def _read(
    conn: sa.Connection, table: sa.Table, *, without_id: bool, where: Any, order: Any
) -> list[dict[str, Any]]:
    """Rows of ``table`` as dicts, ready to insert elsewhere.

    A JSON column reads ``None`` both for SQL NULL and for a stored JSON ``null`` (the recorder
    writes both: a key left out, a key set to None). They are told apart here and written back
    as they were: ``sa.null()`` for SQL NULL, ``None`` (JSON ``null``) otherwise.
    """
    cols = _columns(table, without_id=without_id)
    json_cols = [c for c in cols if isinstance(c.type, sa.JSON)]
    flags = [c.is_(None).label(f"_isnull_{c.name}") for c in json_cols]
    out = []
    for r in conn.execute(sa.select(*cols, *flags).where(where).order_by(order)):
        row = r._asdict()
        for c in json_cols:
            if row.pop(f"_isnull_{c.name}"):
                row[c.name] = sa.null()
        out.append(row)
    return out


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
    src = engine_mod.sync_engine(src_url)
    dst = engine_mod.sync_engine(dst_url)
    result = CopyResult()
    try:
        with src.connect() as sconn, dst.connect() as dconn:
            with sconn.begin():
                ids = _source_ids(sconn, only)
            existing = _destination_sessions(dst, ids)
            group = 0  # frames written in the open destination transaction
            codes = _Codes()
            dtrans = dconn.begin()
            for i, sid in enumerate(ids, 1):
                with sconn.begin():  # one consistent read per session
                    rows = _read(
                        sconn,
                        sessions,
                        without_id=False,
                        where=sessions.c.id == sid,
                        order=sessions.c.id,
                    )
                    group += (
                        _copy_session(sconn, dconn, rows[0], existing.get(sid), result, codes) + 1
                    )
                if group >= GROUP_FRAMES:
                    dtrans.commit()
                    dtrans = dconn.begin()
                    group = 0
                result.session_ids.append(sid)
                if progress is not None:
                    progress(f"{i}/{len(ids)} {sid[:12]}")
            dtrans.commit()
    except sa.exc.DBAPIError as exc:
        raise StoreError(engine_mod.error_line(exc)) from exc
    finally:
        src.dispose()
        dst.dispose()
    return result


def _source_ids(conn: sa.Connection, only: Sequence[str] | None) -> list[str]:
    stmt = sa.select(sessions.c.id).order_by(sessions.c.started_at, sessions.c.id)
    ids = [r[0] for r in conn.execute(stmt)]
    if only is None:
        return ids
    have = set(ids)
    missing = [s for s in only if s not in have]
    if missing:
        raise UserError(f"no session {missing[0]!r} in the source database")
    wanted = set(only)
    return [s for s in ids if s in wanted]


def _destination_sessions(engine: sa.Engine, ids: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    cols = [sessions.c.id, *(sessions.c[k] for k in TRAFFIC_KEYS)]
    with engine.connect() as conn:
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            for r in conn.execute(sa.select(*cols).where(sessions.c.id.in_(part))):
                out[r[0]] = dict(r._mapping)
    return out


def _copy_session(
    sconn: sa.Connection,
    dconn: sa.Connection,
    row: dict[str, Any],
    there: dict[str, Any] | None,
    result: CopyResult,
    codes: _Codes,
) -> int:
    """Copy one session; returns the number of frames written."""
    sid = row["id"]
    if there is not None and all(there[k] == row[k] for k in TRAFFIC_KEYS):
        result.unchanged += 1
        result.annotations += _merge_annotations(sconn, dconn, sid)
        return 0
    if there is None:
        dconn.execute(sessions.insert(), [row])
        result.copied += 1
    else:
        # Traffic changed (copied while live): replace it; annotations stay and are merged.
        dconn.execute(frame_rows.delete().where(frame_rows.c.session_key == key_of(sid)))
        for table in (findings, session_stats, http_exchanges):
            dconn.execute(table.delete().where(table.c.session_id == sid))
        fields = {k: v for k, v in row.items() if k != "id"}
        dconn.execute(sessions.update().where(sessions.c.id == sid).values(**fields))
        result.replaced += 1
    exchange_map = _copy_exchanges(sconn, dconn, sid)
    result.exchanges += len(exchange_map)
    written = _copy_frames(sconn, dconn, sid, exchange_map, codes)
    result.frames += written
    result.findings += _copy_plain(sconn, dconn, findings, sid)
    _copy_plain(sconn, dconn, session_stats, sid)  # (derived: recomputed when missing or stale)
    result.annotations += _merge_annotations(sconn, dconn, sid)
    return written


def _copy_exchanges(sconn: sa.Connection, dconn: sa.Connection, sid: str) -> dict[int, int]:
    """Insert the session's exchanges; the source id → the destination's id."""
    src_rows = _read(
        sconn,
        http_exchanges,
        without_id=False,
        where=http_exchanges.c.session_id == sid,
        order=http_exchanges.c.id,
    )
    if not src_rows:
        return {}
    old_ids = [r.pop("id") for r in src_rows]
    stmt = http_exchanges.insert().returning(http_exchanges.c.id, sort_by_parameter_order=True)
    new_ids = [int(r[0]) for r in dconn.execute(stmt, src_rows)]
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

    def map(self, sconn: sa.Connection, dconn: sa.Connection, codes: set[int]) -> dict[int, int]:
        missing = codes - self.mapped.keys()
        if missing:
            if self.source is None or not missing <= self.source.keys():
                self.source = {int(c): str(n) for c, n in sconn.execute(sa.select(methods_t))}
            # ``resolve`` reads a row's session id (known here) and method name (missing).
            names = [("", *(None,) * 6, self.source[c]) for c in missing]
            resolve(dconn.connection.driver_connection, {"": 0}, self.dest, names)
            self.mapped.update((c, self.dest[self.source[c]]) for c in missing)
        return self.mapped


def _session_key(conn: sa.Connection, sid: str) -> int | None:
    found = conn.execute(sa.select(session_keys.c.key).where(session_keys.c.id == sid)).first()
    return None if found is None else int(found[0])


def _stored_chunks(sconn: sa.Connection, key: int) -> Iterator[list[tuple[Any, ...]]]:
    """The session's ``frame_rows`` as stored (codes, not names), ``CHUNK`` at a time in ``seq``
    order (keyset), straight from the DBAPI cursor: no view, no per-row result objects."""
    mark = "?" if sconn.dialect.name == "sqlite" else "%s"
    sql = (
        f"SELECT session_key, {', '.join(_STORED)} FROM frame_rows"
        f" WHERE session_key = {mark} AND seq > {mark} ORDER BY seq LIMIT {CHUNK}"
    )
    cursor = sconn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        for chunk in keyset_pages(cursor, sql, lambda after: (key, after), CHUNK, key_at=1):
            yield list(chunk)
    finally:
        cursor.close()


def _copy_frames(
    sconn: sa.Connection,
    dconn: sa.Connection,
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
    skey = _session_key(sconn, sid)
    dkey = _session_key(dconn, sid)
    if skey is None or dkey is None:
        raise StoreError(
            f"session {sid} has no key in the {'source' if skey is None else 'destination'}"
        )
    pg = dconn.dialect.name == "postgresql"
    n = 0
    for chunk in _stored_chunks(sconn, skey):
        used = {r[_METHOD] for r in chunk if r[_METHOD] is not None}
        mc = codes.map(sconn, dconn, used) if used else {}
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
        if pg:
            from mcp_proxy.store import pg as pg_mod

            pg_mod.copy_into(dconn, "frame_rows", STORED_FRAME_COLS, rows)
        else:
            dconn.exec_driver_sql(FRAME_INSERT, rows)  # type: ignore[arg-type]
        n += len(rows)
    return n


def _copy_plain(sconn: sa.Connection, dconn: sa.Connection, table: sa.Table, sid: str) -> int:
    order = table.c.id if "id" in table.c else table.c.session_id
    rows = _read(sconn, table, without_id=True, where=table.c.session_id == sid, order=order)
    if rows:
        dconn.execute(table.insert(), rows)
    return len(rows)


def _merge_annotations(sconn: sa.Connection, dconn: sa.Connection, sid: str) -> int:
    """Add the source's annotations the destination lacks; keep the destination's own."""
    cols = _columns(annotations_t, without_id=True)
    where = annotations_t.c.session_id == sid
    order = annotations_t.c.id
    src_rows = [r._asdict() for r in sconn.execute(sa.select(*cols).where(where).order_by(order))]
    if not src_rows:
        return 0
    have = {
        tuple(r._mapping[k] for k in ANNOTATION_KEYS)
        for r in dconn.execute(sa.select(*cols).where(where))
    }
    new = [r for r in src_rows if tuple(r[k] for k in ANNOTATION_KEYS) not in have]
    if new:
        dconn.execute(annotations_t.insert(), new)
    return len(new)
