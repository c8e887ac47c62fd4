"""Held messages (intercept, docs/intercept.md): the one table a relay and a person share.

A relay that holds a message inserts a row (:meth:`InterceptTable.hold`) and polls it
(:meth:`InterceptTable.get`) until its state is ``resolved``; ``mcptape intercept resolve`` and
the dashboard — other processes, perhaps on other machines when the database is PostgreSQL —
write the decision (:meth:`InterceptTable.resolve`). A row is resolved once: the update names
``state = 'held'``, so a person and a timeout that race cannot both win.

Sync SQLAlchemy Core on a small pool: the relay's waiting thread and the CLI use it; a poll is
one primary-key read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from mcp_proxy.errors import NotFoundError, StoreError, UserError
from mcp_proxy.limits import INTERCEPT_LIST_MAX, MAX_ID_TEXT
from mcp_proxy.store import engine as engine_mod
from mcp_proxy.store.schema import intercepts as table

__all__ = ["DECISIONS", "AlreadyResolved", "HeldRow", "InterceptTable"]

#: What a person (or the relay) can decide: ``timeout`` (forwarded unchanged, nobody decided),
#: ``abandoned`` (the relay ended while it was held) and ``too_large`` are the relay's own.
DECISIONS = ("forward", "edit", "answer", "drop", "timeout", "abandoned", "too_large")


class AlreadyResolved(UserError):
    """``intercept resolve`` on a message someone (or a timeout) already decided."""

    exit_code = 6


@dataclass(frozen=True, slots=True)
class HeldRow:
    """One held (or resolved) message."""

    id: int
    session_id: str
    direction: str
    kind: str
    method: str | None
    msg_id: str | None
    rule: str | None
    original: bytes
    state: str
    decision: str | None
    payload: bytes | None
    held_at: float
    resolved_at: float | None
    resolved_by: str | None

    def listed(self) -> dict[str, Any]:
        """The held message as ``intercept list --format json`` and the dashboard's twin show
        it (the message as text, its line end cut)."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "direction": self.direction,
            "kind": self.kind,
            "method": self.method,
            "msg_id": self.msg_id,
            "rule": self.rule,
            "held_at": self.held_at,
            "message": self.original.decode("utf-8", "replace").rstrip("\r\n"),
        }

    @classmethod
    def of(cls, row: sa.Row[object]) -> HeldRow:
        m = row._mapping
        return cls(
            id=int(m["id"]),
            session_id=m["session_id"],
            direction=m["direction"],
            kind=m["kind"],
            method=m["method"],
            msg_id=m["msg_id"],
            rule=m["rule"],
            original=bytes(m["original"]),
            state=m["state"],
            decision=m["decision"],
            payload=None if m["payload"] is None else bytes(m["payload"]),
            held_at=float(m["held_at"]),
            resolved_at=m["resolved_at"],
            resolved_by=m["resolved_by"],
        )


class InterceptTable:
    """The ``intercepts`` table of one database (sync; safe to share between threads)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        if create:
            engine_mod.ensure_schema(url)
        self._engine = engine_mod.sync_engine(url)

    def close(self) -> None:
        self._engine.dispose()

    def _run(self, stmt: sa.Executable) -> sa.CursorResult[object]:
        try:
            with self._engine.begin() as conn:
                result: sa.CursorResult[object] = conn.execute(stmt)
                return result
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    def hold(
        self,
        session_id: str,
        direction: str,
        kind: str,
        method: str | None,
        msg_id: str | None,
        rule: str | None,
        original: bytes,
    ) -> int:
        """Insert a held message; its id."""
        if msg_id is not None and len(msg_id) > MAX_ID_TEXT:
            msg_id = None  # an id too long to index is still in ``original``
        res = self._run(
            table.insert().values(
                session_id=session_id,
                direction=direction,
                kind=kind,
                method=(method or None) and method[:200],
                msg_id=msg_id,
                rule=rule,
                original=original,
                state="held",
                held_at=time.time(),
            )
        )
        return int(res.inserted_primary_key[0])  # type: ignore[index]

    def get(self, intercept_id: int) -> HeldRow | None:
        with self._engine.connect() as conn:
            try:
                row = conn.execute(sa.select(table).where(table.c.id == intercept_id)).first()
            except sa.exc.DBAPIError as exc:
                raise StoreError(engine_mod.error_line(exc)) from exc
        return None if row is None else HeldRow.of(row)

    def held(self, *, limit: int = INTERCEPT_LIST_MAX) -> tuple[list[HeldRow], int]:
        """The messages held now, oldest first (at most ``limit``), and how many are held."""
        where = table.c.state == "held"
        try:
            with self._engine.connect() as conn:
                rows = conn.execute(
                    sa.select(table).where(where).order_by(table.c.state, table.c.id).limit(limit)
                ).all()
                count = conn.execute(sa.select(sa.func.count()).where(where)).scalar_one()
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc
        return [HeldRow.of(r) for r in rows], int(count)

    def held_in(self, session_id: str) -> int:
        """How many messages of one session are held now (its badge)."""
        stmt = sa.select(sa.func.count()).where(
            table.c.session_id == session_id, table.c.state == "held"
        )
        try:
            with self._engine.connect() as conn:
                return int(conn.execute(stmt).scalar_one())
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    def for_session(self, session_id: str) -> list[HeldRow]:
        """Every intercept of one session (held and resolved), in order."""
        stmt = (
            sa.select(table)
            .where(table.c.session_id == session_id)
            .order_by(table.c.session_id, table.c.id)
            .limit(INTERCEPT_LIST_MAX)
        )
        try:
            with self._engine.connect() as conn:
                return [HeldRow.of(r) for r in conn.execute(stmt).all()]
        except sa.exc.DBAPIError as exc:
            raise StoreError(engine_mod.error_line(exc)) from exc

    def resolve(self, intercept_id: int, decision: str, payload: bytes | None, by: str) -> HeldRow:
        """Decide a held message, once. Raises :class:`NotFoundError` (no such id) or
        :class:`AlreadyResolved` (decided before: by whom and how)."""
        if decision not in DECISIONS:
            raise ValueError(decision)
        res = self._run(
            table.update()
            .where(table.c.id == intercept_id, table.c.state == "held")
            .values(
                state="resolved",
                decision=decision,
                payload=payload,
                resolved_at=time.time(),
                resolved_by=by[:200],
            )
        )
        row = self.get(intercept_id)
        if row is None:
            raise NotFoundError(f"no held message #{intercept_id} (see: mcptape intercept list)")
        if res.rowcount != 1:
            raise AlreadyResolved(
                f"message #{intercept_id} was already resolved: {row.decision}"
                f" by {row.resolved_by or 'nobody'}"
            )
        return row
