"""The one span builder: an MCP exchange as OpenTelemetry spans, per the semantic conventions.

The conventions (``docs/gen-ai/mcp.md`` of open-telemetry/semantic-conventions-genai, status
Development) describe two spans per call: the ``CLIENT`` span of whoever *initiated* the request
and the ``SERVER`` span of whoever *answered* it. mcptape sits between the two, so it can draw
both: a host → server call (``tools/call``) is a ``CLIENT`` span under the host's
``service.name`` (``clientInfo.name``) with a ``SERVER`` child under the server's
(``serverInfo.name``); a server → host call (``sampling/createMessage``, ``elicitation/create``,
``roots/list``) is the other way round. ``sides="client"`` emits the initiator's span only (for
backends that also get the peers' own spans).

Inputs are typed facts (:class:`SessionFacts`, :class:`ExchangeFacts`): the recording export
fills them from the analysis, the live exporter from the frames as they are recorded; both get
the same spans with the same ids for the same exchange (ids derive from the session id and the
request's frame number).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from mcp_proxy import __version__
from mcp_proxy.limits import OTLP_TASK_EVENTS
from mcp_proxy.store.rows import utf8_text

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

#: Which spans an exchange becomes: the initiator's CLIENT span, or also the responder's SERVER
#: span (the default: a service map then draws host → server and server → host edges).
Sides = Literal["client", "both"]
SIDES: tuple[Sides, ...] = ("both", "client")

#: ``service.name`` of a peer whose ``clientInfo`` / ``serverInfo`` is not known (yet).
UNKNOWN_CLIENT = "mcp-client"
UNKNOWN_SERVER = "mcp-server"
#: mcptape's own service (the session span); ``OTEL_SERVICE_NAME`` renames it.
RECORDER_SERVICE = "mcptape"

#: Outcomes that are not failures (:class:`mcp_proxy.analysis.model.Outcome` values).
FINE = frozenset({"ok", "input_required", "closed", "pending"})
TARGETED = {"tools/call": "gen_ai.tool.name", "prompts/get": "gen_ai.prompt.name"}
RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})


@dataclass(frozen=True, slots=True)
class Peer:
    name: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What the spans of one session share."""

    id: str
    #: The protocol's ``Mcp-Session-Id`` when the session had one, else mcptape's id.
    mcp_session_id: str
    transport: str | None = None
    upstream: str | None = None
    protocol_version: str | None = None
    client: Peer = Peer()
    server: Peer = Peer()
    started_at: float = 0.0
    ended_at: float | None = None
    frames: int = 0
    #: The HTTP version the host spoke (an exchange's ``meta.http_version``): ``1.1``, ``2``.
    http_version: str | None = None


@dataclass(frozen=True, slots=True)
class TraceParent:
    """W3C trace context a request carried in ``params._meta`` (SEP-414)."""

    trace_id: int
    span_id: int
    flags: int
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class ExchangeFacts:
    """One request and what became of it."""

    direction: str  # of the request: "c2s" (the host asked) or "s2c" (the server asked)
    method: str
    msg_id: str
    request_seq: int
    request_ts: float
    response_ts: float | None
    outcome: str
    name: str | None = None  # tool / prompt name or resource URI
    error_code: int | None = None
    error_message: str | None = None
    error_class: str | None = None
    traceparent: TraceParent | None = None


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """A task an exchange created (MCP tasks): its life from the creating request to its
    terminal status (``end_ts`` None: it never ended; the span then ends at its last event),
    and what happened on the way, in time order: ``(ts, name, seq, status)`` with ``name``
    ``status`` (a status change) or ``poll`` (a ``tasks/get``)."""

    id: str
    status: str
    start_ts: float
    end_ts: float | None
    polls: int
    events: tuple[tuple[float, str, int, str | None], ...] = ()
    #: events not in ``events`` (the live exporter keeps at most ``OTLP_TASK_EVENTS``)
    events_dropped: int = 0


