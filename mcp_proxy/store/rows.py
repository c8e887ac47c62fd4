"""The rows the recorder hands to the store, and the typed rows the store's readers hand back.

The recorder's side: one frame-row type and one batch of writes. The readers' side: a
:class:`~typing.TypedDict` per table whose rows travel through the code (sessions, findings,
HTTP exchanges, session stats, annotations) — plain dicts at run time, typed for mypy.

This module is the seam between the recorder (which builds rows from bytes) and the store
(which owns every write statement). It imports nothing heavy — no SQLAlchemy — so that the
recorder's pure batch builder and its tests stay cheap to import; :mod:`mcp_proxy.store.writes`
turns a :class:`Batch` into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

_INT64 = (-(1 << 63), (1 << 63) - 1)

#: The alembic revision the tables correspond to (re-exported by ``store.schema``; a test checks
#: it is the migrations' head). Here so the recorder can check it without importing SQLAlchemy.
SCHEMA_HEAD = "0006"

#: Columns the recorder writes, per table (``id`` of exchanges/findings is the database's); a test
#: checks them against ``store.schema``. JSON columns are stored as ``json.dumps`` text.
SESSION_COLUMNS: tuple[str, ...] = (
    "id", "name", "transport", "status", "started_at", "ended_at", "updated_at", "command",
    "cwd", "upstream", "pid", "hostname", "exit_code", "exit_signal", "era", "protocol_version",
    "client_name", "client_version", "server_name", "server_version", "meta", "frame_count",
    "gap_count", "recorder_version",
)  # fmt: skip
EXCHANGE_COLUMNS: tuple[str, ...] = (
    "session_id", "method", "url", "status", "request_headers", "response_headers",
    "started_at", "first_byte_at", "ended_at", "outcome", "error", "request_size",
    "response_size", "meta",
)  # fmt: skip
FINDING_COLUMNS: tuple[str, ...] = (
    "session_id", "code", "severity", "title", "detail", "frame_seqs", "source",
    "analyzer_version", "created_at",
)  # fmt: skip
SESSION_STATS_COLUMNS: tuple[str, ...] = (
    "session_id", "analyzer_version", "fingerprint", "methods", "created_at",
)  # fmt: skip
JSON_COLUMNS = {
    "sessions": frozenset({"command", "meta"}),
    "http_exchanges": frozenset({"request_headers", "response_headers", "meta"}),
    "findings": frozenset({"frame_seqs"}),
    "session_stats": frozenset({"methods"}),
}


#: The decoded value of a JSON column holding an object (``meta``): a JSON edge, as parsed.
JsonObject = dict[str, Any]


class SessionRow(TypedDict, total=False):
    """A ``sessions`` row (:data:`SESSION_COLUMNS`), JSON columns decoded.

    ``total=False``: the store's readers give every column, but a session read from a file or
    built by a test may lack some.
    """

    id: str
    name: str | None
    transport: str
    status: str
    started_at: float
    ended_at: float | None
    updated_at: float | None
    command: list[str] | None
    cwd: str | None
    upstream: str | None
    pid: int | None
    hostname: str | None
    exit_code: int | None
    exit_signal: int | None
    era: str | None
    protocol_version: str | None
    client_name: str | None
    client_version: str | None
    server_name: str | None
    server_version: str | None
    meta: JsonObject | None
    frame_count: int
    gap_count: int
    recorder_version: str | None


class FindingRow(TypedDict, total=False):
    """A ``findings`` row as written (:data:`FINDING_COLUMNS`; ``id`` is the database's)."""

    session_id: str
    code: str
    severity: str
    title: str
    detail: str | None
    frame_seqs: list[int] | None
    source: str
    analyzer_version: str | None
    created_at: float


class StoredFinding(FindingRow, total=False):
    """A ``findings`` row as read back: with its ``id``."""

    id: int


class HttpExchangeRow(TypedDict, total=False):
    """An ``http_exchanges`` row (``id`` and :data:`EXCHANGE_COLUMNS`), JSON columns decoded."""

    id: int
    session_id: str
    method: str
    url: str
    status: int | None
    request_headers: list[list[str]] | None  # [[name, value], …] in wire order
    response_headers: list[list[str]] | None
    started_at: float
    first_byte_at: float | None
    ended_at: float | None
    outcome: str | None
    error: str | None
    request_size: int | None
    response_size: int | None
    meta: JsonObject | None


class SessionStatsRow(TypedDict, total=False):
    """A ``session_stats`` row (:data:`SESSION_STATS_COLUMNS`), ``methods`` decoded."""

    session_id: str
    analyzer_version: str
    fingerprint: str  # JSON text of ``analysis.service.fingerprint``
    # Each an ``analysis.stats.StoredMethod`` (the store does not import the analysis).
    methods: list[Any]
    created_at: float


class AnnotationRow(TypedDict, total=False):
    """An ``annotations`` row: a tag or a note on a session or on one of its frames."""

    id: int
    session_id: str
    frame_seq: int | None
    tag: str | None
    note: str | None
    created_at: float
    updated_at: float | None


class AnswerRow(TypedDict):
    """An answer to a request (``store/columns.py`` ``ANSWERS_SQL``, responses only)."""

    seq: int
    kind: str  # "response"
    size: int


class ViewFrame(TypedDict, total=False):
    """A row of the ``frames`` view as a dict: what the dashboard's pages, ``tail`` and the
    single-frame reads give (bulk streams read tuples: ``store/stream.py``).

    ``total=False``: lists and timelines select without ``raw``, or with ``raw`` only for
    small frames (None for the others).
    """

    id: int
    session_id: str
    seq: int
    ts: float
    mono_ns: int
    direction: str
    channel: str
    kind: str
    method: str | None
    msg_id: str | None
    error_code: int | None
    size: int
    complete: bool
    partial_parse: bool
    raw: bytes | None
    http_exchange_id: int | None
    sse_id: str | None
    sse_event: str | None
    redacted: bool | None


class TimelineFrame(ViewFrame, total=False):
    """A timeline row: the frame and the first bytes of its body (``store/pages.py``)."""

    head: bytes


class TailFrame(ViewFrame, total=False):
    """A frame ``tail`` follows, with its session's name."""

    name: str | None


class FrameRow(NamedTuple):
    """One row of ``frames``, in the column order of the INSERT (``FRAME_COLS``)."""

    session_id: str
    seq: int
    ts: float
    mono_ns: int
    direction: str
    channel: str
    kind: str
    method: str | None
    msg_id: str | None
    error_code: int | None
    size: int
    complete: int  # 1 or 0: an exact int binds without an adapter look-up
    partial_parse: int
    raw: bytes | bytearray
    http_exchange_id: int | None
    sse_id: str | None
    sse_event: str | None
    redacted: bool | None


#: The frame columns the recorder fills, in the order of :class:`FrameRow`.
FRAME_COLS: tuple[str, ...] = FrameRow._fields


@dataclass(slots=True)
class Gap:
    """Frames of one session that were relayed but will never be in the database."""

    lost: int = 0
    reason: str = ""
    seqs: list[int] = field(default_factory=list)


@dataclass
class Batch:
    """Everything one transaction writes, in dependency order (sessions → exchanges → frames).

    ``session_counts`` maps a session to ``(frame_count, updated_at)`` after this batch;
    ``gaps`` are losses to record as a ``recorder.gap`` finding and added to ``gap_count``.
    """

    sessions: list[dict[str, Any]] = field(default_factory=list)
    session_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_counts: dict[str, tuple[int, float]] = field(default_factory=dict)
    exchanges: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    exchange_updates: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    frames: list[FrameRow] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    gaps: dict[str, Gap] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (
            self.sessions
            or self.session_updates
            or self.session_counts
            or self.exchanges
            or self.exchange_updates
            or self.frames
            or self.findings
            or self.gaps
        )

    def without_frames(self) -> Batch:
        """What must still be written after this batch's frames were counted as lost."""
        return Batch(
            sessions=self.sessions,
            session_updates=self.session_updates,
            exchanges=self.exchanges,
            exchange_updates=self.exchange_updates,
            findings=self.findings,
            gaps=self.gaps,
        )

    def merge_after(self, earlier: Batch) -> Batch:
        """``earlier`` (carried from a failed batch) followed by this one, as one batch."""
        updates = dict(earlier.session_updates)
        for sid, fields in self.session_updates.items():
            updates[sid] = {**updates.get(sid, {}), **fields}
        gaps = dict(earlier.gaps)
        for sid, g in self.gaps.items():
            old = gaps.get(sid)
            gaps[sid] = (
                g
                if old is None
                else Gap(old.lost + g.lost, g.reason or old.reason, old.seqs + g.seqs)
            )
        return Batch(
            sessions=earlier.sessions + self.sessions,
            session_updates=updates,
            session_counts={**earlier.session_counts, **self.session_counts},
            exchanges=earlier.exchanges + self.exchanges,
            exchange_updates=earlier.exchange_updates + self.exchange_updates,
            frames=earlier.frames + self.frames,
            findings=earlier.findings + self.findings,
            gaps=gaps,
        )


#: The finding code of a recording gap (frames relayed but not recorded).
GAP_CODE = "recorder.gap"


def gap_finding(session_id: str, gap: Gap, now: float) -> dict[str, Any]:
    """The ``recorder.gap`` finding row for ``gap`` (written with the ``gap_count`` increment)."""
    return {
        "session_id": session_id,
        "code": GAP_CODE,
        "severity": "error",
        "title": f"{gap.lost} frame(s) were relayed but not recorded",
        "detail": f"Recording gap: {gap.reason or 'unknown cause'}. The traffic itself was "
        "relayed; these frames are missing from the recording.",
        "frame_seqs": gap.seqs[:1000],
        "source": "recorder",
        "created_at": now,
    }


def utf8_text(value: str) -> str:
    """``value`` as UTF-8 can hold it: a lone surrogate (``"\\ud800"`` in a frame's JSON decodes
    to one) as the six characters ``\\ud800``, as the database stores it. The one rule for
    every place that must write or compare such text (the store, OTLP, diff)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def storable(value: Any) -> Any:
    """``value`` as a scalar column can hold it: lone surrogates escaped, ints past 64 bits None.

    JSON columns need no help (``json.dumps`` escapes surrogates); text and integer columns do:
    the driver refuses ``"\\ud800"`` (not encodable as UTF-8) and ``2**64`` (no SQL type).
    """
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _INT64[0] <= value <= _INT64[1] else None
    return value
