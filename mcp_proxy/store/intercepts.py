"""Held messages (intercept, docs/intercept.md): the one table a relay and a person share.

A relay that holds a message inserts a row (:meth:`InterceptTable.hold`) and polls it
(:meth:`InterceptTable.get`) until its state is ``resolved``; ``mcptape intercept resolve`` and
the dashboard — other processes, perhaps on other machines when the database is PostgreSQL —
write the decision (:meth:`InterceptTable.resolve`). A row is resolved once: the update names
``state = 'held'``, so a person and a timeout that race cannot both win.

Through the driver (``engine.Driver``): plain :mod:`sqlite3` on a SQLite file, psycopg from a
small pool on PostgreSQL. The relay's waiting thread, the CLI and the dashboard use it; a poll
is one primary-key read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_proxy.errors import NotFoundError, UserError
from mcp_proxy.limits import INTERCEPT_LIST_MAX, MAX_ID_TEXT
from mcp_proxy.store import engine as engine_mod

__all__ = ["DECISIONS", "AlreadyResolved", "HeldRow", "InterceptTable"]

#: What a person (or the relay) can decide: ``timeout`` (forwarded unchanged, nobody decided),
#: ``abandoned`` (the relay ended while it was held) and ``too_large`` are the relay's own.
DECISIONS = ("forward", "edit", "answer", "drop", "timeout", "abandoned", "too_large")

#: The columns of ``intercepts``, in :class:`HeldRow`'s order (a test checks them against the
#: schema).
COLUMNS = (
    "id", "session_id", "direction", "kind", "method", "msg_id", "rule", "original", "state",
    "decision", "payload", "held_at", "resolved_at", "resolved_by",
)  # fmt: skip
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM intercepts"
_HOLD_COLUMNS = (*COLUMNS[1:9], "held_at")
_HOLD = (
    f"INSERT INTO intercepts ({', '.join(_HOLD_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_HOLD_COLUMNS))})"
)
_RESOLVE = (
    "UPDATE intercepts SET state = 'resolved', decision = ?, payload = ?, resolved_at = ?,"
    " resolved_by = ? WHERE id = ? AND state = 'held'"
)


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
    def of(cls, row: Sequence[Any]) -> HeldRow:
        """A row of :data:`COLUMNS`, as the driver gives it."""
        (id_, sid, direction, kind, method, msg_id, rule, original, state, decision, payload,
         held_at, resolved_at, resolved_by) = row  # fmt: skip
        return cls(
            id=int(id_),
            session_id=sid,
            direction=direction,
            kind=kind,
            method=method,
            msg_id=msg_id,
            rule=rule,
            original=bytes(original),
            state=state,
            decision=decision,
            payload=None if payload is None else bytes(payload),
            held_at=float(held_at),
            resolved_at=resolved_at,
            resolved_by=resolved_by,
        )


class InterceptTable:
    """The ``intercepts`` table of one database (sync; safe to share between threads)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        if create:
            engine_mod.ensure_schema(url)
        self._db = engine_mod.Driver(url)

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, args: Sequence[Any]) -> list[HeldRow]:
        with self._db.transaction() as conn:
            cur = conn.cursor()
            try:
                cur.execute(self._db.sql(sql), tuple(args))
                return [HeldRow.of(r) for r in cur.fetchall()]
            finally:
                cur.close()

    def _count(self, where: str, args: Sequence[Any]) -> int:
        with self._db.transaction() as conn:
            cur = conn.cursor()
            try:
                cur.execute(self._db.sql(f"SELECT count(*) FROM intercepts WHERE {where}"), args)
                return int(cur.fetchone()[0])
            finally:
                cur.close()

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
        values = (
            session_id,
            direction,
            kind,
            (method or None) and method[:200],
            msg_id,
            rule,
            original,
            "held",
            time.time(),
        )
        db = self._db
        with db.transaction() as conn:
            cur = conn.cursor()
            try:
                if db.pg:  # (SQLite before 3.35 has no RETURNING: its cursor has the row id)
                    cur.execute(db.sql(_HOLD) + " RETURNING id", values)
                    return int(cur.fetchone()[0])
                cur.execute(_HOLD, values)
                return int(cur.lastrowid)
            finally:
                cur.close()

    def get(self, intercept_id: int) -> HeldRow | None:
        rows = self._rows(f"{_SELECT} WHERE id = ?", (intercept_id,))
        return rows[0] if rows else None

    def held(self, *, limit: int = INTERCEPT_LIST_MAX) -> tuple[list[HeldRow], int]:
        """The messages held now, oldest first (at most ``limit``), and how many are held."""
        rows = self._rows(f"{_SELECT} WHERE state = 'held' ORDER BY state, id LIMIT ?", (limit,))
        return rows, self._count("state = 'held'", ())

    def held_in(self, session_id: str) -> int:
        """How many messages of one session are held now (its badge)."""
        return self._count("session_id = ? AND state = 'held'", (session_id,))

    def for_session(self, session_id: str) -> list[HeldRow]:
        """Every intercept of one session (held and resolved), in order."""
        return self._rows(
            f"{_SELECT} WHERE session_id = ? ORDER BY session_id, id LIMIT ?",
            (session_id, INTERCEPT_LIST_MAX),
        )

    def resolve(self, intercept_id: int, decision: str, payload: bytes | None, by: str) -> HeldRow:
        """Decide a held message, once. Raises :class:`NotFoundError` (no such id) or
        :class:`AlreadyResolved` (decided before: by whom and how)."""
        if decision not in DECISIONS:
            raise ValueError(decision)
        values = (decision, payload, time.time(), by[:200], intercept_id)
        with self._db.transaction() as conn:
            cur = conn.cursor()
            try:
                cur.execute(self._db.sql(_RESOLVE), values)
                won = cur.rowcount == 1
            finally:
                cur.close()
        row = self.get(intercept_id)
        if row is None:
            raise NotFoundError(f"no held message #{intercept_id} (see: mcptape intercept list)")
        if not won:
            raise AlreadyResolved(
                f"message #{intercept_id} was already resolved: {row.decision}"
                f" by {row.resolved_by or 'nobody'}"
            )
        return row
