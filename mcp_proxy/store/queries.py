"""The read API of the store, shared by the CLI, the dashboard, analysis, replay and diff.

Async (aiosqlite for SQLite) so the dashboard can serve many views at once; the CLI wraps
calls in ``asyncio.run``. Every query here is portable SQL built with SQLAlchemy Core, and the
paths a user walks (sessions newest first, one session's frames in order) are served by indices.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
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
from mcp_proxy.store.schema import frames, sessions

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
        await asyncio.to_thread(self._close_direct)
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
        return await self._direct(
            lambda d: d.list_sessions(
                name=name, since=since, until=until, limit=limit, before=before
            )
        )

    async def get_session(self, session_id: str) -> SessionRow | None:
        row = await self._one(sa.select(sessions).where(sessions.c.id == session_id))
        return cast(SessionRow | None, row)

    async def resolve_session(self, ref: str) -> dict[str, Any]:
        """A session by unique id prefix, or by name (the latest with that name).

        A :class:`SessionRow` at run time; typed as a dict until ``recording/database.py``'s
        ``resolve_sessions`` (which collects these in a ``dict[str, dict[str, Any]]``) says so.
        """
        return dict(await self._direct(lambda d: d.resolve_session(ref)))

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
        return await self._direct(lambda d: d.http_exchanges(session_id))

    async def recorded_findings(self, session_id: str) -> list[StoredFinding]:
        return await self._direct(lambda d: d.recorded_findings(session_id))

    # ------------------------------------------------------------------ analysis
    # Findings are derived data: the analyzer (mcp_proxy.analysis.service) replaces its own rows
    # of a session in one transaction, next to one ``analysis.summary`` row that records what
    # they were computed from. Recorder rows (source "recorder") are never touched.

    async def analysis_summary(self, session_id: str) -> StoredFinding | None:
        """The analyzer's ``analysis.summary`` row for a session (None: never analysed)."""
        return await self._direct(lambda d: d.analysis_summary(session_id))

    async def replace_analyzer_findings(self, session_id: str, rows: Sequence[FindingRow]) -> None:
        """Swap a session's analyzer findings for ``rows`` atomically, the session row locked
        first, so that two processes refreshing one session leave one set of rows."""
        await self._direct(lambda d: d.replace_analyzer_findings(session_id, rows))
