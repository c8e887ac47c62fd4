"""Live OpenTelemetry: each exchange's spans sent to an OTLP/HTTP endpoint as it finishes.

``mcptape record --otlp-endpoint URL`` (or the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
/ ``OTEL_EXPORTER_OTLP_ENDPOINT``) makes the recorder process hand every batch it builds to a
:class:`LiveExporter`: :meth:`LiveExporter.observe` picks out the requests, answers, cancels and
task status notifications (and the sessions' facts and ends) and queues them — bounded, never blocking, never touching
the batch the database gets. A thread of its own pairs them, builds the spans with the one
span builder (:mod:`mcp_proxy.otel.spans`, the same ids as ``mcptape export --format otlp``) and
POSTs protobuf ``ExportTraceServiceRequest`` batches with a short timeout. A task an answer
created (MCP tasks) is followed (:mod:`mcp_proxy.otel.live_tasks`) and its span sent when it ends.

The relay is a different process, so none of this is on its path; the recording never waits for
the collector. A collector that is down or slow costs spans, not frames: they are dropped and
counted, said on stderr in one line when it first happens and counted in one line at the end.
The OTel SDK's exporter is not used for sending: its retries block and log several lines each.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from mcp_proxy.frames import parse_json
from mcp_proxy.limits import (
    OTLP_BACKOFF_MAX,
    OTLP_BACKOFF_MIN,
    OTLP_BATCH_SPANS,
    OTLP_CLOSE_PATIENCE,
    OTLP_FLUSH_SECONDS,
    OTLP_FRAME_BYTES,
    OTLP_PENDING,
    OTLP_POST_TIMEOUT,
    OTLP_QUEUE_BYTES,
    OTLP_QUEUE_FRAMES,
    OTLP_SESSIONS,
    OTLP_TAIL_BYTES,
)
from mcp_proxy.otel.live_tasks import STATUS_NOTIFICATIONS, Ended, LiveTasks
from mcp_proxy.otel.spans import (
    RECORDER_SERVICE,
    SIDES,
    ExchangeFacts,
    Peer,
    SessionFacts,
    Sides,
    SpanBuilder,
    encode,
    http_version,
    traceparent,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from mcp_proxy.store.rows import Batch, FrameRow

#: What ``--otlp-endpoint`` sets for the recorder process (it outranks the OTEL_* variables).
ENDPOINT_ENV = "MCPTAPE_OTLP_ENDPOINT"
#: ``client`` or ``both`` (the default): see :data:`mcp_proxy.otel.spans.Sides`.
SIDES_ENV = "MCPTAPE_OTLP_SPANS"
_ANSWERS = frozenset({"response", "error"})
_IS_ERROR = re.compile(rb'"isError"\s*:\s*true')


@dataclass(frozen=True, slots=True)
class LiveConfig:
    endpoint: str
    service: str = RECORDER_SERVICE
    sides: Sides = "both"
    headers: tuple[tuple[str, str], ...] = ()


def _headers(text: str) -> tuple[tuple[str, str], ...]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs, comma-separated, URL-encoded."""
    out = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out.append((unquote(key.strip()), unquote(value.strip())))
    return tuple(out)


def live_config(env: Mapping[str, str]) -> LiveConfig | None:
    """Where to send spans, from ``--otlp-endpoint`` (``MCPTAPE_OTLP_ENDPOINT``) or the
    standard variables; None when nothing asks for it (or ``OTEL_SDK_DISABLED=true``)."""
    endpoint = env.get(ENDPOINT_ENV) or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint:
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return None
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if not base:
            return None
        endpoint = base.rstrip("/") + "/v1/traces"
    sides = env.get(SIDES_ENV, "both")
    headers = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get(
        "OTEL_EXPORTER_OTLP_HEADERS", ""
    )
    return LiveConfig(
        endpoint=endpoint.strip(),
        service=env.get("OTEL_SERVICE_NAME") or RECORDER_SERVICE,
        sides=sides if sides in SIDES else "both",  # type: ignore[arg-type]
        headers=_headers(headers),
    )


@dataclass(slots=True)
class _Pending:
    frame: FrameRow
    msg: Any


@dataclass(slots=True)
class _Session:
    row: dict[str, Any]
    mcp_session_id: str | None = None
    http_version: str | None = None
    frames: int = 0
    builder: SpanBuilder | None = None
    #: (request direction, msg_id) → the request.
    pending: dict[tuple[str, str], _Pending] = field(default_factory=dict)

    def facts(self, sid: str) -> SessionFacts:
        r = self.row

        def text(key: str) -> str | None:
            value = r.get(key)
            return str(value) if value else None

        return SessionFacts(
            id=sid,
            mcp_session_id=self.mcp_session_id or sid,
            transport=text("transport"),
            upstream=text("upstream"),
            protocol_version=text("protocol_version"),
            client=Peer(text("client_name"), text("client_version")),
            server=Peer(text("server_name"), text("server_version")),
            started_at=float(r.get("started_at") or 0.0),
            ended_at=float(r["ended_at"]) if r.get("ended_at") else None,
            frames=self.frames,
            http_version=self.http_version,
        )


