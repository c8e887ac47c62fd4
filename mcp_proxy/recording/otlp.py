"""OpenTelemetry: each exchange of a recording as a span, as OTLP/JSON or sent over OTLP/HTTP.

Spans follow the OpenTelemetry semantic conventions for MCP (``docs/gen-ai/mcp.md`` in
open-telemetry/semantic-conventions-genai, status Development):

- name ``{mcp.method.name} {target}`` with the tool or prompt name as target, else the method;
- kind ``CLIENT`` (the span of whoever sent the request: the host, or the server for its own
  requests such as ``sampling/createMessage``);
- ``mcp.method.name``, ``jsonrpc.request.id`` (the id as a string), ``mcp.session.id`` (the
  ``Mcp-Session-Id`` of an HTTP session, else mcptape's session id), ``mcp.protocol.version``,
  ``gen_ai.tool.name`` and ``gen_ai.operation.name = execute_tool`` for ``tools/call``,
  ``gen_ai.prompt.name``, ``mcp.resource.uri``, ``network.transport`` (``pipe`` for stdio,
  ``tcp`` for HTTP), ``server.address``/``server.port`` of an HTTP upstream;
- status from mcptape's error taxonomy: a JSON-RPC error sets ``error.type`` and
  ``rpc.response.status_code`` to its code, a tool result with ``isError`` sets ``error.type =
  tool_error``, an exchange without an answer (cancelled, lost, no response, HTTP failure) sets
  ``error.type`` to that outcome; each of those makes the span status ``ERROR`` with the error's
  message. ``mcptape.outcome`` and ``mcptape.error_class`` (the taxonomy code) say more.

Each session is a trace whose root span covers the session; where a request carries a W3C
``traceparent`` in ``params._meta`` (SEP-414), its span joins that trace instead, with a link
back to the session span. Ids are derived from the session id and frame numbers, so the same
recording exports to the same bytes.

The spans are the SDK's ``ReadableSpan`` objects, encoded by the official OTLP exporter
packages — never by hand: ``opentelemetry-exporter-otlp-proto-common`` builds the protobuf
``ExportTraceServiceRequest`` (one per session, one JSON line each, the shape the collector's
``otlpjsonfile`` receiver reads) and ``opentelemetry-exporter-otlp-proto-http`` sends it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mcp_proxy import __version__
from mcp_proxy.errors import UserError
from mcp_proxy.frames import parse_json
from mcp_proxy.recording.model import (
    Progress,
    Recording,
    SessionRecording,
    analyse,
)
from mcp_proxy.store.rows import utf8_text

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: Outcomes of :class:`mcp_proxy.analysis.model.Exchange` that are not failures.
_FINE = frozenset({"ok", "input_required", "closed", "pending"})
_TARGETED = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})


def _ident(n: int, *parts: object) -> int:
    """A deterministic, non-zero id of ``n`` bytes from the parts (trace ids, span ids)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:n], "big") or 1


def _request_id(msg_id: str) -> str:
    """``jsonrpc.request.id``: the id as a string (``"abc"`` → ``abc``, ``7`` → ``7``)."""
    try:
        value = json.loads(msg_id)
    except ValueError:
        return msg_id
    return value if isinstance(value, str) else msg_id


