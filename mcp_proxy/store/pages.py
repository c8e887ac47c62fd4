"""The reads behind the dashboard's pages and ``mcptape tail``: search, paging, counts, windows.

Their shapes follow the pages — a keyset cursor per sort order, counts for exactly the sessions
on screen, one timeline window, the frames of one exchange in one query — and every path a page
walks on a large database is served by an index (``tests/dashboard/test_query_plans.py`` checks
SQLite's plans), so nothing here reads a whole table or a whole session to draw one screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict, cast

import sqlalchemy as sa

from mcp_proxy.errors import BadValueError, NotFoundError
from mcp_proxy.store.base import FRAME_COLUMNS_NO_RAW, StoreBase
from mcp_proxy.store.columns import KIND_CODES
from mcp_proxy.store.filters import (
    SEVERITIES,
    SORTS,
    SUMMARY_CODE,
    SessionFilter,
    TimelineFilter,
    fmt_num,
    parse_cursor,
)
from mcp_proxy.store.rows import (
    AnswerRow,
    HttpExchangeRow,
    SessionRow,
    StoredFinding,
    TailFrame,
    TimelineFrame,
    ViewFrame,
)
from mcp_proxy.store.schema import annotations as notes_table
from mcp_proxy.store.schema import (
    findings,
    frame_rows,
    frames,
    http_exchanges,
    key_of,
    select_key,
    session_keys,
    sessions,
)

#: Bytes of each frame a timeline row shows (the rest is one click away).
PREVIEW_BYTES = 400
#: Frames up to this size travel with timeline rows (for the analysis of the window); larger
#: ones are read only by the detail pages.
SMALL_RAW = 64 * 1024
_ANSWERS = ("request", "response", "error")


class TagCount(TypedDict):
    """A tag and the number of sessions that carry it (:meth:`PageQueries.all_tags`)."""

    tag: str
    count: int


class SessionCounts(TypedDict):
    """What a sessions page shows beside each row (:meth:`PageQueries.session_counts`)."""

    exchanges: int  # requests, both directions
    findings: dict[str, int]  # by severity, the summary row left out
    tags: list[str]


class PageQueries(StoreBase):
    """Reads for the dashboard's pages (mixed into :class:`~mcp_proxy.store.queries.Store`)."""

    # ------------------------------------------------------------------ sessions
    async def search_sessions(self, f: SessionFilter) -> tuple[list[SessionRow], str | None]:
        """One page of sessions for the filter, and the cursor of the next page (or None)."""
        c = sessions.c
        if f.sort not in SORTS:
            raise BadValueError(f"unknown sort {f.sort!r} (one of {', '.join(SORTS)})")
        stmt = sa.select(sessions).where(*f.conditions(self.dialect))
        cursor = parse_cursor(f.cursor)
        key = c.frame_count if f.sort == "frames" else c.started_at
        if f.sort == "oldest":
            order = [key.asc(), c.id.asc()]
            if cursor:
                stmt = stmt.where(
                    sa.or_(key > cursor[0], sa.and_(key == cursor[0], c.id > cursor[1]))
                )
        else:
            order = [key.desc(), c.id.desc()]
            if cursor:
                stmt = stmt.where(
                    sa.or_(key < cursor[0], sa.and_(key == cursor[0], c.id < cursor[1]))
                )
        rows = cast(list[SessionRow], await self._all(stmt.order_by(*order).limit(f.limit + 1)))
        more = len(rows) > f.limit
        rows = rows[: f.limit]
        next_cursor = None
        if more and rows:
            last = rows[-1]
            value = last["frame_count"] if f.sort == "frames" else last["started_at"]
            next_cursor = f"{fmt_num(value)}~{last['id']}"
        return rows, next_cursor

    async def session_counts(self, ids: list[str]) -> dict[str, SessionCounts]:
        """Exchanges (requests, both directions), findings by severity and tags per session.

        Three grouped queries for the sessions on screen, each answered from an index.
        """
        out: dict[str, SessionCounts] = {
            sid: {"exchanges": 0, "findings": dict.fromkeys(SEVERITIES, 0), "tags": []}
            for sid in ids
        }
        if not ids:
            return out
        # Requests only, on the partial index ix_frames_requests (kind = request's code).
        req = await self._all(
            sa.select(session_keys.c.id.label("session_id"), sa.func.count().label("n"))
            .select_from(
                session_keys.join(frame_rows, frame_rows.c.session_key == session_keys.c.key)
            )
            .where(session_keys.c.id.in_(ids), frame_rows.c.kind == KIND_CODES["request"])
            .group_by(session_keys.c.id)
        )
        for r in req:
            out[r["session_id"]]["exchanges"] = int(r["n"])
        fin = await self._all(
            sa.select(findings.c.session_id, findings.c.severity, sa.func.count().label("n"))
            .where(findings.c.session_id.in_(ids), findings.c.code != SUMMARY_CODE)
            .group_by(findings.c.session_id, findings.c.severity)
        )
        for r in fin:
            out[r["session_id"]]["findings"][r["severity"]] = int(r["n"])
        tags = await self._all(
            sa.select(notes_table.c.session_id, notes_table.c.tag)
            .where(notes_table.c.session_id.in_(ids), notes_table.c.tag.is_not(None))
            .distinct()
            .order_by(notes_table.c.session_id, notes_table.c.tag)
        )
        for r in tags:
            out[r["session_id"]]["tags"].append(r["tag"])
        return out

    async def analysis_summaries(self, ids: list[str]) -> dict[str, StoredFinding]:
        """The analyzer's bookkeeping row per session (to tell which stored findings are stale)."""
        if not ids:
            return {}
        rows = await self._all(
            sa.select(findings)
            .where(findings.c.session_id.in_(ids), findings.c.code == SUMMARY_CODE)
            .order_by(findings.c.id)
        )
        return {r["session_id"]: r for r in cast(list[StoredFinding], rows)}

    async def newer_sessions(self, started_after: float) -> int:
        return int(
            await self._scalar(
                sa.select(sa.func.count())
                .select_from(sessions)
                .where(sessions.c.started_at > started_after)
            )
            or 0
        )

    async def sessions_by_id(self, ids: list[str]) -> list[SessionRow]:
        if not ids:
            return []
        rows = await self._all(sa.select(sessions).where(sessions.c.id.in_(ids)))
        return cast(list[SessionRow], rows)

    async def all_tags(self) -> list[TagCount]:
        """Every tag in use and on how many sessions, by tag."""
        rows = await self._all(
            sa.select(
                notes_table.c.tag,
                sa.func.count(sa.distinct(notes_table.c.session_id)).label("count"),
            )
            .where(notes_table.c.tag.is_not(None))
            .group_by(notes_table.c.tag)
            .order_by(notes_table.c.tag)
        )
        return cast(list[TagCount], rows)

    async def session_methods(self, session_id: str) -> list[str]:
        """The methods seen in a session (for the filter menu).

        A skip scan over the partial ``(session_key, method_code)`` index — one probe per distinct
        method — instead of a DISTINCT that reads every frame of a 100,000-frame session. The
        key is read first, so each probe is a plain index search on (key, method > last).
        """
        key = await self._scalar(select_key(session_id))
        if key is None:
            return []
        stmt = sa.text(
            """
            WITH RECURSIVE m(code, n) AS (
                SELECT (SELECT min(method_code) FROM frame_rows
                        WHERE session_key = :key AND method_code IS NOT NULL), 0
                UNION ALL
                SELECT (SELECT min(method_code) FROM frame_rows
                        WHERE session_key = :key AND method_code > m.code), n + 1
                FROM m WHERE m.code IS NOT NULL AND n < 500
            )
            SELECT methods.name AS method FROM m JOIN methods ON methods.code = m.code
            """
        ).bindparams(key=int(key))
        return sorted(r["method"] for r in await self._all(stmt))

    # ------------------------------------------------------------------ timeline
    async def timeline(
        self, session_id: str, f: TimelineFilter, *, after: int | None = None
    ) -> tuple[list[TimelineFrame], int | None]:
        """One window of a session's frames (without the full raw bytes) and the next cursor."""
        cols = [
            *FRAME_COLUMNS_NO_RAW,
            sa.func.substr(frames.c.raw, 1, PREVIEW_BYTES).label("head"),
            _small_raw(),
        ]
        after_seq = f.after if after is None else after
        if f.narrowed():
            where = [*f.conditions(session_id), frames.c.seq > after_seq]
        else:
            # The plain window (every session's first page): the frame ids come from
            # ``frame_rows`` in key order, then the view decodes just those. Asked for
            # ``frames.session_id = ?`` PostgreSQL joins session_keys first and, estimating a
            # session at ~100 frames, sorts the whole session to keep 201 rows (the 100,000-frame
            # session's first page: ~190 ms of its 300; with the key as an initplan, 1 ms).
            window = (
                sa.select(frame_rows.c.id)
                .where(
                    frame_rows.c.session_key == select_key(session_id).scalar_subquery(),
                    frame_rows.c.seq > after_seq,
                )
                .order_by(frame_rows.c.seq)
                .limit(f.limit + 1)
            )
            where = [frames.c.id.in_(window)]
        stmt = sa.select(*cols).where(*where).order_by(frames.c.seq).limit(f.limit + 1)
        rows = cast(list[TimelineFrame], await self._all(stmt))
        more = len(rows) > f.limit
        rows = rows[: f.limit]
        return rows, (rows[-1]["seq"] if more and rows else None)

    async def partners(self, session_id: str, page: Sequence[ViewFrame]) -> dict[int, ViewFrame]:
        """For each request and response on the page, the frame that answers or asked it.

        The rows carry what the analysis needs (small bodies included), so a page plus its
        partners can be analysed as a window.

        Looks responses and requests up by id through ``ix_frames_session_msgid``, so a page of
        a 100,000-frame session costs the same as a page of a small one. With ids reused over a
        session, the nearest partner in the right direction wins (a request's first answer after
        it; a response's last request before it).
        """
        ids = {f["msg_id"] for f in page if f["msg_id"] is not None and f["kind"] in _ANSWERS}
        if not ids:
            return {}
        found = await self._all(
            sa.select(*FRAME_COLUMNS_NO_RAW, _small_raw())
            .where(
                frames.c.session_id == session_id,
                frames.c.msg_id.in_(sorted(ids)),
                frames.c.kind.in_(_ANSWERS),
            )
            # No ORDER BY: sorting by seq would lure SQLite onto the (session_id, seq) index and
            # through the whole session; the msg_id index finds the few rows, Python orders them.
            .limit(20_000)
        )
        rows = cast(list[ViewFrame], found)
        rows.sort(key=lambda r: r["seq"])
        by_id: _ById = {}
        for r in rows:
            # Key by who sent the request: a c2s request is answered s2c, and vice versa.
            origin = r["direction"] if r["kind"] == "request" else _flip(r["direction"])
            by_id.setdefault((origin, r["msg_id"]), []).append(r)
        out: dict[int, ViewFrame] = {}
        for f in page:
            if f["msg_id"] is None or f["kind"] not in _ANSWERS:
                continue
            match = _partner_of(f, by_id)
            if match is not None:
                out[f["seq"]] = match
        return out

    async def tools_list_answers(self, session_id: str, limit: int = 20) -> list[AnswerRow]:
        """The answers (responses: ``seq``, ``size``) to the session's first ``limit``
        ``tools/list`` requests, in wire order: the last one is what the host saw last
        (:data:`~mcp_proxy.store.columns.ANSWERS_SQL`, which ``stats`` runs through the
        driver)."""
        return await self._direct(lambda d: d.tools_list_answers(session_id, limit))

    async def http_exchanges_by_id(self, ids: Iterable[int]) -> dict[int, HttpExchangeRow]:
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        rows = await self._all(sa.select(http_exchanges).where(http_exchanges.c.id.in_(wanted)))
        return {r["id"]: r for r in cast(list[HttpExchangeRow], rows)}

    async def http_without_frames(
        self, session_id: str, since: float | None, before: float | None, *, limit: int = 200
    ) -> list[HttpExchangeRow]:
        """HTTP exchanges in a time span that carried no frame (a DELETE, a refused GET, a
        failed POST): the timeline shows them as rows of their own; the others ride on the
        frames they carried."""
        h = http_exchanges.c
        stmt = sa.select(http_exchanges).where(
            h.session_id == session_id,
            ~sa.exists().where(frames.c.http_exchange_id == h.id),
        )
        if since is not None:
            stmt = stmt.where(h.started_at >= since)
        if before is not None:
            stmt = stmt.where(h.started_at < before)
        rows = await self._all(stmt.order_by(h.started_at, h.id).limit(limit))
        return cast(list[HttpExchangeRow], rows)

    async def http_exchange(self, session_id: str, exchange_id: int) -> HttpExchangeRow:
        row = await self._one(
            sa.select(http_exchanges).where(
                http_exchanges.c.id == exchange_id, http_exchanges.c.session_id == session_id
            )
        )
        if row is None:
            raise NotFoundError(f"no HTTP exchange {exchange_id} in this session")
        return cast(HttpExchangeRow, row)

    async def frames_of_http_exchange(self, exchange_id: int) -> list[ViewFrame]:
        rows = await self._all(
            sa.select(*FRAME_COLUMNS_NO_RAW)
            .where(frames.c.http_exchange_id == exchange_id)
            .order_by(frames.c.seq)
            .limit(1000)
        )
        return cast(list[ViewFrame], rows)

    async def frames_between(
        self, session_id: str, first: int, last: int, *, limit: int = 500
    ) -> list[ViewFrame]:
        """Frames with ``first < seq < last`` (an exchange's notifications), raw included."""
        rows = await self._all(
            sa.select(frames)
            .where(frames.c.session_id == session_id, frames.c.seq > first, frames.c.seq < last)
            .order_by(frames.c.seq)
            .limit(limit)
        )
        return cast(list[ViewFrame], rows)

    async def notifications_between(
        self, session_id: str, first: int, last: int, *, limit: int, max_bytes: int
    ) -> list[ViewFrame]:
        """Notifications with ``first < seq < last`` (without full raw bytes; the bytes of
        those up to ``max_bytes``), at most ``limit``, in order: the ticks of a waterfall page
        on a session analysed a window at a time."""
        raw = sa.case((frames.c.size <= max_bytes, frames.c.raw), else_=sa.null()).label("raw")
        rows = await self._all(
            sa.select(*FRAME_COLUMNS_NO_RAW, raw)
            .where(
                frames.c.session_id == session_id,
                frames.c.seq > first,
                frames.c.seq < last,
                frames.c.kind == "notification",
            )
            .order_by(frames.c.seq)
            .limit(limit)
        )
        return cast(list[ViewFrame], rows)

    async def frames_by_seq(self, session_id: str, seqs: Iterable[int]) -> list[ViewFrame]:
        """The frames with these numbers, raw included, in order: one query, not one per frame."""
        wanted = sorted(set(seqs))
        out: list[ViewFrame] = []
        for i in range(0, len(wanted), 500):  # bounded IN lists (SQLite's variable limit)
            chunk = wanted[i : i + 500]
            rows = await self._all(
                sa.select(frames)
                .where(frames.c.session_id == session_id, frames.c.seq.in_(chunk))
                .order_by(frames.c.seq)
            )
            out += cast(list[ViewFrame], rows)
        return out

    async def sessions_in_window(
        self, since: float, until: float, client: str | None, limit: int
    ) -> list[SessionRow]:
        """Sessions that overlap ``[since, until]`` (of one host's client name when given),
        oldest first: the host timeline's lanes."""
        c = sessions.c
        where = [
            c.started_at <= until,
            sa.or_(c.ended_at.is_(None), c.ended_at >= since, c.updated_at >= since),
        ]
        if client is not None:
            where.append(c.client_name == client)
        stmt = sa.select(sessions).where(*where).order_by(c.started_at, c.id).limit(limit)
        return cast(list[SessionRow], await self._all(stmt))

    async def newest_start(self, client: str | None) -> float | None:
        """When the newest session (of one host's client name when given) started."""
        stmt = sa.select(sa.func.max(sessions.c.started_at))
        if client is not None:
            stmt = stmt.where(sessions.c.client_name == client)
        value = await self._scalar(stmt)
        return float(value) if value is not None else None

    async def requests_in_window(
        self, session: SessionRow, since: float, until: float, limit: int
    ) -> list[ViewFrame]:
        """A session's requests sent within ``[since, until]`` (no bytes), in order, at most
        ``limit``; their answers come from :meth:`partners`.

        Frames carry no time index: where the window starts (or ends) inside the session, the
        frame number there is found by bisection on ``(session, seq)`` — a few dozen index
        probes — so a window of a 1,000,000-frame session reads only the frames inside it.
        """
        sid = session["id"]
        after = 0
        if float(session["started_at"]) < since:
            after = await self._seq_at(sid, since) - 1
        where = [frames.c.session_id == sid, frames.c.seq > after, frames.c.kind == "request"]
        ended = session.get("ended_at") or session.get("updated_at")
        if ended is None or float(ended) > until:
            where.append(frames.c.seq < await self._seq_at(sid, until, after=True))
        rows = await self._all(
            sa.select(*FRAME_COLUMNS_NO_RAW)
            .where(*where, frames.c.ts >= since, frames.c.ts <= until)
            .order_by(frames.c.seq)
            .limit(limit)
        )
        return cast(list[ViewFrame], rows)

    async def _seq_at(self, session_id: str, ts: float, *, after: bool = False) -> int:
        """The first frame number recorded at ``ts`` or later (strictly later with ``after``),
        by bisection (frames are recorded in time order, near enough); past the end: last + 1."""
        fr = frame_rows.c
        key = select_key(session_id).scalar_subquery()
        lo = await self._scalar(sa.select(sa.func.min(fr.seq)).where(fr.session_key == key))
        last = await self._scalar(sa.select(sa.func.max(fr.seq)).where(fr.session_key == key))
        if lo is None or last is None:
            return 1
        hi = int(last) + 1
        lo = int(lo)
        while lo < hi:
            mid = (lo + hi) // 2
            row = await self._one(
                sa.select(fr.seq, fr.ts)
                .where(fr.session_key == key, fr.seq >= mid)
                .order_by(fr.seq)
                .limit(1)
            )
            if row is None:
                hi = mid
            elif (row["ts"] > ts) if after else (row["ts"] >= ts):
                hi = mid
            else:
                lo = int(row["seq"]) + 1
        return lo

    async def frame_times(self, session_id: str, seqs: Iterable[int]) -> dict[int, float]:
        """When the frames with these numbers were recorded (no bytes read): a waterfall's
        ticks."""
        wanted = sorted(set(seqs))
        out: dict[int, float] = {}
        for i in range(0, len(wanted), 500):  # bounded IN lists (SQLite's variable limit)
            chunk = wanted[i : i + 500]
            rows = await self._all(
                sa.select(frames.c.seq, frames.c.ts).where(
                    frames.c.session_id == session_id, frames.c.seq.in_(chunk)
                )
            )
            out.update((int(r["seq"]), float(r["ts"])) for r in rows)
        return out

    async def last_frame_ts(self, session_id: str) -> float | None:
        """When the session's newest frame was recorded (one index probe): the end of a live
        session's axis."""
        fr = frame_rows.c
        row = await self._one(
            sa.select(fr.ts)
            .where(fr.session_key == select_key(session_id).scalar_subquery())
            .order_by(fr.seq.desc())
            .limit(1)
        )
        return float(row["ts"]) if row is not None else None

    async def neighbours(self, session_id: str, seq: int) -> tuple[int | None, int | None]:
        """The previous and next frame numbers (seq has no gaps in principle, but may)."""
        # On frame_rows by the session's key: through the view PostgreSQL joined session_keys
        # first and read every frame before (or after) ``seq`` instead of one index probe.
        fr = frame_rows.c
        in_session = fr.session_key == select_key(session_id).scalar_subquery()
        prev = await self._scalar(sa.select(sa.func.max(fr.seq)).where(in_session, fr.seq < seq))
        nxt = await self._scalar(sa.select(sa.func.min(fr.seq)).where(in_session, fr.seq > seq))
        return prev, nxt

    # ------------------------------------------------------------------ tail
    async def last_frame_id(self, session_id: str | None = None) -> int:
        """The newest frame's row id (of one session, or of all): where ``tail`` starts."""
        # On the table, not the view: max(id) over a join would read every frame.
        stmt = sa.select(sa.func.max(frame_rows.c.id))
        if session_id is not None:
            stmt = stmt.where(frame_rows.c.session_key == key_of(session_id))
        return int(await self._scalar(stmt) or 0)

    async def frames_after_id(
        self, after_id: int, session_id: str | None = None, *, limit: int = 2000
    ) -> list[TailFrame]:
        """Frames recorded after row ``after_id`` in insertion order, with their session's name."""
        stmt = (
            sa.select(frames, sessions.c.name)
            .join(sessions, sessions.c.id == frames.c.session_id)
            .where(frames.c.id > after_id)
        )
        if session_id is not None:
            stmt = stmt.where(frames.c.session_id == session_id)
        return cast(list[TailFrame], await self._all(stmt.order_by(frames.c.id).limit(limit)))

    async def count_frames_after_id(self, after_id: int, session_id: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(frame_rows).where(frame_rows.c.id > after_id)
        if session_id is not None:
            stmt = stmt.where(frame_rows.c.session_key == key_of(session_id))
        return int(await self._scalar(stmt) or 0)


#: Frames by who sent the request and the message id (None never a key: such frames are left out).
_ById = dict[tuple[str, str | None], list[ViewFrame]]


def _partner_of(f: ViewFrame, by_id: _ById) -> ViewFrame | None:
    if f["kind"] == "request":
        chain = by_id.get((f["direction"], f["msg_id"]), [])
        return next((r for r in chain if r["kind"] != "request" and r["seq"] > f["seq"]), None)
    chain = by_id.get((_flip(f["direction"]), f["msg_id"]), [])
    match = None
    for r in chain:
        if r["kind"] == "request" and r["seq"] < f["seq"]:
            match = r
    return match


def _small_raw() -> Any:
    return sa.case((frames.c.size <= SMALL_RAW, frames.c.raw), else_=sa.null()).label("raw")


def _flip(direction: str) -> str:
    return "s2c" if direction == "c2s" else "c2s"
