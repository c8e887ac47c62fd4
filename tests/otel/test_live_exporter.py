"""The live exporter (``mcp_proxy/otel/live.py``) fed real batches from the recorder's batch
builder, its POSTs caught in memory: pairing, outcomes, session ends, its limits, the config."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.otel import live
from mcp_proxy.otel.live import LiveConfig, LiveExporter, live_config
from mcp_proxy.recorder.builder import BatchBuilder
from mcp_proxy.recorder.contract import Chunk, SessionStart, SessionUpdate
from mcp_proxy.store.rows import Batch

C2S, S2C, STDIO = Direction.C2S, Direction.S2C, Channel.STDIO
SID = "b" * 32
HOST_INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"host-app","version":"3"}}}\n'
)
SERVER_INIT = (
    b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},'
    b'"serverInfo":{"name":"srv","version":"1"}}}\n'
)


class Collector:
    """Stands in for the HTTP POST: keeps each decoded request (or refuses them all)."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.got: list[ExportTraceServiceRequest] = []
        self.lines: list[str] = []
        self.posts = 0

    def post(self, url: str, body: bytes, headers: tuple[tuple[str, str], ...]) -> None:
        self.posts += 1
        if self.refuse:
            raise ConnectionRefusedError(111, "Connection refused")
        self.got.append(ExportTraceServiceRequest.FromString(body))

    def spans(self) -> list[tuple[str, Span]]:
        out = []
        for msg in self.got:
            for rs in msg.resource_spans:
                res = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
                out.extend((res["service.name"], sp) for ss in rs.scope_spans for sp in ss.spans)
        return out


def _batches(*chunks: tuple[Direction, bytes], end: bool = True) -> list[Batch]:
    b = BatchBuilder(clock=lambda: 1000.0)
    b.feed(SessionStart({"id": SID, "transport": "stdio", "started_at": 0.5}))
    out = []
    for k, (direction, data) in enumerate(chunks, start=1):
        b.feed(Chunk(SID, direction, STDIO, data, k, float(k)))
        out.append(b.take())
    if end:
        b.feed(SessionUpdate(SID, {"status": "ended", "ended_at": 99.0}))
        out.append(b.take())
    return out


def _run(batches: list[Batch], collector: Collector, **config: object) -> live.LiveStats:
    exporter = LiveExporter(
        LiveConfig("http://collector/v1/traces", **config),  # type: ignore[arg-type]
        warn=collector.lines.append,
        post=collector.post,
    )
    for batch in batches:
        exporter.observe(batch)
    return exporter.close()


def _attrs(span: Span) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in span.attributes}


def test_a_server_request_is_the_servers_client_span_and_unanswered_ones_end_with_the_session() -> (
    None
):
    c = Collector()
    stats = _run(
        _batches(
            (C2S, HOST_INIT),
            (S2C, SERVER_INIT),
            (S2C, b'{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}\n'),
            (C2S, b'{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant"}}\n'),
            (C2S, b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}\n'),
            (S2C, b'{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":true}}\n'),
            (C2S, b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow"}}\n'),
            (C2S, b'{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"a:b"}}\n'),
            (
                C2S,
                b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}\n',
            ),
        ),
        c,
    )
    assert stats.dropped == 0 and not c.lines
    spans = c.spans()
    assert stats.sent == len(spans) == 1 + 2 * 5  # the session span; 5 requests, 2 spans each
    clients = {_attrs(sp)["jsonrpc.request.id"]: (svc, sp) for svc, sp in spans
               if sp.kind == Span.SPAN_KIND_CLIENT}  # fmt: skip
    svc, sampling = clients["s1"]
    assert (svc, sampling.name) == ("srv", "sampling/createMessage")
    assert _attrs(sampling)["mcptape.direction"] == "s2c"
    servers = {sp.parent_span_id: svc for svc, sp in spans if sp.kind == Span.SPAN_KIND_SERVER}
    assert servers[sampling.span_id] == "host-app"
    assert clients["1"][0] == "host-app" and servers[clients["1"][1].span_id] == "srv"
    assert _attrs(clients["1"][1])["mcp.protocol.version"] == "2025-11-25"
    assert _attrs(clients["2"][1])["error.type"] == "tool_error"
    assert _attrs(clients["3"][1])["error.type"] == "no_response"  # the session ended first
    assert _attrs(clients["4"][1])["error.type"] == "cancelled"
    assert _attrs(clients["4"][1])["mcp.resource.uri"] == "a:b"
    (root,) = [sp for svc, sp in spans if sp.name == "mcp session"]
    assert clients["2"][1].parent_span_id == root.span_id
    # The same ids as `mcptape export --format otlp` gives the recorded session.
    assert root.end_time_unix_nano == 99 * 10**9


def test_a_dead_collector_costs_spans_counted_in_one_line_and_an_error_answer() -> None:
    c = Collector(refuse=True)
    stats = _run(
        _batches(
            (C2S, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'),
            (S2C, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}\n'),
        ),
        c,
    )
    assert stats.sent == 0 and stats.dropped == 3  # CLIENT, SERVER, session
    assert len(c.lines) == 2  # the warning when it happened, the count at the end
    assert "Connection refused" in c.lines[0] and "3 span(s)" in c.lines[1]


def test_a_dead_collector_is_left_alone_after_it_failed() -> None:
    c = Collector(refuse=True)
    calls = [
        (
            d,
            b'{"jsonrpc":"2.0","id":%d,%s}\n'
            % (k, b'"method":"ping"' if d == C2S else b'"result":{}'),
        )
        for k in range(300)
        for d in (C2S, S2C)
    ]
    stats = _run(_batches(*calls), c)
    assert stats.dropped == 2 * 300 + 1 and stats.sent == 0
    assert c.posts == 1  # 601 spans are two POSTs' worth: the second is not tried
    assert len(c.lines) == 2 and "Connection refused" in c.lines[0]


def test_a_full_queue_drops_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "OTLP_QUEUE_FRAMES", 3)
    c = Collector()
    exporter = LiveExporter(
        LiveConfig("http://collector/v1/traces"), warn=c.lines.append, post=c.post, start=False
    )
    # Its thread not started yet: everything observed waits in the queue.
    for batch in _batches(
        *[(C2S, b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % k) for k in range(5)],
        end=False,
    ):
        exporter.observe(batch)
    stats = exporter.close()
    assert stats.dropped == 2 * 2 and "queue was full" in c.lines[0]  # 2 requests, 2 spans each


def test_the_endpoint_comes_from_the_flag_then_the_standard_variables() -> None:
    assert live_config({}) is None
    assert live_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == LiveConfig(
        "http://c:4318/v1/traces"
    )
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/traces",
        "OTEL_SERVICE_NAME": "rec",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=a%20b,bad",
        "MCPTAPE_OTLP_SPANS": "client",
    }
    got = live_config(both)
    assert got == LiveConfig("http://t:4318/traces", "rec", "client", (("x-api-key", "a b"),))
    assert live_config({**both, "MCPTAPE_OTLP_ENDPOINT": "http://f/v1/traces"}).endpoint == (  # type: ignore[union-attr]
        "http://f/v1/traces"
    )
    assert (
        live_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"})
        is None
    )
