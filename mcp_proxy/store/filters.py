"""What a reader asks the store for: session and timeline filters, time bounds, limits.

Shared by the CLI (``sessions --since 2h``) and the dashboard (``/sessions?since=2h``): both read
times and numbers the same way and get the same one-line errors. Each filter field maps to one
indexed condition; :mod:`mcp_proxy.store.pages` runs them. SQLAlchemy is imported only where a
condition is built: reading a time or a limit (``stats --since``, ``check``) must not cost a
command that reads a SQLite file through the driver the ~0.5 s of CPU its import takes.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import BadValueError

if TYPE_CHECKING:  # the conditions' types; SQLAlchemy itself is imported where they are built
    import sqlalchemy as sa

#: The analyzer's bookkeeping row (mcp_proxy.analysis.catalogue.SUMMARY_CODE): not a finding.
SUMMARY_CODE = "analysis.summary"
SEVERITIES = ("error", "warning", "info")
SORTS = ("newest", "oldest", "frames")
TRANSPORTS = ("stdio", "http", "sse")
#: Latest time a reader may ask for (year 9999): anything later is a typo, not a filter.
MAX_EPOCH = 253_402_300_799.0
#: The most rows a ``--limit`` may ask for (beyond it, ask for all: 0).
MAX_LIMIT = 1_000_000_000


def parse_time(value: str | None) -> float | None:
    """Epoch seconds from epoch seconds, an ISO date/time, or a relative age (10m, 2h, 3d).

    Raises :class:`BadValueError` for anything else, including times that are not finite or
    lie outside year 1970..9999 (``1e999`` is not a time).
    """
    if value is None:
        return None
    from datetime import datetime

    v = value.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    ts: float | None = None
    if v[-1:] in units and v[:-1].replace(".", "", 1).isdigit():
        ts = time.time() - float(v[:-1]) * units[v[-1]]
    else:
        try:
            ts = float(v)
        except ValueError:
            try:
                ts = datetime.fromisoformat(v).timestamp()
            except (ValueError, OverflowError, OSError):
                ts = None
    if ts is None:
        raise BadValueError(
            f"cannot read time {value!r} (use 10m, 2h, 3d, an ISO date or epoch seconds)"
        )
    if not math.isfinite(ts) or not 0 <= ts <= MAX_EPOCH:
        raise BadValueError(f"time {value!r} is out of range (1970 to 9999)")
    return ts


def check_limit(limit: int, *, option: str = "--limit") -> int | None:
    """A row limit as the store takes it: None for 0 (all), else 1..MAX_LIMIT."""
    if not 0 <= limit <= MAX_LIMIT:
        raise BadValueError(f"{option} must be between 0 (all) and {MAX_LIMIT:,}, not {limit}")
    return limit or None


def check_id(value: int | str, what: str) -> int:
    """A row id or frame number from a URL or a form: a non-negative integer SQL can hold."""
    try:
        n = int(value)
    except ValueError as exc:
        raise BadValueError(f"{what} must be a number") from exc
    from mcp_proxy.store.base import MAX_SQL_INT

    if not 0 <= n <= MAX_SQL_INT:
        raise BadValueError(f"{what} {value} is out of range")
    return n


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
        import sqlalchemy as sa

        from mcp_proxy.store.schema import annotations as notes_table
        from mcp_proxy.store.schema import findings, frames, sessions

        c = sessions.c
        out: list[sa.ColumnElement[bool]] = []
        if self.q:
            pat = "%" + like_escape(self.q) + "%"
            out.append(
                sa.or_(
                    c.name.like(pat, escape="\\"),
                    c.server_name.like(pat, escape="\\"),
                    c.client_name.like(pat, escape="\\"),
                    c.id.like(like_escape(self.q.lower()) + "%", escape="\\"),
                )
            )
        for column, value in ((c.transport, self.transport), (c.era, self.era)):
            if value:
                out.append(column == value)
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
                sa.exists().where(notes_table.c.session_id == c.id, notes_table.c.tag == self.tag)
            )
        if self.text:
            out.append(self._text_condition(dialect))
        return out

    def _text_condition(self, dialect: str) -> sa.ColumnElement[bool]:
        import sqlalchemy as sa

        from mcp_proxy.store.schema import frames, sessions

        # LIKE never matches a BLOB in SQLite: compare its text (invalid UTF-8 just won't match).
        raw_text: Any = sa.cast(frames.c.raw, sa.Text)
        if dialect == "postgresql":
            raw_text = sa.func.convert_from(frames.c.raw, "UTF8")
        return sa.exists().where(
            frames.c.session_id == sessions.c.id,
            raw_text.like("%" + like_escape(self.text or "") + "%", escape="\\"),
        )

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
                out[key] = fmt_num(value)
        if self.sort != "newest":
            out["sort"] = self.sort
        return out


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
        import sqlalchemy as sa

        from mcp_proxy.store.schema import annotations as notes_table
        from mcp_proxy.store.schema import frames

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
                    sa.select(notes_table.c.frame_seq).where(
                        notes_table.c.session_id == session_id,
                        notes_table.c.frame_seq.is_not(None),
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


def like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def parse_cursor(cursor: str | None) -> tuple[float, str] | None:
    """A sessions page cursor ``KEY~ID`` (the last row's sort key and id)."""
    if not cursor:
        return None
    key, sep, sid = cursor.partition("~")
    try:
        if not sep or not sid:
            raise ValueError
        value = float(key)
        if not math.isfinite(value):
            raise ValueError
        return value, sid
    except ValueError as exc:
        raise BadValueError(f"bad page cursor {cursor!r}") from exc


TAG_RE = re.compile(r"^[a-z0-9][a-z0-9._:/-]{0,63}$")
