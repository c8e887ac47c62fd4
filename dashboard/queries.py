"""The dashboard's own queries: search, paging, counts, annotations and latency pairs.

They sit on top of :class:`mcp_proxy.store.queries.Store` (same engine, same ``_all``) rather
than inside it because their shapes follow the pages — a keyset cursor per sort order, counts
for exactly the sessions on screen, one timeline window. Every path a page walks on a large
database is served by an index (``tests/dashboard/test_query_plans.py`` checks SQLite's plans),
so nothing here reads a whole table or a whole session to draw one screen.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from mcp_proxy.analysis.catalogue import SUMMARY_CODE  # bookkeeping row, not a finding
from mcp_proxy.errors import NotFoundError, UserError
from mcp_proxy.store.queries import FRAME_COLUMNS_NO_RAW, Store
from mcp_proxy.store.schema import annotations, findings, frames, http_exchanges, sessions

#: Bytes of each frame a timeline row shows (the rest is one click away).
PREVIEW_BYTES = 400
#: Frames up to this size travel with timeline rows (for the analysis of the window); larger
#: ones are read only by the detail pages.
SMALL_RAW = 64 * 1024
SEVERITIES = ("error", "warning", "info")

SORTS = ("newest", "oldest", "frames")
TRANSPORTS = ("stdio", "http", "sse")
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9._:/-]{0,63}$")
NOTE_MAX = 20_000


class BadRequest(UserError):
    """A filter, cursor or form value the dashboard cannot use (shown as HTTP 400)."""


@dataclass
class SessionFilter:
    """What the sessions page was asked for; every field maps to one indexed condition."""

    q: str | None = None  # name, server or client name (substring)
    method: str | None = None  # a JSON-RPC method seen in the session
    text: str | None = None  # text inside any frame (slow on huge databases: a scan per session)
    transport: str | None = None
    era: str | None = None
    status: str | None = None
    severity: str | None = None  # has at least one finding of this severity
    tag: str | None = None
    since: float | None = None
    until: float | None = None
    sort: str = "newest"
    cursor: str | None = None
    limit: int = 50

    def conditions(self, dialect: str = "sqlite") -> list[sa.ColumnElement[bool]]:
        c = sessions.c
        out: list[sa.ColumnElement[bool]] = []
        if self.q:
            pat = "%" + _like_escape(self.q) + "%"
            out.append(
                sa.or_(
                    c.name.like(pat, escape="\\"),
                    c.server_name.like(pat, escape="\\"),
                    c.client_name.like(pat, escape="\\"),
                    c.id.like(_like_escape(self.q.lower()) + "%", escape="\\"),
                )
            )
        if self.transport:
            out.append(c.transport == self.transport)
        if self.era:
            out.append(c.era == self.era)
        if self.status:
            out.append(c.status == self.status)
        if self.since is not None:
            out.append(c.started_at >= self.since)
        if self.until is not None:
            out.append(c.started_at < self.until)
        if self.method:
            out.append(
                sa.exists().where(frames.c.session_id == c.id, frames.c.method == self.method)
            )
        if self.severity:
            out.append(
                sa.exists().where(
                    findings.c.session_id == c.id,
                    findings.c.severity == self.severity,
                    findings.c.code != SUMMARY_CODE,
                )
            )
        if self.tag:
            out.append(
                sa.exists().where(annotations.c.session_id == c.id, annotations.c.tag == self.tag)
            )
        if self.text:
            # LIKE never matches a BLOB in SQLite: compare its text (invalid UTF-8 just won't match).
            raw_text: Any = sa.cast(frames.c.raw, sa.Text)
            if dialect == "postgresql":
                raw_text = sa.func.convert_from(frames.c.raw, "UTF8")
            out.append(
                sa.exists().where(
                    frames.c.session_id == c.id,
                    raw_text.like("%" + _like_escape(self.text) + "%", escape="\\"),
                )
            )
        return out

    def as_params(self) -> dict[str, str]:
        """The query-string form (for links that keep the filters and for the JSON twin)."""
        out: dict[str, str] = {}
        for key in ("q", "method", "text", "transport", "era", "status", "severity", "tag"):
            value = getattr(self, key)
            if value:
                out[key] = value
        for key in ("since", "until"):
            value = getattr(self, key)
            if value is not None:
                out[key] = _fmt_num(value)
        if self.sort != "newest":
            out["sort"] = self.sort
        return out


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


@dataclass
class TimelineFilter:
    """The session page's filters; the page is a window of frames after ``after`` (keyset)."""

    method: str | None = None
    direction: str | None = None  # c2s | s2c
    kind: str | None = None  # request | response | error | notification | stderr | noise …
    annotated: bool = False
    after: int = 0
    limit: int = 200
    outcome: str | None = None  # derived by the analysis; applied to the rows read
    every_frame: bool = False  # do not fold notifications into their request's row

    def conditions(self, session_id: str) -> list[sa.ColumnElement[bool]]:
        out: list[sa.ColumnElement[bool]] = [frames.c.session_id == session_id]
        if self.method:
            out.append(frames.c.method == self.method)
        if self.direction:
            out.append(frames.c.direction == self.direction)
        if self.kind:
            out.append(frames.c.kind == self.kind)
        if self.annotated:
            out.append(
                frames.c.seq.in_(
                    sa.select(annotations.c.frame_seq).where(
                        annotations.c.session_id == session_id,
                        annotations.c.frame_seq.is_not(None),
                    )
                )
            )
        return out

    def narrowed(self) -> bool:
        """True when the timeline shows a subset of frames (then frame-less rows stay out)."""
        return bool(self.method or self.direction or self.kind or self.outcome or self.annotated)

    def as_params(self) -> dict[str, str]:
        out = {
            k: v
            for k, v in (
                ("method", self.method),
                ("direction", self.direction),
                ("kind", None if self.outcome else self.kind),
                ("outcome", self.outcome),
            )
            if v
        }
        if self.annotated:
            out["annotated"] = "1"
        if self.every_frame:
            out["every"] = "1"
        return out