@dataclass(slots=True)
class LiveStats:
    sent: int = 0
    dropped: int = 0
    reason: str | None = None


def _post(url: str, body: bytes, headers: tuple[tuple[str, str], ...]) -> None:
    import urllib.request

    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/x-protobuf")
    for key, value in headers:
        req.add_header(key, value)
    with urllib.request.urlopen(req, timeout=OTLP_POST_TIMEOUT) as resp:
        resp.read(64 << 10)


def _why(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if isinstance(code, int):  # urllib.error.HTTPError
        return f"HTTP {code}"
    reason = getattr(exc, "reason", None)
    text = str(reason if reason is not None else exc) or type(exc).__name__
    return text.splitlines()[0]


def _say(msg: str) -> None:
    print(f"mcptape: {msg}", file=sys.stderr, flush=True)


class LiveExporter:
    """Spans of finished exchanges, sent from a thread of the recorder process."""

    def __init__(
        self,
        config: LiveConfig,
        *,
        warn: Callable[[str], None] = _say,
        post: Callable[[str, bytes, tuple[tuple[str, str], ...]], None] = _post,
        start: bool = True,
    ) -> None:
        self.config = config
        self.stats = LiveStats()
        self._warn = warn
        self._warned = False
        self._count_lock = threading.Lock()
        self._post = post
        self._lock = threading.Condition()
        self._queue: deque[tuple[str, Any]] = deque()
        self._queued_frames = 0
        self._queued_bytes = 0
        self._closing = False
        #: Sessions whose ``Mcp-Session-Id`` is known (read on the recorder's thread only).
        self._known_ids: set[str] = set()
        # The exporter thread's own state.
        self._sessions: dict[str, _Session] = {}
        self._open = 0
        self._out: list[ReadableSpan] = []
        #: Tasks the answers created, sent as a span of their own when they end.
        self._tasks = LiveTasks()
        self._due = 0.0
        self._per_request = 2 if config.sides == "both" else 1
        #: After a failed POST the collector is left alone this long (doubling, up to
        #: ``OTLP_BACKOFF_MAX``): what finishes meanwhile is counted, not built nor sent.
        self._down_until = 0.0
        self._backoff = OTLP_BACKOFF_MIN
        self._down_reason = ""
        self._thread = threading.Thread(target=self._run, name="mcptape-otlp", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start the exporter's thread (the constructor does, unless told not to)."""
        self._thread.start()

    # ------------------------------------------------------------------ the recorder's thread
    def observe(self, batch: Batch) -> None:
        """Queue what of ``batch`` makes spans; never blocks (past the limits: counted)."""
        try:
            self._observe(batch)
        except Exception as exc:  # the batch is written all the same
            self._dropped(len(batch.frames), f"{type(exc).__name__} reading a batch")

    def _observe(self, batch: Batch) -> None:
        items: list[tuple[str, Any]] = []
        for row in batch.sessions:
            items.append(("start", dict(row)))
        for _local_id, ex in batch.exchanges:
            sid = ex.get("session_id")
            if sid and sid not in self._known_ids:
                found, version = _mcp_session_id(ex), http_version(ex.get("meta"))
                if version:
                    items.append(("http_version", (sid, version)))
                if found:
                    self._known_ids.add(sid)
                    items.append(("mcp_id", (sid, found)))
        frames, dropped = [], 0
        for f in batch.frames:
            if (
                f.kind == "request"
                or f.kind in _ANSWERS
                or f.method == "notifications/cancelled"
                or f.method in STATUS_NOTIFICATIONS
            ):
                if len(f.raw) > OTLP_FRAME_BYTES:
                    f = f._replace(raw=bytes(f.raw[-OTLP_TAIL_BYTES:]), partial_parse=True)
                frames.append(f)
        for sid, (count, _updated) in batch.session_counts.items():
            items.append(("count", (sid, count)))
        ends = []
        for sid, fields in batch.session_updates.items():
            items.append(("update", (sid, dict(fields))))  # names, versions: before the frames
            if fields.get("ended_at"):
                ends.append(("end", sid))  # after them
        with self._lock:
            if self._closing:
                return
            self._queue.extend(items)
            room = OTLP_QUEUE_FRAMES - self._queued_frames
            for f in frames:
                if room <= 0 or self._queued_bytes + len(f.raw) > OTLP_QUEUE_BYTES:
                    # A request's spans are lost; an answer's request is still sent, with
                    # the outcome it has when its session ends.
                    dropped += self._per_request if f.kind == "request" else 0
                    continue
                room -= 1
                self._queued_frames += 1
                self._queued_bytes += len(f.raw)
                self._queue.append(("frame", f))
            # Session facts and ends (a few small rows per session, never dropped) around the
            # frames of the same batch.
            self._queue.extend(ends)
            self._lock.notify()
        self._dropped(dropped, "the exporter's queue was full")

    def close(self, patience: float = OTLP_CLOSE_PATIENCE) -> LiveStats:
        """End every session still open, send what is left (for at most ``patience`` s)."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        if self._thread.ident is None:
            self.start()
        self._thread.join(patience)
        if self._thread.is_alive():
            with self._lock:
                left = self._queued_frames
            self._dropped(len(self._out) + left, "time ran out sending at exit")
        if self.stats.dropped:
            self._warn(
                f"live OpenTelemetry: {self.stats.dropped} span(s) were not sent to"
                f" {self.config.endpoint} ({self.stats.reason}); the recording does not miss them"
            )
        return self.stats

    # ------------------------------------------------------------------ the exporter's thread
    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue and not self._closing:
                    self._lock.wait(OTLP_FLUSH_SECONDS if self._out else None)
                items = list(self._queue)
                self._queue.clear()
                self._queued_frames = self._queued_bytes = 0
                closing = self._closing
            for kind, value in items:
                try:
                    self._handle(kind, value)
                except Exception as exc:  # a malformed frame costs its span, never the thread
                    self._dropped(1, f"{type(exc).__name__} building a span")
            if closing:
                for sid in list(self._sessions):
                    self._end(sid)
                self._send()
                return
            if self._out and (len(self._out) >= OTLP_BATCH_SPANS or time.monotonic() >= self._due):
                self._send()

    def _handle(self, kind: str, value: Any) -> None:
        if kind == "frame":
            self._frame(value)
        elif kind == "start":
            st = self._session(str(value.get("id")))
            st.row.update(value)
            st.builder = None
        elif kind == "update":
            sid, fields = value
            st = self._session(sid)
            st.row.update(fields)
            st.builder = None  # names or version may have changed
        elif kind == "count":
            sid, count = value
            self._session(sid).frames = count
        elif kind == "end":
            self._end(value)
        elif kind == "mcp_id":
            sid, found = value
            st = self._session(sid)
            st.mcp_session_id, st.builder = found, None
        elif kind == "http_version":
            sid, version = value
            st = self._session(sid)
            if st.http_version is None:
                st.http_version, st.builder = version, None

    def _session(self, sid: str) -> _Session:
        st = self._sessions.get(sid)
        if st is None:
            if len(self._sessions) >= OTLP_SESSIONS:
                self._end(next(iter(self._sessions)))
            st = self._sessions[sid] = _Session({"id": sid})
        return st

    def _frame(self, f: FrameRow) -> None:
        st = self._session(f.session_id)
        msg = None if f.partial_parse else parse_json(bytes(f.raw))
        if f.kind == "request":
            if f.msg_id is None:
                return
            if self._open >= OTLP_PENDING:
                self._evict_oldest()
            st.pending[(f.direction, f.msg_id)] = _Pending(f, msg)
            self._open += 1
            self._tasks.request(f.session_id, f.method, msg, f.seq, f.ts)
            return
        asker = "s2c" if f.direction == "c2s" else "c2s"
        if f.kind in _ANSWERS:
            req = st.pending.pop((asker, f.msg_id or ""), None)
            if req is not None:
                self._open -= 1
                self._finished(f.session_id, st, req, f, msg)
            return
        if f.method in STATUS_NOTIFICATIONS:
            self._send_tasks(
                f.session_id, st, self._tasks.notification(f.session_id, msg, f.seq, f.ts)
            )
            return
        # notifications/cancelled: the request it names ends here (sent by the asker).
        params = msg.get("params") if isinstance(msg, dict) else None
        target = params.get("requestId") if isinstance(params, dict) else None
        if target is None:
            return
        req = st.pending.pop((f.direction, json.dumps(target)), None)
        if req is not None:
            self._open -= 1
            reason = params.get("reason") if isinstance(params, dict) else None
            self._emit(f.session_id, st, req, f.ts, "cancelled", message=_text(reason))

    def _finished(self, sid: str, st: _Session, req: _Pending, answer: FrameRow, msg: Any) -> None:
        if answer.error_code is not None or answer.kind == "error":
            error = msg.get("error") if isinstance(msg, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            facts = self._emit(
                sid, st, req, answer.ts, "error", code=answer.error_code, message=_text(message)
            )
        else:
            result = msg.get("result") if isinstance(msg, dict) else None
            if isinstance(result, dict):
                failed = result.get("isError") is True
                outcome = "input_required" if result.get("resultType") == "input_required" else "ok"
            else:
                failed = bool(answer.partial_parse) and bool(_IS_ERROR.search(bytes(answer.raw)))
                outcome = "ok"
            facts = self._emit(sid, st, req, answer.ts, "tool_error" if failed else outcome)
        ended = self._tasks.answer(sid, facts, req.msg, msg, answer.seq, answer.ts)
        self._send_tasks(sid, st, ended)

    def _send_tasks(self, sid: str, st: _Session, ended: list[Ended]) -> None:
        """The span of each task that ended (or is sent unended)."""
        for creator, task in ended:
            if self._resting():
                self._dropped(1, self._down_reason)
            else:
                self._add([self._builder(sid, st).task_span(creator, task)])

    def _emit(
        self,
        sid: str,
        st: _Session,
        req: _Pending,
        end: float | None,
        outcome: str,
        *,
        code: int | None = None,
        message: str | None = None,
    ) -> ExchangeFacts:
        """Send the request's spans (unless the collector rests); its facts."""
        f, msg = req.frame, req.msg
        params = msg.get("params") if isinstance(msg, dict) else None
        name = None
        if isinstance(params, dict):
            name = params.get("name") if f.method in ("tools/call", "prompts/get") else None
            if name is None and isinstance(params.get("uri"), str):
                name = params["uri"]
        facts = ExchangeFacts(
            direction=f.direction,
            method=f.method or "",
            msg_id=f.msg_id or "",
            request_seq=f.seq,
            request_ts=f.ts,
            response_ts=end,
            outcome=outcome,
            name=_text(name),
            error_code=code,
            error_message=message,
            traceparent=traceparent(msg),
        )
        if self._resting():
            self._dropped(self._per_request, self._down_reason)
        else:
            self._add(self._builder(sid, st).exchange_spans(facts))
        return facts

    def _builder(self, sid: str, st: _Session) -> SpanBuilder:
        if st.builder is None:
            st.builder = SpanBuilder(
                st.facts(sid), sides=self.config.sides, service=self.config.service
            )
        return st.builder

    def _end(self, sid: str) -> None:
        """The session ended (or is forgotten): its unanswered requests, then its span."""
        st = self._sessions.pop(sid, None)
        if st is None:
            return
        ended = st.row.get("ended_at")
        for req in st.pending.values():
            self._open -= 1
            self._emit(sid, st, req, float(ended) if ended else None, "no_response")
        st.pending.clear()
        self._send_tasks(sid, st, self._tasks.session_ended(sid))
        st.builder = None
        if self._resting():
            self._dropped(1, self._down_reason)
            return
        self._add([SpanBuilder(st.facts(sid), service=self.config.service).session_span()])

    def _evict_oldest(self) -> None:
        for sid, st in self._sessions.items():
            if st.pending:
                key = next(iter(st.pending))
                req = st.pending.pop(key)
                self._open -= 1
                self._emit(sid, st, req, None, "pending")
                return

    def _add(self, spans: list[ReadableSpan]) -> None:
        if not self._out:
            self._due = time.monotonic() + OTLP_FLUSH_SECONDS
        self._out.extend(spans)

    def _resting(self) -> bool:
        """True while a collector that failed is left alone (spans are counted, not built)."""
        return self._down_until > 0 and time.monotonic() < self._down_until

    def _send(self) -> None:
        while self._out:
            chunk, self._out = self._out[:OTLP_BATCH_SPANS], self._out[OTLP_BATCH_SPANS:]
            if self._resting():
                self._dropped(len(chunk), self._down_reason)
                continue
            try:
                self._post(self.config.endpoint, encode(chunk), self.config.headers)
            except Exception as exc:  # down, slow, refusing: the spans go, the recording stays
                self._down_reason = f"{self.config.endpoint}: {_why(exc)}"
                self._down_until = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, OTLP_BACKOFF_MAX)
                self._dropped(len(chunk), self._down_reason)
            else:
                self.stats.sent += len(chunk)
                self._down_until, self._backoff = 0.0, OTLP_BACKOFF_MIN

    def _dropped(self, n: int, reason: str) -> None:
        """Count ``n`` spans not sent (from either thread); say so once."""
        if n <= 0:
            return
        with self._count_lock:
            self.stats.dropped += n
            if self.stats.reason is None:
                self.stats.reason = reason
            first, self._warned = not self._warned, True
        if first:
            self._warn(
                f"live OpenTelemetry: spans are dropped and counted ({reason});"
                " the recording goes on"
            )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _mcp_session_id(ex: Mapping[str, Any]) -> str | None:
    """``Mcp-Session-Id`` of an HTTP exchange row (response first, then request)."""
    for pairs in (ex.get("response_headers"), ex.get("request_headers")):
        for item in pairs or ():
            if isinstance(item, (list, tuple)) and str(item[0]).lower() == "mcp-session-id":
                return str(item[1])
    return None
