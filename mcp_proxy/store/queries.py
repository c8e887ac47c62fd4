"""The read API of the store, shared by the CLI, the dashboard, analysis, replay and diff.

Async (aiosqlite for SQLite) so the dashboard can serve many views at once; the CLI wraps
calls in ``asyncio.run``. Every query here is portable SQL built with SQLAlchemy Core, and the
paths a user walks (sessions newest first, one session's frames in order) are served by indices.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa

from mcp_proxy.errors import NotFoundError, StoreError
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.annotations import AnnotationQueries
from mcp_proxy.store.base import FRAME_COLUMNS_NO_RAW, StoreBase
from mcp_proxy.store.liveness import duration, is_live, session_status
from mcp_proxy.store.pages import PageQueries
from mcp_proxy.store.rows import FindingRow, HttpExchangeRow, SessionRow, StoredFinding, ViewFrame
from mcp_proxy.store.schema import findings, frames, http_exchanges, sessions

__all__ = [
    "FRAME_COLUMNS_NO_RAW",
    "Store",
    "duration",
    "is_live",
    "missing_database",
    "session_status",
]


def missing_database(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist (None: it exists, or not SQLite).

    Commands that only read must not create what they read: a typo in ``--db`` would otherwise
    leave a new folder and an empty database behind and report "no sessions".
    """
    try:
        path = engine_mod.sqlite_path(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"not a database URL: {url}") from exc
    if path is None or path.is_file():
        return None
    return path