def ident(n: int, *parts: object) -> int:
    """A deterministic, non-zero id of ``n`` bytes from the parts (trace ids, span ids)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:n], "big") or 1


def trace_id(session_id: str) -> int:
    return ident(16, "trace", session_id)


def session_span_id(session_id: str) -> int:
    return ident(8, "session", session_id)


def request_id(msg_id: str) -> str:
    """``jsonrpc.request.id``: the id as a string (``"abc"`` → ``abc``, ``7`` → ``7``)."""
    try:
        value = json.loads(msg_id)
    except ValueError:
        return msg_id
    return value if isinstance(value, str) else msg_id


def traceparent(msg: Any) -> TraceParent | None:
    """The W3C ``traceparent`` (and ``tracestate``) of ``params._meta``, if valid."""
    params = msg.get("params") if isinstance(msg, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return None
    value = meta.get("traceparent")
    if not isinstance(value, str):
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
        return None
    try:
        tid, sid, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if not tid or not sid:
        return None
    state = meta.get("tracestate")
    return TraceParent(tid, sid, flags, state if isinstance(state, str) else None)


def utf8(value: Any) -> Any:
    """A string as OTLP can carry it: a lone surrogate (``"\\ud800"`` in a frame's JSON, which
    no UTF-8 holds) written as the six characters ``\\ud800``, as the database stores it."""
    return utf8_text(value) if type(value) is str else value


def _utf8_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: utf8(value) for key, value in attrs.items()}


def ns(ts: float | None) -> int:
    return round((ts or 0.0) * 1e9)


def protocol_version(http_version: Any) -> str | None:
    """``network.protocol.version`` from a recorded HTTP version (``HTTP/2.0`` → ``2``,
    ``1.1`` → ``1.1``), None when unknown."""
    if not isinstance(http_version, str) or not http_version:
        return None
    text = http_version.upper().removeprefix("HTTP/").strip()
    return text.removesuffix(".0") if text in ("2.0", "3.0") else text or None


def http_version(meta: Any) -> str | None:
    """``meta.http_version`` of an exchange row (a dict, or its JSON text)."""
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    value = meta.get("http_version") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def session_attrs(s: SessionFacts) -> dict[str, Any]:
    """The attributes every span of the session carries."""
    attrs: dict[str, Any] = {"mcp.session.id": s.mcp_session_id, "mcptape.session.id": s.id}
    if s.protocol_version:
        attrs["mcp.protocol.version"] = s.protocol_version
    if s.transport == "stdio":
        attrs["network.transport"] = "pipe"
    else:
        attrs["network.transport"] = "tcp"
        attrs["network.protocol.name"] = "http"
        version = protocol_version(s.http_version)
        if version:
            attrs["network.protocol.version"] = version
        upstream = urlsplit(s.upstream or "")
        if upstream.hostname:
            attrs["server.address"] = upstream.hostname
            if upstream.port:
                attrs["server.port"] = upstream.port
    return _utf8_attrs(attrs)


def exchange_attrs(ex: ExchangeFacts, base: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A span's attributes and, when it failed, its status description."""
    attrs = dict(base)
    attrs["mcp.method.name"] = ex.method
    attrs["jsonrpc.request.id"] = request_id(ex.msg_id)
    target_key = TARGETED.get(ex.method)
    if target_key and ex.name:
        attrs[target_key] = ex.name
    if ex.method == "tools/call":
        attrs["gen_ai.operation.name"] = "execute_tool"
    if ex.method in RESOURCE_METHODS and ex.name:
        attrs["mcp.resource.uri"] = ex.name
    attrs["mcptape.outcome"] = ex.outcome
    attrs["mcptape.direction"] = ex.direction
    failure: str | None = None
    if ex.error_class:
        attrs["mcptape.error_class"] = ex.error_class
    if ex.error_code is not None:
        attrs["error.type"] = str(ex.error_code)
        attrs["rpc.response.status_code"] = str(ex.error_code)
        failure = ex.error_message or f"JSON-RPC error {ex.error_code}"
    elif ex.outcome == "tool_error":
        attrs["error.type"] = "tool_error"
        failure = ex.error_message or "the tool reported an error (isError)"
    elif ex.outcome not in FINE:
        attrs["error.type"] = ex.outcome
        failure = ex.error_message or ex.outcome.replace("_", " ")
    return _utf8_attrs(attrs), utf8(failure)


def service_names(s: SessionFacts) -> tuple[str, str]:
    """``service.name`` of the host's client and of the server, from clientInfo/serverInfo."""
    server = s.server.name
    if not server and s.upstream:
        server = urlsplit(s.upstream).hostname
    return utf8(s.client.name or UNKNOWN_CLIENT), utf8(server or UNKNOWN_SERVER)


def _resource(name: str, version: str | None) -> Resource:
    from opentelemetry.sdk.resources import Resource

    attrs = {"service.name": name}
    if version:
        attrs["service.version"] = utf8(version)
    return Resource(attrs)


