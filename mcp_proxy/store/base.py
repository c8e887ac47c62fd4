"""The store's connection and the three ways its read modules run a statement.

:class:`StoreBase` is what every read module of the store builds on (``queries``, ``pages``,
``annotations``): one async engine, and ``_all``/``_one``/``_scalar`` that turn driver errors
into :class:`StoreError`. They are private to the store: code outside ``mcp_proxy/store/`` calls
the public methods of :class:`mcp_proxy.store.queries.Store`, never a statement of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from mcp_proxy.errors import StoreError
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.direct import DirectStore
from mcp_proxy.store.schema import frames

T = TypeVar("T")

#: Every frame column but the bytes (lists and timelines never need all of them).
FRAME_COLUMNS_NO_RAW = [c for c in frames.c if c.name != "raw"]
#: The largest integer SQLite stores; a number above it can only come from a typo or an attack.
MAX_SQL_INT = 2**63 - 1


def _row(r: Any) -> dict[str, Any]:
    return dict(r._mapping)


class StoreBase:
    """One database behind one async engine (see :class:`~mcp_proxy.store.queries.Store`)."""

    def __init__(self, url: str, engine: AsyncEngine) -> None:
        self.url = url
        self.engine = engine
        # The reads and writes the driver store (:class:`DirectStore`) has: one connection of
        # it per store, opened on first use, used by one worker thread at a time (the lock),
        # closed with the store.
        self._direct_store: DirectStore | None = None
        self._direct_lock = threading.Lock()

    async def _direct(self, call: Callable[[DirectStore], T]) -> T:
        """``call(direct)`` in a worker thread on this store's :class:`DirectStore`: the one
        implementation of a session's row, its HTTP exchanges, findings and summary, the
        analyzer's swap — the recorder process, ``show`` and ``export`` use it without
        SQLAlchemy, the async store through it."""

        def run() -> T:
            with self._direct_lock:
                if self._direct_store is None:
                    self._direct_store = DirectStore(self.url)
                try:
                    return call(self._direct_store)
                except StoreError:
                    # The connection may be what failed (a server restarted, a timeout, a
                    # link dropped while the dashboard idled): the next call opens a new one.
                    self._direct_store.close()
                    self._direct_store = None
                    raise

        return await asyncio.to_thread(run)

    def _close_direct(self) -> None:
        with self._direct_lock:
            if self._direct_store is not None:
                self._direct_store.close()
                self._direct_store = None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def _all(self, stmt: sa.Executable) -> list[dict[str, Any]]:
        try:
            async with self.engine.connect() as conn:
                result = await conn.execute(stmt)
                return [_row(r) for r in result]
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    async def _one(self, stmt: sa.Executable) -> dict[str, Any] | None:
        rows = await self._all(stmt)
        return rows[0] if rows else None

    async def _scalar(self, stmt: sa.Executable) -> Any:
        """The first column of the first row (None when there is no row)."""
        try:
            async with self.engine.connect() as conn:
                return (await conn.execute(stmt)).scalar()
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    async def _write(self, stmt: sa.Executable) -> Any:
        """Run one write in its own transaction; returns the driver's result."""
        try:
            async with self.engine.begin() as conn:
                return await conn.execute(stmt)
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc
