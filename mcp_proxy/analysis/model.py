"""The data the analysis works on and hands out: messages, exchanges, chains, findings.

Plain dataclasses with ``__slots__``: a 100,000-frame session becomes 100,000 :class:`Msg`
objects, so they stay small and cheap to build. Everything here is derived from frame rows and
can be thrown away and recomputed at any time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orjson import loads as _orjson_loads

from mcp_proxy.analysis.catalogue import CATALOGUE, SEVERITY_RANK, Severity
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.frames import FOLD_DIGITS, LONG_DIGITS, json_id
from mcp_proxy.limits import MAX_SEQS, PER_CODE_CAP
from mcp_proxy.protocol import ERA_INITIALIZE, ERA_MODERN, KNOWN_VERSIONS
from mcp_proxy.protocol import META_PREFIX as META

__all__ = [
    "ERA_INITIALIZE",
    "ERA_MODERN",
    "JSONRPC_KINDS",
    "KNOWN_VERSIONS",
    "META",
    "Chain",
    "Exchange",
    "Finding",
    "FindingSink",
    "Msg",
    "Outcome",
    "SessionFacts",
    "Task",
    "finding_order",
    "finding_record",
    "severity_counts",
]

#: Kinds whose bytes are parsed (everything else — noise, stderr, empty — has no JSON body).
JSONRPC_KINDS = frozenset({"request", "response", "error", "notification", "batch", "invalid"})


#: A lazily parsed body or params not parsed yet (the analysis builds messages with it).
UNPARSED: Any = object()


def _make_scan() -> Any:
    """The C JSON scanner, called directly: ``json.loads`` adds two regex matches and three
    Python frames per message, a fifth of the cost of a small message."""
    try:
        from json.scanner import c_make_scanner  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - pure-Python json
        return None
    if c_make_scanner is None:  # pragma: no cover
        return None
    return c_make_scanner(json.JSONDecoder())


_SCAN = _make_scan()


_ORJSON_FIRST = (b"{", b"[")


def parse_json_bytes(raw: bytes) -> Any:
    """Parse one message's bytes; None when they are not a single JSON value.

    orjson first for an object or array (several times json's speed; parsing bodies was a
    fifth of ``check``'s time): what it refuses — lone surrogates, NaN and infinities, nesting
    past its limit, anything not JSON — goes the json way below, and so do bytes with a run
    of 19+ digits (orjson reads an integer past 64 bits as a float, json keeps it exact), so
    the value is json's whatever the bytes (``tests/analysis/test_stats_stream.py`` compares).
    """
    # (frames.has_long_number, inline: it runs once per body the analysis reads)
    if raw[:1] in _ORJSON_FIRST and raw.translate(FOLD_DIGITS).find(LONG_DIGITS) < 0:
        try:
            return _orjson_loads(raw)
        except ValueError:  # orjson.JSONDecodeError is a ValueError
            pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _SCAN is not None:
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            value, end = None, -1
        if end >= 0 and (end == len(text) or not text[end:].strip()):
            return value
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass(slots=True)
class Msg:
    """One JSON-RPC message as seen on the wire (a frame, or one element of a batch frame).

    The body is parsed on first use: a check that only needs the method, id and direction
    (most of them) never pays for ``json.loads``.
    """

    seq: int
    ts: float
    mono_ns: int
    direction: str  # c2s | s2c
    channel: str  # stdio | stderr | http | sse
    kind: str
    method: str | None
    msg_id: str | None
    error_code: int | None
    size: int
    complete: bool
    partial: bool
    http: int | None  # http_exchange_id
    raw: bytes | None = None
    _body: Any = UNPARSED
    event: str | None = None  # the SSE event type ("message", "endpoint", …) for SSE frames
    #: ``params`` once read (None: the body has none), forgotten with the body
    _params: Any = UNPARSED

    @property
    def body(self) -> Any:
        """The parsed JSON (a dict for a message); None when not JSON, cut short or too big."""
        b = self._body
        if b is UNPARSED:
            b = None
            raw = self.raw
            if raw is not None and not self.partial and self.kind in JSONRPC_KINDS:
                b = parse_json_bytes(raw)
            self._body = b
        return b

    def release(self) -> None:
        """Forget the parsed body (it is parsed again if asked for); batch elements keep it."""
        if self.raw is not None:
            self._body = self._params = UNPARSED

    def forget(self) -> None:
        """Forget the bytes and the body for good (every check has read this message)."""
        self.raw = None
        self._body = None
        self._params = None

    @property
    def params(self) -> dict[str, Any]:
        """The body's ``params`` object ({} when it has none). Looked up once per parse: the
        pairing and the checks ask for a request's params five times."""
        p = self._params
        if p is UNPARSED:
            b = self._body
            if b is UNPARSED:  # (what body does, inline: params is most messages' first read)
                b = None
                raw = self.raw
                if raw is not None and not self.partial and self.kind in JSONRPC_KINDS:
                    b = parse_json_bytes(raw)
                self._body = b
            p = b.get("params") if isinstance(b, dict) else None
            if not isinstance(p, dict):
                p = None
            self._params = p
        return {} if p is None else p  # type: ignore[no-any-return]

    @property
    def result(self) -> dict[str, Any] | None:
        b = self.body
        if isinstance(b, dict):
            r = b.get("result")
            if isinstance(r, dict):
                return r
        return None

    @property
    def error(self) -> dict[str, Any]:
        b = self.body
        if isinstance(b, dict):
            e = b.get("error")
            if isinstance(e, dict):
                return e
        return {}

    @property
    def meta(self) -> dict[str, Any]:
        m = self.params.get("_meta")
        return m if isinstance(m, dict) else {}


class Outcome(StrEnum):
    """What became of a request: the one list of exchange outcomes (CLI, dashboard, stats).

    A ``StrEnum``, so stored and JSON forms are the plain strings and ``ex.outcome == "ok"``
    still holds.
    """

    OK = "ok"
    #: a tools/call result with ``isError``: the tool ran and failed
    TOOL_ERROR = "tool_error"
    #: an MRTR round; the chain continues
    INPUT_REQUIRED = "input_required"
    #: a JSON-RPC error response
    ERROR = "error"
    #: the HTTP layer refused or failed the request without a JSON-RPC answer
    HTTP_ERROR = "http_error"
    CANCELLED = "cancelled"
    #: the host gave up: closed the request's HTTP connection, or stopped the server
    ABORTED = "aborted"
    #: the server process crashed with the request pending
    LOST = "lost"
    #: the session ended without an answer
    NO_RESPONSE = "no_response"
    #: a subscriptions/listen stream that ended without a result, as the spec allows
    CLOSED = "closed"
    #: still in flight in a live session
    PENDING = "pending"

    @property
    def label(self) -> str:
        """How people read it in a table (``NO RESPONSE`` and ``LOST`` shout: data is missing)."""
        return _LABELS[self]

    @property
    def answered(self) -> bool:
        """The receiver answered (a result, an error or an MRTR round)."""
        return self in _ANSWERED

    @property
    def unanswered(self) -> bool:
        """No answer came and nobody cancelled: the session ended first."""
        return self in _UNANSWERED


_ANSWERED = frozenset(
    {Outcome.OK, Outcome.TOOL_ERROR, Outcome.INPUT_REQUIRED, Outcome.ERROR, Outcome.HTTP_ERROR}
)
_UNANSWERED = frozenset({Outcome.NO_RESPONSE, Outcome.LOST, Outcome.ABORTED})
_LABELS = {
    Outcome.OK: "ok",
    Outcome.TOOL_ERROR: "tool error",
    Outcome.INPUT_REQUIRED: "input req.",
    Outcome.ERROR: "error",
    Outcome.HTTP_ERROR: "HTTP error",
    Outcome.CANCELLED: "cancelled",
    Outcome.ABORTED: "aborted",
    Outcome.LOST: "LOST",
    Outcome.NO_RESPONSE: "NO RESPONSE",
    Outcome.CLOSED: "closed",
    Outcome.PENDING: "pending",
}


@dataclass(slots=True)
class Exchange:
    """A request with its response (or its absence) and what belongs to it; ``outcome`` is an
    :class:`Outcome`."""

    index: int
    direction: str  # direction of the request: c2s = host asked the server
    method: str
    msg_id: str
    request_seq: int
    request_ts: float
    request_mono_ns: int
    http: int | None = None
    name: str | None = None  # tool / prompt name or resource URI
    progress_token: str | None = None
    log_level: str | None = None  # 2026-07-28 per-request opt-in
    response_seq: int | None = None
    response_ts: float | None = None
    latency_ms: float | None = None
    outcome: Outcome = Outcome.PENDING
    error_code: int | None = None
    error_message: str | None = None
    error_class: str | None = None  # the taxonomy code of the error, if any
    result_type: str | None = None
    cancel_seq: int | None = None
    cancel_reason: str | None = None
    # Filled on first use (most exchanges have none): an empty tuple until then, so that a
    # 100k-frame session does not allocate 100k empty lists.
    progress_seqs: Sequence[int] = ()
    log_seqs: Sequence[int] = ()
    other_seqs: Sequence[int] = ()  # other notifications on its stream (or cancels that raced)
    children: Sequence[int] = ()  # server→client requests made meanwhile
    parent: int | None = None
    chain: int | None = None
    round: int = 0
    last_progress: float | None = None
    #: The task this request created (MCP tasks, both eras): its handle came as the answer.
    task: Task | None = None
    #: The request seq of the call that created the task this request is about (``tasks/get``,
    #: ``tasks/result``, ``tasks/cancel``, ``tasks/update``, or a request with the
    #: ``related-task`` ``_meta``).
    task_of: int | None = None
    #: Read while pairing (the bodies are parsed then, and released after): the request carried
    #: the 2026-07-28 envelope; the answer was a result without ``resultType``.
    enveloped: bool = False
    untyped_result: bool = False
    # The request and response messages, for the checks; cleared when analyze() returns
    # (request_seq and response_seq point at their frames).
    request: Msg | None = None
    response: Msg | None = None

    def add(self, attr: str, value: int) -> None:
        """Append to ``progress_seqs``, ``log_seqs``, ``other_seqs`` or ``children``."""
        current = getattr(self, attr)
        if isinstance(current, list):
            current.append(value)
        else:
            setattr(self, attr, [value])

    def as_dict(self) -> dict[str, Any]:
        """JSON-able view for the CLI, the dashboard and scripts."""
        return {
            "index": self.index,
            "direction": self.direction,
            "method": self.method,
            "id": json_id(self.msg_id),
            "name": self.name,
            "request_seq": self.request_seq,
            "response_seq": self.response_seq,
            "request_ts": self.request_ts,
            "response_ts": self.response_ts,
            "latency_ms": self.latency_ms,
            "outcome": str(self.outcome),
            "error_code": self.error_code,
            "error_message": self.error_message,
            "error_class": self.error_class,
            "result_type": self.result_type,
            "http_exchange_id": self.http,
            "progress_token": json.loads(self.progress_token) if self.progress_token else None,
            "cancel_seq": self.cancel_seq,
            "progress_seqs": list(self.progress_seqs),
            "log_seqs": list(self.log_seqs),
            "other_seqs": list(self.other_seqs),
            "children": list(self.children),
            "parent": self.parent,
            "chain": self.chain,
            "round": self.round,
        } | self._task_fields()

    def _task_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.task is not None:
            out["task"] = self.task.as_dict()
        if self.task_of is not None:
            out["task_of"] = self.task_of
        return out


#: The statuses that end a task: after one, a task's status never changes.
TASK_TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(slots=True)
class Task:
    """A task (MCP tasks: 2025-11-25 core, 2026-07-28 the ``io.modelcontextprotocol/tasks``
    extension): one conversation, from the call that created it to its terminal status.

    ``lifecycle`` holds the status changes as ``(status, seq)`` (repeats folded, the first
    :data:`~mcp_proxy.limits.TASK_STATUSES_KEPT`); ``ended_seq`` is the frame where a terminal
    status was first seen and ``duration_ms`` the time from the creating request to it.
    """

    id: str
    created_seq: int
    created_mono: int
    status: str = "working"
    polls: int = 0
    updates: int = 0
    notifications: int = 0
    ended_seq: int | None = None
    duration_ms: float | None = None
    poll_interval_ms: float | None = None
    lifecycle: list[tuple[str, int]] = field(default_factory=list)
    #: status changes past the kept ones
    changes_dropped: int = 0
    #: the monotonic stamp of the last poll (``tasks/get``), and polls much faster than asked
    last_poll_mono: int | None = None
    fast_polls: int = 0
    #: what the task's result was (``ok``, ``tool_error``, ``error``), once seen
    result: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in TASK_TERMINAL

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "polls": self.polls,
            "ended_seq": self.ended_seq,
            "duration_ms": self.duration_ms,
            "poll_interval_ms": self.poll_interval_ms,
            "updates": self.updates,
            "notifications": self.notifications,
            "result": self.result,
            "lifecycle": [{"status": st, "seq": seq} for st, seq in self.lifecycle],
        }

    def lifecycle_text(self) -> str:
        """``created → working → completed`` (polls folded: ``working ×3 polls``)."""
        steps = ["created"] + [st for st, _ in self.lifecycle]
        if self.changes_dropped:
            steps.append(f"… {self.changes_dropped} more")
        return " → ".join(steps)


@dataclass(slots=True)
class Chain:
    """An MRTR conversation: the rounds of one operation, linked by requestState/inputResponses.

    ``outcome``: ``complete`` (the last round answered normally), ``tool_error``, ``error``,
    ``incomplete`` (the last round asked for input and nobody retried) or ``pending``.
    """

    index: int
    method: str
    name: str | None
    exchanges: list[int] = field(default_factory=list)
    outcome: str = "pending"

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "method": self.method,
            "name": self.name,
            "exchanges": self.exchanges,
            "rounds": len(self.exchanges),
            "outcome": self.outcome,
        }


@dataclass(slots=True)
class Finding:
    """One fact with its proof. Severity, explanation and reference come from the catalogue."""

    code: str
    title: str
    detail: str
    frame_seqs: list[int]
    exchange: int | None = None

    @property
    def severity(self) -> str:
        return CATALOGUE[self.code].severity.value

    def as_dict(self) -> dict[str, Any]:
        """The one finding shape (:func:`finding_record`)."""
        return finding_record(self)


#: The keys of a finding record, in the order JSON output shows them.
FINDING_KEYS = (
    "code",
    "severity",
    "title",
    "detail",
    "frame_seqs",
    "exchange",
    "source",
    "analyzer_version",
    "area",
    "spec",
    "explanation",
)


def finding_record(f: Finding | Mapping[str, Any]) -> dict[str, Any]:
    """The one shape of a finding for every reader: CLI text and JSON, dashboard, diff, CI.

    Takes a fresh :class:`Finding` or a stored ``findings`` row (recorder or analyzer) and
    returns :data:`FINDING_KEYS` (plus the row's ``id`` when stored): severity, area,
    reference and explanation come from the catalogue, except that a stored row keeps the
    severity it was written with.
    """
    if isinstance(f, Finding):
        code = f.code
        out: dict[str, Any] = {
            "code": code,
            "severity": f.severity,
            "title": f.title,
            "detail": f.detail,
            "frame_seqs": list(f.frame_seqs),
            "exchange": f.exchange,
            "source": "analyzer",
            "analyzer_version": ANALYZER_VERSION,
        }
    else:
        code = str(f.get("code") or "")
        entry = CATALOGUE.get(code)
        out = {
            "code": code,
            "severity": str(f.get("severity") or (entry.severity.value if entry else "info")),
            "title": f.get("title") or "",
            "detail": f.get("detail") or "",
            "frame_seqs": list(f.get("frame_seqs") or []),
            "exchange": f.get("exchange"),
            "source": f.get("source"),
            "analyzer_version": f.get("analyzer_version"),
        }
        if f.get("id") is not None:
            out["id"] = f.get("id")
    entry = CATALOGUE.get(code)
    out["area"] = entry.area if entry else code.split(".", 1)[0]
    out["spec"] = entry.spec if entry else ""
    out["explanation"] = entry.explanation if entry else ""
    return out


def finding_order(f: Finding | Mapping[str, Any]) -> tuple[int, int, str, int]:
    """The one order of findings: worst first, then by the first frame that proves it."""
    if isinstance(f, Finding):
        severity, seqs, code, ident = f.severity, f.frame_seqs, f.code, 0
    else:
        severity = str(f.get("severity"))
        seqs = f.get("frame_seqs") or []
        code, ident = str(f.get("code") or ""), int(f.get("id") or 0)
    first = int(seqs[0]) if seqs else 0
    return (-SEVERITY_RANK.get(severity, -1), first, code, ident)


class FindingSink:
    """Collects findings, keeping at most :data:`PER_CODE_CAP` rows per code.

    A session with 20,000 unanswered requests should not become 20,000 rows: the first ones are
    kept individually, the rest are counted into one summary finding that still points at their
    frames (up to :data:`MAX_SEQS`).
    """

    def __init__(self, cap: int = PER_CODE_CAP) -> None:
        self.cap = cap
        self.items: list[Finding] = []
        self._counts: dict[str, int] = {}
        self._overflow: dict[str, list[int]] = {}
        self._overflow_n: dict[str, int] = {}

    def add(
        self,
        code: str,
        title: str,
        detail: str = "",
        seqs: Iterable[int] = (),
        *,
        exchange: int | None = None,
    ) -> None:
        if code not in CATALOGUE:  # pragma: no cover - a programming error, caught by tests
            raise KeyError(f"finding code {code!r} is not in the catalogue")
        n = self._counts.get(code, 0) + 1
        self._counts[code] = n
        seq_list = sorted(set(seqs))
        if n <= self.cap:
            self.items.append(Finding(code, title, detail, seq_list[:MAX_SEQS], exchange))
            return
        self._overflow_n[code] = self._overflow_n.get(code, 0) + 1
        bucket = self._overflow.setdefault(code, [])
        if len(bucket) < MAX_SEQS:
            bucket.extend(seq_list[: MAX_SEQS - len(bucket)])

    def count(self, code: str) -> int:
        return self._counts.get(code, 0)

    def result(self) -> list[Finding]:
        out = list(self.items)
        for code, n in self._overflow_n.items():
            entry = CATALOGUE[code]
            out.append(
                Finding(
                    code,
                    f"{entry.title}: {n} more like the above",
                    f"{n} further occurrences of {code} were folded into this one finding; the"
                    " frames listed are the first of them.",
                    sorted(self._overflow.get(code, [])),
                )
            )
        out.sort(key=finding_order)
        return out