class SpanBuilder:
    """Spans of one session; holds its resources (one per service) and shared attributes."""

    def __init__(
        self, s: SessionFacts, *, sides: Sides = "both", service: str = RECORDER_SERVICE
    ) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.facts = s
        self.sides = sides
        self.base = session_attrs(s)
        client, server = service_names(s)
        self.client = _resource(client, s.client.version)
        self.server = _resource(server, s.server.version)
        self.recorder = _resource(service, __version__)
        self.scope = InstrumentationScope("mcptape", __version__)
        self.trace_id = trace_id(s.id)

    def _root(self) -> SpanContext:
        from opentelemetry.trace import SpanContext, TraceFlags

        return SpanContext(self.trace_id, session_span_id(self.facts.id), False, TraceFlags(1))

    def session_span(self) -> ReadableSpan:
        """The session's root span (mcptape's service, kind INTERNAL)."""
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanKind

        s = self.facts
        end = s.ended_at if s.ended_at is not None else s.started_at
        return ReadableSpan(
            name="mcp session",
            context=self._root(),
            resource=self.recorder,
            attributes={**self.base, "mcptape.frames": s.frames},
            kind=SpanKind.INTERNAL,
            instrumentation_scope=self.scope,
            start_time=ns(s.started_at),
            end_time=ns(max(end, s.started_at)),
        )

    def exchange_spans(self, ex: ExchangeFacts) -> list[ReadableSpan]:
        """The initiator's CLIENT span and (``sides="both"``) the responder's SERVER span."""
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
        from opentelemetry.trace.status import Status, StatusCode

        attrs, failure = exchange_attrs(ex, self.base)
        root = self._root()
        span_id = ident(8, "exchange", self.facts.id, ex.request_seq)
        tp = ex.traceparent
        if tp is not None:
            flags = TraceFlags(tp.flags & 1)
            state = TraceState.from_header([tp.tracestate]) if tp.tracestate else None
            ctx = SpanContext(tp.trace_id, span_id, False, flags, state)
            parent = SpanContext(tp.trace_id, tp.span_id, True, flags, state)
            links = [Link(root, {"mcptape.link": "session"})]
        else:
            ctx = SpanContext(self.trace_id, span_id, False, TraceFlags(1))
            parent, links = root, []
        name = utf8(ex.method + (f" {ex.name}" if ex.method in TARGETED and ex.name else ""))
        end = ex.response_ts if ex.response_ts is not None else ex.request_ts
        start, stop = ns(ex.request_ts), ns(max(end, ex.request_ts))
        status = Status(StatusCode.ERROR, failure) if failure else Status(StatusCode.UNSET)
        host_asked = ex.direction != "s2c"
        caller, callee = (self.client, self.server) if host_asked else (self.server, self.client)
        spans = [
            ReadableSpan(
                name=name,
                context=ctx,
                parent=parent,
                resource=caller,
                attributes=attrs,
                links=links,
                kind=SpanKind.CLIENT,
                instrumentation_scope=self.scope,
                status=status,
                start_time=start,
                end_time=stop,
            )
        ]
        if self.sides == "both":
            served = SpanContext(
                ctx.trace_id, ident(8, "served", self.facts.id, ex.request_seq), False,
                ctx.trace_flags, ctx.trace_state,
            )  # fmt: skip
            spans.append(
                ReadableSpan(
                    name=name,
                    context=served,
                    parent=ctx,
                    resource=callee,
                    attributes=attrs,
                    kind=SpanKind.SERVER,
                    instrumentation_scope=self.scope,
                    status=status,
                    start_time=start,
                    end_time=stop,
                )
            )
        return spans

    def task_span(self, ex: ExchangeFacts, task: TaskFacts) -> ReadableSpan:
        """The task ``ex`` created: one INTERNAL span under its CLIENT span, from creation to
        the terminal status, with its status changes and polls as events (the first
        :data:`~mcp_proxy.limits.OTLP_TASK_EVENTS`)."""
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        tp = ex.traceparent
        trace = tp.trace_id if tp is not None else self.trace_id
        flags = TraceFlags(tp.flags & 1) if tp is not None else TraceFlags(1)
        parent = SpanContext(
            trace, ident(8, "exchange", self.facts.id, ex.request_seq), False, flags
        )
        ctx = SpanContext(trace, ident(8, "task", self.facts.id, ex.request_seq), False, flags)
        kept = task.events[:OTLP_TASK_EVENTS]
        events = [
            Event(
                f"mcp.task.{what}",
                {"mcptape.frame": seq} | ({"mcp.task.status": utf8(st)} if st else {}),
                ns(ts),
            )
            for ts, what, seq, st in kept
        ]
        last = max([task.start_ts, *(e[0] for e in kept)])
        end = task.end_ts if task.end_ts is not None else last
        attrs = {
            **self.base,
            "mcp.method.name": utf8(ex.method),
            "mcp.task.id": utf8(task.id),
            "mcp.task.status": utf8(task.status),
            "mcp.task.polls": task.polls,
            "mcp.task.ended": task.end_ts is not None,
        }
        if ex.name and ex.method in TARGETED:
            attrs[TARGETED[ex.method]] = utf8(ex.name)
        dropped = len(task.events) - len(kept) + task.events_dropped
        if dropped:
            attrs["mcp.task.events_dropped"] = dropped
        failed = task.status in ("failed", "cancelled")
        status = (
            Status(StatusCode.ERROR, f"task {task.status}") if failed else Status(StatusCode.UNSET)
        )
        name = "task " + utf8(
            ex.method + (f" {ex.name}" if ex.method in TARGETED and ex.name else "")
        )
        return ReadableSpan(
            name=name,
            context=ctx,
            parent=parent,
            resource=self.server if ex.direction != "s2c" else self.client,
            attributes=attrs,
            events=events,
            kind=SpanKind.INTERNAL,
            instrumentation_scope=self.scope,
            status=status,
            start_time=ns(task.start_ts),
            end_time=ns(max(end, task.start_ts)),
        )


def encode(spans: list[ReadableSpan]) -> bytes:
    """The protobuf ``ExportTraceServiceRequest`` of the spans (the official encoder)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans(spans).SerializeToString())