class Store(PageQueries, AnnotationQueries, StoreBase):
    """One database: open with :meth:`open`, close with :meth:`close` (or ``async with``).

    Every SQL statement mcptape reads with lives in ``mcp_proxy/store/``: the core reads here,
    the pages' in :mod:`~mcp_proxy.store.pages`, annotations in
    :mod:`~mcp_proxy.store.annotations`.
    """

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True, create: bool = True) -> Store:
        """Connect (and bring the schema up to date unless ``migrate=False``).

        ``create=False`` is for commands that only read: a SQLite file that does not exist is
        a :class:`NotFoundError` (exit 4) instead of a new, empty database.
        """
        if not create:
            path = missing_database(url)
            if path is not None:
                raise NotFoundError(
                    f"no database at {path} (record a session first, or check --db /"
                    f" {engine_mod.ENV_DB})"
                )
        if migrate:
            engine_mod.ensure_schema(url)
        try:
            eng = engine_mod.async_engine(url)
        except Exception as exc:
            raise StoreError(str(exc).splitlines()[0]) from exc
        return cls(url, eng)

    async def close(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ sessions
    async def list_sessions(
        self,
        *,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 50,
        before: tuple[float, str] | None = None,
    ) -> list[SessionRow]:
        """Sessions newest first. ``before`` = (started_at, id) of the last row seen (keyset)."""
        stmt = sa.select(sessions)
        if name is not None:
            stmt = stmt.where(sessions.c.name == name)
        if since is not None:
            stmt = stmt.where(sessions.c.started_at >= since)
        if until is not None:
            stmt = stmt.where(sessions.c.started_at < until)
        if before is not None:
            ts, sid = before
            stmt = stmt.where(
                sa.or_(
                    sessions.c.started_at < ts,
                    sa.and_(sessions.c.started_at == ts, sessions.c.id < sid),
                )
            )
        stmt = stmt.order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        return cast(list[SessionRow], await self._all(stmt))

    async def get_session(self, session_id: str) -> SessionRow | None:
        row = await self._one(sa.select(sessions).where(sessions.c.id == session_id))
        return cast(SessionRow | None, row)

    async def resolve_session(self, ref: str) -> dict[str, Any]:
        """A session by unique id prefix, or by name (the latest with that name).

        A :class:`SessionRow` at run time; typed as a dict until ``recording/database.py``'s
        ``resolve_sessions`` (which collects these in a ``dict[str, dict[str, Any]]``) says so.
        """
        ref = ref.strip()
        if not ref:
            raise NotFoundError("empty session reference")
        if all(ch in "0123456789abcdef" for ch in ref.lower()):
            rows = await self._all(
                sa.select(sessions)
                .where(sessions.c.id.startswith(ref.lower(), autoescape=True))
                .limit(2)
            )
            if len(rows) == 1:
                return rows[0]
            if len(rows) > 1:
                raise NotFoundError(f"session id prefix {ref!r} is ambiguous; give more characters")
        row = await self._one(
            sa.select(sessions)
            .where(sessions.c.name == ref)
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
            .limit(1)
        )
        if row is None:
            raise NotFoundError(f"no session matches {ref!r} (an id prefix or a session name)")
        return row

    async def session(self, ref: str) -> SessionRow:
        """A session by full id (what links carry) or, for people, a prefix or a name."""
        row = await self.get_session(ref)
        return row if row is not None else cast(SessionRow, await self.resolve_session(ref))

    # ------------------------------------------------------------------ frames
    async def frames(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        raw: bool = True,
    ) -> list[ViewFrame]:
        """A session's frames in order, from ``after_seq`` (exclusive)."""
        cols: Sequence[Any] = list(frames.c) if raw else FRAME_COLUMNS_NO_RAW
        stmt = (
            sa.select(*cols)
            .where(frames.c.session_id == session_id, frames.c.seq > after_seq)
            .order_by(frames.c.seq)
        )
        if limit is not None:
            stmt = stmt.limit(limit)
        return cast(list[ViewFrame], await self._all(stmt))

    async def iter_frames(
        self, session_id: str, *, batch: int = 5000, raw: bool = True
    ) -> AsyncIterator[ViewFrame]:
        after = 0
        while True:
            rows = await self.frames(session_id, after_seq=after, limit=batch, raw=raw)
            for r in rows:
                yield r
            if len(rows) < batch:
                return
            after = rows[-1]["seq"]

    async def frame(self, session_id: str, seq: int) -> ViewFrame | None:
        row = await self._one(
            sa.select(frames).where(frames.c.session_id == session_id, frames.c.seq == seq)
        )
        return cast(ViewFrame | None, row)

    async def frame_count(self, session_id: str) -> int:
        return int(
            await self._scalar(
                sa.select(sa.func.count())
                .select_from(frames)
                .where(frames.c.session_id == session_id)
            )
            or 0
        )

    # ------------------------------------------------------------------ exchanges & findings
    async def http_exchanges(self, session_id: str) -> list[HttpExchangeRow]:
        rows = await self._all(
            sa.select(http_exchanges)
            .where(http_exchanges.c.session_id == session_id)
            .order_by(http_exchanges.c.started_at, http_exchanges.c.id)
        )
        return cast(list[HttpExchangeRow], rows)

    async def recorded_findings(self, session_id: str) -> list[StoredFinding]:
        rows = await self._all(
            sa.select(findings).where(findings.c.session_id == session_id).order_by(findings.c.id)
        )
        return cast(list[StoredFinding], rows)

    # ------------------------------------------------------------------ analysis
    # Findings are derived data: the analyzer (mcp_proxy.analysis.service) replaces its own rows
    # of a session in one transaction, next to one ``analysis.summary`` row that records what
    # they were computed from. Recorder rows (source "recorder") are never touched.

    async def analysis_summary(self, session_id: str) -> StoredFinding | None:
        """The analyzer's ``analysis.summary`` row for a session (None: never analysed)."""
        row = await self._one(
            sa.select(findings)
            .where(
                findings.c.session_id == session_id,
                findings.c.source == "analyzer",
                findings.c.code == "analysis.summary",
            )
            .order_by(findings.c.id.desc())
            .limit(1)
        )
        return cast(StoredFinding | None, row)

    async def session_findings(
        self, session_id: str, *, include_summary: bool = False
    ) -> list[StoredFinding]:
        """Stored findings of a session, recorder and analyzer alike, in insertion order."""
        stmt = sa.select(findings).where(findings.c.session_id == session_id)
        if not include_summary:
            stmt = stmt.where(findings.c.code != "analysis.summary")
        return cast(list[StoredFinding], await self._all(stmt.order_by(findings.c.id)))

    async def replace_analyzer_findings(self, session_id: str, rows: Sequence[FindingRow]) -> None:
        """Swap a session's analyzer findings for ``rows`` atomically.

        The session row is locked first (``FOR UPDATE`` where the database has it; SQLite
        serialises writers anyway), so two processes refreshing the same session at once leave
        one set of rows, not two.
        """
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    sa.select(sessions.c.id).where(sessions.c.id == session_id).with_for_update()
                )
                await conn.execute(
                    findings.delete().where(
                        findings.c.session_id == session_id, findings.c.source == "analyzer"
                    )
                )
                if rows:
                    await conn.execute(findings.insert(), [storable(r) for r in rows])
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc


def storable(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with every text value storable as UTF-8: the statement's bind parameters.

    Findings quote what was on the wire: a method or message holding a lone surrogate (JSON's
    ``"\\ud800"`` decodes to one) cannot be encoded for the database, and one such value
    would lose every finding of the session. It is kept as its escape (``\\ud800``).
    """
    out = dict(row)
    for key, value in row.items():
        if isinstance(value, str):
            out[key] = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return out