@dataclass(slots=True)
class SessionFacts:
    """What the whole session establishes: era, versions, capabilities, how it ended."""

    era: str | None = None
    version: str | None = None
    transport: str = "stdio"
    status: str = "ended"  # live | ended | crashed (from the session row; "ended" when unknown)
    exit_code: int | None = None
    exit_signal: int | None = None
    #: The fault rule that cut the connection (``disconnect``, docs/faults.md), as the recorder's
    #: ``inject.disconnect`` finding tells it: the session's end was mcptape's doing.
    fault_end: str | None = None
    initialize_seq: int | None = None
    initialize_result_seq: int | None = None
    initialize_failed: bool = False
    initialized_seq: int | None = None
    #: Monotonic stamps of the initialize result and of notifications/initialized (what the
    #: lifecycle check compares the other side's messages with, one message at a time).
    initialize_result_mono: int | None = None
    initialized_mono: int | None = None
    requested_version: str | None = None
    client_caps: dict[str, Any] | None = None
    server_caps: dict[str, Any] | None = None
    server_caps_seq: int | None = None
    session_id_header: str | None = None  # Mcp-Session-Id assigned by initialize (HTTP)
    first_envelope_seq: int | None = None
    #: The legacy HTTP+SSE transport (2024-11-05 style: GET /sse, POST /messages/): none of the
    #: Streamable HTTP header rules apply to it.
    legacy_sse: bool = False
    #: Wall-clock times of the first and last frame: the session's traffic, whatever the
    #: session row says (an HTTP session without DELETE "ends" only when the relay stops).
    first_ts: float | None = None
    last_ts: float | None = None
    #: An HTTP session that the client never closed (no DELETE): its end is its last frame.
    open_ended: bool = False

    @property
    def active_s(self) -> float | None:
        """Seconds from the first to the last frame (None without frames)."""
        if self.first_ts is None or self.last_ts is None:
            return None
        return max(0.0, self.last_ts - self.first_ts)

    @property
    def modern(self) -> bool:
        return self.era == ERA_MODERN

    @property
    def live(self) -> bool:
        return self.status == "live"


def severity_counts(findings: Iterable[Finding]) -> dict[str, int]:
    counts = {s.value: 0 for s in Severity}
    for f in findings:
        counts[f.severity] += 1
    return counts


def latency_ms(request_mono_ns: int, answer_mono_ns: int) -> float:
    """A request's latency as every view shows it: on the monotonic clock (the wall clock can
    step), in milliseconds cut to whole microseconds, never negative."""
    return max(0, answer_mono_ns - request_mono_ns) // 1000 / 1000
