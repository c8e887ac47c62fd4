"""The one span builder (``mcp_proxy/otel/spans.py``): span kinds and services as the MCP
semantic conventions say — the initiator's CLIENT span, the responder's SERVER span, each under
its own ``service.name`` — decoded from the protobuf the official encoder writes."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from mcp_proxy.otel.spans import (
    ExchangeFacts,
    Peer,
    SessionFacts,
    SpanBuilder,
    TraceParent,
    encode,
    http_version,
    protocol_version,
    traceparent,
)

SESSION = SessionFacts(
    id="s1",
    mcp_session_id="abc",
    transport="http",
    upstream="http://127.0.0.1:8000/mcp",
    protocol_version="2025-11-25",
    client=Peer("claude-code", "2.1"),
    server=Peer("weather", "0.3"),
    started_at=100.0,
    ended_at=110.0,
    frames=4,
    http_version="HTTP/1.1",
)


def _exchange(direction: str, method: str, **kw: Any) -> ExchangeFacts:
    return ExchangeFacts(
        direction=direction, method=method, msg_id="7", request_seq=3, request_ts=101.0,
        response_ts=102.5, outcome="ok", **kw,
    )  # fmt: skip


def _decoded(spans: list[Any]) -> list[tuple[str, Span, dict[str, Any]]]:
    """(service.name, span, attributes) of each span, through the wire format."""
    req = ExportTraceServiceRequest.FromString(encode(spans))
    out = []
    for rs in req.resource_spans:
        res = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for sp in ss.spans:
                attrs = {kv.key: kv.value for kv in sp.attributes}
                out.append((res["service.name"], sp, attrs))
    return out


def test_a_server_to_client_request_is_the_servers_client_span() -> None:
    spans = SpanBuilder(SESSION).exchange_spans(_exchange("s2c", "sampling/createMessage"))
    (client_svc, client, attrs), (server_svc, server, _) = _decoded(spans)
    assert client.kind == Span.SPAN_KIND_CLIENT and client_svc == "weather"
    assert server.kind == Span.SPAN_KIND_SERVER and server_svc == "claude-code"
    assert server.parent_span_id == client.span_id and server.trace_id == client.trace_id
    assert client.name == server.name == "sampling/createMessage"
    assert attrs["mcp.method.name"].string_value == "sampling/createMessage"
    assert attrs["network.protocol.version"].string_value == "1.1"
    assert attrs["network.protocol.name"].string_value == "http"


def test_a_host_to_server_call_is_the_hosts_client_span_and_the_servers_server_span() -> None:
    spans = SpanBuilder(SESSION).exchange_spans(_exchange("c2s", "tools/call", name="forecast"))
    (client_svc, client, attrs), (server_svc, server, _) = _decoded(spans)
    assert (client_svc, client.kind) == ("claude-code", Span.SPAN_KIND_CLIENT)
    assert (server_svc, server.kind) == ("weather", Span.SPAN_KIND_SERVER)
    assert client.name == "tools/call forecast"
    assert attrs["gen_ai.tool.name"].string_value == "forecast"


def test_client_only_emits_the_initiators_span() -> None:
    spans = SpanBuilder(SESSION, sides="client").exchange_spans(_exchange("s2c", "roots/list"))
    ((svc, span, _),) = _decoded(spans)
    assert (svc, span.kind) == ("weather", Span.SPAN_KIND_CLIENT)


def test_the_recorded_http_version_is_the_network_protocol_version() -> None:
    assert [protocol_version(v) for v in ("1.1", "HTTP/2.0", "2", "", None, "HTTP/1.0")] == [
        "1.1", "2", "2", None, None, "1.0",
    ]  # fmt: skip
    assert http_version('{"http_version": "1.1"}') == "1.1" and http_version("{") is None


def test_stdio_has_no_network_protocol_and_unknown_peers_get_a_name() -> None:
    facts = SessionFacts(id="s2", mcp_session_id="s2", transport="stdio")
    spans = SpanBuilder(facts).exchange_spans(_exchange("c2s", "ping"))
    (c_svc, _, attrs), (s_svc, _, _) = _decoded(spans)
    assert (c_svc, s_svc) == ("mcp-client", "mcp-server")
    assert attrs["network.transport"].string_value == "pipe"
    assert "network.protocol.version" not in attrs


def test_a_traceparent_and_tracestate_are_joined() -> None:
    msg = {
        "params": {
            "_meta": {
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "tracestate": "rojo=00f067aa0ba902b7",
            }
        }
    }
    tp = traceparent(msg)
    assert tp == TraceParent(
        0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1, "rojo=00f067aa0ba902b7"
    )
    spans = SpanBuilder(SESSION).exchange_spans(_exchange("c2s", "tools/list", traceparent=tp))
    (_, client, _), (_, server, _) = _decoded(spans)
    assert client.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert client.parent_span_id.hex() == "00f067aa0ba902b7"
    assert client.trace_state == "rojo=00f067aa0ba902b7"
    assert server.trace_id == client.trace_id and server.parent_span_id == client.span_id
    assert traceparent({"params": {"_meta": {"traceparent": "00-" + "0" * 32 + "-x-01"}}}) is None