def _traceparent(msg: Any) -> tuple[int, int, int] | None:
    """``(trace id, parent span id, flags)`` from ``params._meta.traceparent``, if valid."""
    params = msg.get("params") if isinstance(msg, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get("traceparent") if isinstance(meta, dict) else None
    if not isinstance(value, str):
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, flags


def _session_attrs(s: SessionRecording) -> dict[str, Any]:
    row = s.session
    attrs: dict[str, Any] = {"mcp.session.id": _mcp_session_id(s), "mcptape.session.id": s.id}
    if row.get("protocol_version"):
        attrs["mcp.protocol.version"] = str(row["protocol_version"])
    if row.get("transport") == "stdio":
        attrs["network.transport"] = "pipe"
    else:
        attrs["network.transport"] = "tcp"
        attrs["network.protocol.name"] = "http"
        upstream = urlsplit(str(row.get("upstream") or ""))
        if upstream.hostname:
            attrs["server.address"] = upstream.hostname
            if upstream.port:
                attrs["server.port"] = upstream.port
    return attrs


def _mcp_session_id(s: SessionRecording) -> str:
    """The protocol's session id (``Mcp-Session-Id``) when the session had one."""
    for ex in s.exchanges:
        for pairs in (ex.get("response_headers"), ex.get("request_headers")):
            for item in pairs or []:
                if isinstance(item, (list, tuple)) and str(item[0]).lower() == "mcp-session-id":
                    return str(item[1])
    return s.id


def _exchange_attrs(ex: Any, base: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A span's attributes and, when it failed, its status description."""
    attrs = dict(base)
    attrs["mcp.method.name"] = ex.method
    attrs["jsonrpc.request.id"] = _request_id(ex.msg_id)
    target_key = _TARGETED.get(ex.method)
    if target_key and ex.name:
        attrs[target_key] = ex.name
    if ex.method == "tools/call":
        attrs["gen_ai.operation.name"] = "execute_tool"
    if ex.method in _RESOURCE_METHODS and ex.name:
        attrs["mcp.resource.uri"] = ex.name
    attrs["mcptape.outcome"] = ex.outcome
    attrs["mcptape.direction"] = ex.direction
    if ex.error_class:
        attrs["mcptape.error_class"] = ex.error_class
    if ex.error_code is not None:
        attrs["error.type"] = str(ex.error_code)
        attrs["rpc.response.status_code"] = str(ex.error_code)
        return attrs, ex.error_message or f"JSON-RPC error {ex.error_code}"
    if ex.outcome == "tool_error":
        attrs["error.type"] = "tool_error"
        return attrs, ex.error_message or "the tool reported an error (isError)"
    if ex.outcome not in _FINE:
        attrs["error.type"] = ex.outcome
        return attrs, ex.error_message or ex.outcome.replace("_", " ")
    return attrs, None


def _utf8(value: Any) -> Any:
    """A string as OTLP can carry it: a lone surrogate (``"\\ud800"`` in a frame's JSON, which
    no UTF-8 holds) written as the six characters ``\\ud800``, as the database stores it."""
    return utf8_text(value) if type(value) is str else value


def _utf8_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: _utf8(value) for key, value in attrs.items()}


def _ns(ts: float | None) -> int:
    return round((ts or 0.0) * 1e9)


def session_spans(s: SessionRecording) -> list[ReadableSpan]:
    """The session's root span and one span per exchange, in request order."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    analysis = analyse(s)
    resource = Resource({"service.name": "mcptape", "service.version": __version__})
    scope = InstrumentationScope("mcptape", __version__)
    base = _utf8_attrs(_session_attrs(s))
    trace_id = _ident(16, "trace", s.id)
    root = SpanContext(trace_id, _ident(8, "session", s.id), False, TraceFlags(1))
    frames = {f["seq"]: f for f in s.frames}
    started = float(s.session.get("started_at") or 0.0)
    ended = s.session.get("ended_at") or (s.frames[-1]["ts"] if s.frames else started)
    spans = [
        ReadableSpan(
            name="mcp session",
            context=root,
            resource=resource,
            attributes={**base, "mcptape.frames": len(s.frames)},
            kind=SpanKind.INTERNAL,
            instrumentation_scope=scope,
            start_time=_ns(started),
            end_time=_ns(max(float(ended), started)),
        )
    ]
    for ex in analysis.exchanges:
        attrs, failure = _exchange_attrs(ex, base)
        attrs, failure = _utf8_attrs(attrs), _utf8(failure)
        request = frames.get(ex.request_seq)
        joined = _traceparent(parse_json(bytes(request["raw"]))) if request else None
        span_id = _ident(8, "exchange", s.id, ex.request_seq)
        if joined is not None:
            ctx = SpanContext(joined[0], span_id, False, TraceFlags(joined[2] & 1))
            parent = SpanContext(joined[0], joined[1], True, TraceFlags(joined[2] & 1))
            links = [Link(root, {"mcptape.link": "session"})]
        else:
            ctx = SpanContext(trace_id, span_id, False, TraceFlags(1))
            parent, links = root, []
        name = ex.method + (f" {ex.name}" if ex.method in _TARGETED and ex.name else "")
        end = ex.response_ts if ex.response_ts is not None else ex.request_ts
        spans.append(
            ReadableSpan(
                name=_utf8(name),
                context=ctx,
                parent=parent,
                resource=resource,
                attributes=attrs,
                links=links,
                kind=SpanKind.CLIENT,
                instrumentation_scope=scope,
                status=Status(StatusCode.ERROR, failure) if failure else Status(StatusCode.UNSET),
                start_time=_ns(ex.request_ts),
                end_time=_ns(max(end, ex.request_ts)),
            )
        )
    return spans


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