class DashboardQueries:
    """Queries for the dashboard's pages, over one :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dialect = store.engine.dialect.name

    # ------------------------------------------------------------------ sessions
    async def search_sessions(self, f: SessionFilter) -> tuple[list[dict[str, Any]], str | None]:
        """One page of sessions for the filter, and the cursor of the next page (or None)."""
        c = sessions.c
        if f.sort not in SORTS:
            raise BadRequest(f"unknown sort {f.sort!r} (one of {', '.join(SORTS)})")
        stmt = sa.select(sessions).where(*f.conditions(self.dialect))
        cursor = _parse_cursor(f.cursor)
        if f.sort == "newest":
            order = [c.started_at.desc(), c.id.desc()]
            if cursor:
                stmt = stmt.where(
                    sa.or_(
                        c.started_at < cursor[0],
                        sa.and_(c.started_at == cursor[0], c.id < cursor[1]),
                    )
                )
        elif f.sort == "oldest":
            order = [c.started_at.asc(), c.id.asc()]
            if cursor:
                stmt = stmt.where(
                    sa.or_(
                        c.started_at > cursor[0],
                        sa.and_(c.started_at == cursor[0], c.id > cursor[1]),
                    )
                )
        else:
            order = [c.frame_count.desc(), c.id.desc()]
            if cursor:
                stmt = stmt.where(
                    sa.or_(
                        c.frame_count < cursor[0],
                        sa.and_(c.frame_count == cursor[0], c.id < cursor[1]),
                    )
                )
        rows = await self.store._all(stmt.order_by(*order).limit(f.limit + 1))
        more = len(rows) > f.limit
        rows = rows[: f.limit]
        next_cursor = None
        if more and rows:
            last = rows[-1]
            key = last["frame_count"] if f.sort == "frames" else last["started_at"]
            next_cursor = f"{_fmt_num(key)}~{last['id']}"
        return rows, next_cursor

    async def session_counts(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Exchanges (requests, both directions), findings by severity and tags per session.

        Three grouped queries for the sessions on screen, each answered from an index.
        """
        out: dict[str, dict[str, Any]] = {
            sid: {"exchanges": 0, "findings": dict.fromkeys(SEVERITIES, 0), "tags": []}
            for sid in ids
        }
        if not ids:
            return out
        req = await self.store._all(
            sa.select(frames.c.session_id, sa.func.count().label("n"))
            .where(frames.c.session_id.in_(ids), frames.c.kind == "request")
            .group_by(frames.c.session_id)
        )
        for r in req:
            out[r["session_id"]]["exchanges"] = int(r["n"])
        fin = await self.store._all(
            sa.select(findings.c.session_id, findings.c.severity, sa.func.count().label("n"))
            .where(findings.c.session_id.in_(ids), findings.c.code != SUMMARY_CODE)
            .group_by(findings.c.session_id, findings.c.severity)
        )
        for r in fin:
            out[r["session_id"]]["findings"][r["severity"]] = int(r["n"])
        tags = await self.store._all(
            sa.select(annotations.c.session_id, annotations.c.tag)
            .where(annotations.c.session_id.in_(ids), annotations.c.tag.is_not(None))
            .distinct()
            .order_by(annotations.c.session_id, annotations.c.tag)
        )
        for r in tags:
            out[r["session_id"]]["tags"].append(r["tag"])
        return out

    async def analysis_summaries(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The analyzer's bookkeeping row per session (to tell which stored findings are stale)."""
        if not ids:
            return {}
        rows = await self.store._all(
            sa.select(findings)
            .where(findings.c.session_id.in_(ids), findings.c.code == SUMMARY_CODE)
            .order_by(findings.c.id)
        )
        return {r["session_id"]: r for r in rows}

    async def newer_sessions(self, started_after: float) -> int:
        rows = await self.store._all(
            sa.select(sa.func.count())
            .select_from(sessions)
            .where(sessions.c.started_at > started_after)
        )
        return int(next(iter(rows[0].values())))

    async def sessions_by_id(self, ids: list[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        return await self.store._all(sa.select(sessions).where(sessions.c.id.in_(ids)))

    async def session(self, ref: str) -> dict[str, Any]:
        """A session by full id (what links carry) or, for people, a prefix or a name."""
        row = await self.store.get_session(ref)
        return row if row is not None else await self.store.resolve_session(ref)

    async def all_tags(self) -> list[dict[str, Any]]:
        return await self.store._all(
            sa.select(
                annotations.c.tag,
                sa.func.count(sa.distinct(annotations.c.session_id)).label("count"),
            )
            .where(annotations.c.tag.is_not(None))
            .group_by(annotations.c.tag)
            .order_by(annotations.c.tag)
        )

    async def session_methods(self, session_id: str) -> list[str]:
        """The methods seen in a session (for the filter menu).

        A skip scan over the ``(session_id, method)`` index — one probe per distinct method —
        instead of a DISTINCT that reads every frame of a 100,000-frame session.
        """
        stmt = sa.text(
            """
            WITH RECURSIVE m(method, n) AS (
                SELECT (SELECT min(method) FROM frames
                        WHERE session_id = :sid AND method IS NOT NULL), 0
                UNION ALL
                SELECT (SELECT min(method) FROM frames
                        WHERE session_id = :sid AND method > m.method), n + 1
                FROM m WHERE m.method IS NOT NULL AND n < 500
            )
            SELECT method FROM m WHERE method IS NOT NULL
            """
        ).bindparams(sid=session_id)
        return [r["method"] for r in await self.store._all(stmt)]

    # ------------------------------------------------------------------ timeline
    async def timeline(
        self, session_id: str, f: TimelineFilter, *, after: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """One window of a session's frames (without the full raw bytes) and the next cursor."""
        cols = [
            *FRAME_COLUMNS_NO_RAW,
            sa.func.substr(frames.c.raw, 1, PREVIEW_BYTES).label("head"),
            _small_raw(),
        ]
        stmt = (
            sa.select(*cols)
            .where(*f.conditions(session_id), frames.c.seq > (f.after if after is None else after))
            .order_by(frames.c.seq)
            .limit(f.limit + 1)
        )
        rows = await self.store._all(stmt)
        more = len(rows) > f.limit
        rows = rows[: f.limit]
        return rows, (rows[-1]["seq"] if more and rows else None)

    async def partners(self, session_id: str, page: list[dict[str, Any]]) -> dict[int, dict]:
        """For each request and response on the page, the frame that answers or asked it.

        The rows carry what the analysis needs (small bodies included), so a page plus its
        partners can be analysed as a window.

        Looks responses and requests up by id through ``ix_frames_session_msgid``, so a page of
        a 100,000-frame session costs the same as a page of a small one. With ids reused over a
        session, the nearest partner in the right direction wins (a request's first answer after
        it; a response's last request before it).
        """
        ids = {
            f["msg_id"]
            for f in page
            if f["msg_id"] is not None and f["kind"] in ("request", "response", "error")
        }
        if not ids:
            return {}
        cols = [*FRAME_COLUMNS_NO_RAW, _small_raw()]
        rows = await self.store._all(
            sa.select(*cols)
            .where(
                frames.c.session_id == session_id,
                frames.c.msg_id.in_(sorted(ids)),
                frames.c.kind.in_(("request", "response", "error")),
            )
            # No ORDER BY: sorting by seq would lure SQLite onto the (session_id, seq) index and
            # through the whole session; the msg_id index finds the few rows, Python orders them.
            .limit(20_000)
        )
        rows.sort(key=lambda r: r["seq"])
        by_id: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            # Key by who sent the request: a c2s request is answered s2c, and vice versa.
            origin = r["direction"] if r["kind"] == "request" else _flip(r["direction"])
            by_id.setdefault((origin, r["msg_id"]), []).append(r)
        out: dict[int, dict[str, Any]] = {}
        for f in page:
            if f["msg_id"] is None or f["kind"] not in ("request", "response", "error"):
                continue
            if f["kind"] == "request":
                chain = by_id.get((f["direction"], f["msg_id"]), [])
                match = next(
                    (r for r in chain if r["kind"] != "request" and r["seq"] > f["seq"]), None
                )
            else:
                chain = by_id.get((_flip(f["direction"]), f["msg_id"]), [])
                match = None
                for r in chain:
                    if r["kind"] == "request" and r["seq"] < f["seq"]:
                        match = r
            if match is not None:
                out[f["seq"]] = match
        return out

    async def http_exchanges_by_id(self, ids: set[int]) -> dict[int, dict[str, Any]]:
        if not ids:
            return {}
        rows = await self.store._all(
            sa.select(http_exchanges).where(http_exchanges.c.id.in_(sorted(ids)))
        )
        return {r["id"]: r for r in rows}

    async def http_without_frames(
        self, session_id: str, since: float | None, before: float | None, *, limit: int = 200
    ) -> list[dict[str, Any]]:
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
        return await self.store._all(stmt.order_by(h.started_at, h.id).limit(limit))

    async def http_exchange(self, session_id: str, exchange_id: int) -> dict[str, Any]:
        row = await self.store._one(
            sa.select(http_exchanges).where(
                http_exchanges.c.id == exchange_id, http_exchanges.c.session_id == session_id
            )
        )
        if row is None:
            raise NotFoundError(f"no HTTP exchange {exchange_id} in this session")
        return row

    async def frames_of_http_exchange(self, exchange_id: int) -> list[dict[str, Any]]:
        return await self.store._all(
            sa.select(*FRAME_COLUMNS_NO_RAW)
            .where(frames.c.http_exchange_id == exchange_id)
            .order_by(frames.c.seq)
            .limit(1000)
        )

    async def frames_between(
        self, session_id: str, first: int, last: int, *, limit: int = 500
    ) -> list[dict[str, Any]]:
        """Frames with ``first < seq < last`` (an exchange's notifications), raw included."""
        return await self.store._all(
            sa.select(frames)
            .where(frames.c.session_id == session_id, frames.c.seq > first, frames.c.seq < last)
            .order_by(frames.c.seq)
            .limit(limit)
        )

    async def neighbours(self, session_id: str, seq: int) -> tuple[int | None, int | None]:
        """The previous and next frame numbers (seq has no gaps in principle, but may)."""
        prev = await self.store._all(
            sa.select(sa.func.max(frames.c.seq)).where(
                frames.c.session_id == session_id, frames.c.seq < seq
            )
        )
        nxt = await self.store._all(
            sa.select(sa.func.min(frames.c.seq)).where(
                frames.c.session_id == session_id, frames.c.seq > seq
            )
        )
        return next(iter(prev[0].values())), next(iter(nxt[0].values()))

    # ------------------------------------------------------------------ annotations
    async def annotations_for(
        self, session_id: str, frame_seqs: list[int] | None = None
    ) -> list[dict[str, Any]]:
        """A session's annotations: all of them, or those on the session and the given frames."""
        stmt = sa.select(annotations).where(annotations.c.session_id == session_id)
        if frame_seqs is not None:
            stmt = stmt.where(
                sa.or_(annotations.c.frame_seq.is_(None), annotations.c.frame_seq.in_(frame_seqs))
            )
        return await self.store._all(stmt.order_by(annotations.c.id))

    async def annotation(self, annotation_id: int) -> dict[str, Any]:
        row = await self.store._one(sa.select(annotations).where(annotations.c.id == annotation_id))
        if row is None:
            raise NotFoundError(f"no annotation {annotation_id}")
        return row

    async def add_annotation(
        self, session_id: str, *, frame_seq: int | None, tag: str | None, note: str | None
    ) -> dict[str, Any]:
        tag, note = clean_annotation(tag, note)
        if frame_seq is not None and await self.store.frame(session_id, frame_seq) is None:
            raise NotFoundError(f"no frame #{frame_seq} in this session")
        now = time.time()
        async with self.store.engine.begin() as conn:
            res = await conn.execute(
                annotations.insert().values(
                    session_id=session_id,
                    frame_seq=frame_seq,
                    tag=tag,
                    note=note,
                    created_at=now,
                    updated_at=None,
                )
            )
            new_id = int(res.inserted_primary_key[0])  # type: ignore[index]
        return await self.annotation(new_id)

    async def update_annotation(
        self, annotation_id: int, *, tag: str | None, note: str | None
    ) -> dict[str, Any]:
        current = await self.annotation(annotation_id)
        # An annotation keeps its nature: a tag stays a tag, a note a note.
        if current["tag"] is not None:
            tag, note = clean_annotation(tag, None)
        else:
            tag, note = clean_annotation(None, note)
        async with self.store.engine.begin() as conn:
            await conn.execute(
                annotations.update()
                .where(annotations.c.id == annotation_id)
                .values(tag=tag, note=note, updated_at=time.time())
            )
        return await self.annotation(annotation_id)

    async def delete_annotation(self, annotation_id: int) -> dict[str, Any]:
        current = await self.annotation(annotation_id)
        async with self.store.engine.begin() as conn:
            await conn.execute(annotations.delete().where(annotations.c.id == annotation_id))
        return current


def clean_annotation(tag: str | None, note: str | None) -> tuple[str | None, str | None]:
    """Validate a tag (short, lower-case label) or a note (free text); exactly one of them."""
    tag = (tag or "").strip().lower() or None
    note = (note or "").strip() or None
    if (tag is None) == (note is None):
        raise BadRequest("give either a tag or a note")
    if tag is not None and not TAG_RE.match(tag):
        raise BadRequest("a tag is 1-64 characters: letters, digits and . _ : / - (e.g. bug-repro)")
    if note is not None and len(note) > NOTE_MAX:
        raise BadRequest(f"a note is at most {NOTE_MAX} characters")
    return tag, note


def _small_raw() -> Any:
    return sa.case((frames.c.size <= SMALL_RAW, frames.c.raw), else_=sa.null()).label("raw")


def _flip(direction: str) -> str:
    return "s2c" if direction == "c2s" else "c2s"


def _parse_cursor(cursor: str | None) -> tuple[float, str] | None:
    if not cursor:
        return None
    key, sep, sid = cursor.partition("~")
    try:
        if not sep or not sid:
            raise ValueError
        return float(key), sid
    except ValueError as exc:
        raise BadRequest(f"bad page cursor {cursor!r}") from exc
