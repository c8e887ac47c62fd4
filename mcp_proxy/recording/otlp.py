"""OpenTelemetry: each exchange of a recording as a span, as OTLP/JSON or sent over OTLP/HTTP.

The spans are built by :mod:`mcp_proxy.otel.spans` — the one span builder, which the live
export of ``mcptape record --otlp-endpoint`` (:mod:`mcp_proxy.otel.live`) uses too; its
docstring says how they follow the OpenTelemetry semantic conventions for MCP (each exchange is
its initiator's ``CLIENT`` span and the responder's ``SERVER`` span, each under its own
``service.name``). This module fills the builder's facts from the analysis (outcome, error
class, the ``Mcp-Session-Id`` of an HTTP session).

Each session is a trace whose root span covers the session; where a request carries a W3C
``traceparent`` in ``params._meta`` (SEP-414), its spans join that trace instead, with a link
back to the session span. Ids are derived from the session id and frame numbers, so the same
recording exports to the same bytes.

The spans are the SDK's ``ReadableSpan`` objects, encoded by the official OTLP exporter
packages — never by hand: ``opentelemetry-exporter-otlp-proto-common`` builds the protobuf
``ExportTraceServiceRequest`` (one per session, one JSON line each, the shape the collector's
``otlpjsonfile`` receiver reads) and ``opentelemetry-exporter-otlp-proto-http`` sends it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import UserError
from mcp_proxy.frames import parse_json
from mcp_proxy.otel.spans import (
    ExchangeFacts,
    Peer,
    SessionFacts,
    SpanBuilder,
    TaskFacts,
    http_version,
    traceparent,
)
from mcp_proxy.recording.model import (
    Progress,
    Recording,
    SessionRecording,
    analyse,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from mcp_proxy.analysis.model import Exchange


def _mcp_session_id(s: SessionRecording) -> str:
    """The protocol's session id (``Mcp-Session-Id``) when the session had one."""
    for ex in s.exchanges:
        for pairs in (ex.get("response_headers"), ex.get("request_headers")):
            for item in pairs or []:
                if isinstance(item, (list, tuple)) and str(item[0]).lower() == "mcp-session-id":
                    return str(item[1])
    return s.id


def _text(value: Any) -> str | None:
    return str(value) if value else None


def session_facts(s: SessionRecording) -> SessionFacts:
    row = s.session
    started = float(row.get("started_at") or 0.0)
    ended = row.get("ended_at") or (s.frames[-1]["ts"] if s.frames else started)
    return SessionFacts(
        id=s.id,
        mcp_session_id=_mcp_session_id(s),
        transport=_text(row.get("transport")),
        upstream=_text(row.get("upstream")),
        protocol_version=_text(row.get("protocol_version")),
        client=Peer(_text(row.get("client_name")), _text(row.get("client_version"))),
        server=Peer(_text(row.get("server_name")), _text(row.get("server_version"))),
        started_at=started,
        ended_at=float(ended),
        frames=len(s.frames),
        http_version=next(filter(None, (http_version(ex.get("meta")) for ex in s.exchanges)), None),
    )


def session_spans(s: SessionRecording) -> list[ReadableSpan]:
    """The session's root span and each exchange's spans, in request order."""
    analysis = analyse(s)
    build = SpanBuilder(session_facts(s))
    frames = {f["seq"]: f for f in s.frames}
    spans = [build.session_span()]
    polls: dict[int, list[Exchange]] = {}
    for ex in analysis.exchanges:
        if ex.task_of is not None and ex.method == "tasks/get":
            polls.setdefault(ex.task_of, []).append(ex)
    for ex in analysis.exchanges:
        request = frames.get(ex.request_seq)
        facts = ExchangeFacts(
            direction=ex.direction,
            method=ex.method,
            msg_id=ex.msg_id,
            request_seq=ex.request_seq,
            request_ts=ex.request_ts,
            response_ts=ex.response_ts,
            outcome=str(ex.outcome),
            name=ex.name,
            error_code=ex.error_code,
            error_message=ex.error_message,
            error_class=ex.error_class,
            traceparent=traceparent(parse_json(bytes(request["raw"]))) if request else None,
        )
        spans.extend(build.exchange_spans(facts))
        if ex.task is not None:
            spans.append(
                build.task_span(facts, _task_facts(ex, polls.get(ex.request_seq, []), frames))
            )
    return spans


def _task_facts(ex: Exchange, polls: list[Exchange], frames: dict[int, Any]) -> TaskFacts:
    """The task ``ex`` created, its status changes and polls as span events, in time order."""
    task = ex.task
    assert task is not None

    def at(seq: int) -> float:
        f = frames.get(seq)
        return float(f["ts"]) if f is not None else ex.request_ts

    events: list[tuple[float, str, int, str | None]]
    events = [(at(seq), "status", seq, st) for st, seq in task.lifecycle]
    events += [(p.request_ts, "poll", p.request_seq, None) for p in polls]
    events.sort(key=lambda e: (e[0], e[2]))
    end = at(task.ended_seq) if task.ended_seq is not None else None
    return TaskFacts(task.id, task.status, ex.request_ts, end, task.polls, tuple(events))


def _hex_ids(node: Any) -> Any:
    """proto3 JSON writes bytes as base64; OTLP/JSON wants trace and span ids in hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def otlp_json(spans: list[ReadableSpan]) -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` for the spans (encoded by the official code)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    message = encode_spans(spans)
    return _hex_ids(MessageToDict(message, use_integers_for_enums=True))


def iter_otlp_json(recording: Recording, progress: Progress | None = None) -> Iterator[bytes]:
    """One OTLP/JSON line per session (the collector's ``otlpjsonfile`` format)."""
    for s in recording.sessions:
        doc = otlp_json(session_spans(s))
        yield json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        if progress is not None:
            progress(len(s.frames))


def send_otlp(recording: Recording, url: str, progress: Progress | None = None) -> str:
    """Send every session's spans to an OTLP/HTTP endpoint (``…/v1/traces``)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url, timeout=5)
    sent = 0
    try:
        for s in recording.sessions:
            spans = session_spans(s)
            if exporter.export(spans) != SpanExportResult.SUCCESS:
                raise UserError(
                    f"the OTLP endpoint {url} did not accept the spans of session {s.label}"
                    " (is an OTLP/HTTP receiver listening there?)"
                )
            sent += len(spans)
            if progress is not None:
                progress(len(s.frames))
    finally:
        exporter.shutdown()
    return f"sent {sent} span(s) of {len(recording.sessions)} session(s) to {url}"


def _format() -> Any:
    from mcp_proxy.recording.registry import Format

    return Format(
        name="otlp",
        title="OpenTelemetry spans (OTLP/JSON, one line per session; -o http://…/v1/traces sends)",
        suffixes=(".otlp.json", ".otlp.jsonl"),
        media_type="application/json",
        write=iter_otlp_json,
        send=send_otlp,
    )


FORMAT = _format()
