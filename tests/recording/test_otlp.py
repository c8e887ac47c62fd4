"""OpenTelemetry export: OTLP/JSON checked against the OTLP protobuf schema by the official
package, and OTLP/HTTP sending checked against a real receiver on 127.0.0.1."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from mcp_proxy.recording.otlp import iter_otlp_json
from mcp_proxy.recording.registry import read_recording
from tests.helpers.otlp import Receiver, otlp_receiver
from tests.recording.conftest import GOLDEN, RECORDINGS, jsonl_with_frames, run_cli

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACED_CALL = (
    '{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"echo","arguments":'
    '{"text":"t"},"_meta":{"traceparent":"00-' + TRACE + "-" + PARENT + '-01"}}}\n'
)
ERROR_ANSWER = '{"jsonrpc":"2.0","id":77,"error":{"code":-32602,"message":"Unknown tool: echo"}}\n'


def _as_proto(line: bytes) -> ExportTraceServiceRequest:
    """Parse one OTLP/JSON line with the official protobuf classes (unknown fields rejected).

    OTLP/JSON differs from plain proto3 JSON only in writing trace and span ids as hex; they are
    turned back into proto3's base64 first, exactly as an OTLP/JSON receiver does.
    """
    doc = json.loads(line)

    def unhex(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("traceId", "spanId", "parentSpanId"):
                    node[k] = base64.b64encode(bytes.fromhex(v)).decode()
                else:
                    unhex(v)
        elif isinstance(node, list):
            for item in node:
                unhex(item)

    unhex(doc)
    return ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=False)


def _spans(req: ExportTraceServiceRequest) -> list[Span]:
    return [sp for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]


def _attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real stdio recording plus a tools/call that carries a W3C traceparent and fails."""
    path = tmp_path_factory.mktemp("otlp") / "traced.mcptape.jsonl"
    path.write_bytes(
        jsonl_with_frames(
            RECORDINGS / "basic-legacy.mcptape.jsonl",
            [{"text": TRACED_CALL}, {"dir": "s2c", "text": ERROR_ANSWER}],
        )
    )
    return path


def test_otlp_json_is_valid_otlp_and_follows_the_mcp_conventions(traced: Path) -> None:
    rec = read_recording(traced)
    (line,) = list(iter_otlp_json(rec))
    assert line == b"".join(iter_otlp_json(rec))  # deterministic
    req = _as_proto(line)
    spans = _spans(req)
    session = rec.one()
    root = next(s for s in spans if s.name == "mcp session")
    calls = [s for s in spans if s is not root and s.kind == Span.SPAN_KIND_CLIENT]
    served = {s.parent_span_id: s for s in spans if s.kind == Span.SPAN_KIND_SERVER}
    assert len(calls) == 14  # 13 recorded exchanges + the traced one
    assert len(spans) == 1 + 2 * 14  # each exchange: its CLIENT span and its SERVER span
    for sp in calls:
        assert len(sp.trace_id) == 16 and len(sp.span_id) == 8
        assert sp.end_time_unix_nano >= sp.start_time_unix_nano
        a = _attrs(sp)
        assert a["mcp.session.id"] == session.id
        assert a["mcp.protocol.version"] == "2025-11-25"
        assert a["network.transport"] == "pipe"
        assert sp.name.startswith(a["mcp.method.name"])
        server = served[sp.span_id]  # the responder's SERVER span, child of the CLIENT span
        assert server.trace_id == sp.trace_id and server.name == sp.name
        assert _attrs(server) == a and server.status == sp.status
    services = _services(req)
    host, server_name = session.session["client_name"], session.session["server_name"]
    assert {services[s.span_id] for s in calls} == {host}
    assert {services[s.span_id] for s in served.values()} == {server_name}
    assert services[root.span_id] == "mcptape"
    echo = next(s for s in calls if _attrs(s).get("jsonrpc.request.id") == "3")
    assert echo.name == "tools/call echo"
    assert _attrs(echo)["gen_ai.tool.name"] == "echo"
    assert _attrs(echo)["gen_ai.operation.name"] == "execute_tool"
    assert echo.trace_id == root.trace_id and echo.parent_span_id == root.span_id
    assert echo.status.code == Status.STATUS_CODE_UNSET
    tool_error = next(s for s in calls if _attrs(s).get("gen_ai.tool.name") == "fail")
    assert _attrs(tool_error)["error.type"] == "tool_error"
    assert tool_error.status.code == Status.STATUS_CODE_ERROR
    # The request with a traceparent joins the caller's trace, under the caller's span.
    joined = next(s for s in calls if _attrs(s).get("jsonrpc.request.id") == "77")
    assert joined.trace_id.hex() == TRACE and joined.parent_span_id.hex() == PARENT
    assert [link.span_id for link in joined.links] == [root.span_id]
    assert served[joined.span_id].trace_id.hex() == TRACE
    assert _attrs(joined)["error.type"] == "-32602"
    assert _attrs(joined)["rpc.response.status_code"] == "-32602"
    assert joined.status.code == Status.STATUS_CODE_ERROR
    assert joined.status.message == "Unknown tool: echo"


def _services(req: ExportTraceServiceRequest) -> dict[bytes, str]:
    """Each span's ``service.name`` (the resource it was sent under), by span id."""
    out: dict[bytes, str] = {}
    for rs in req.resource_spans:
        (name,) = [
            kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"
        ]
        for ss in rs.scope_spans:
            out.update((sp.span_id, name) for sp in ss.spans)
    return out


@pytest.fixture
def otlp() -> Iterator[Receiver]:
    with otlp_receiver() as rec:
        yield rec


def test_export_sends_spans_to_an_otlp_http_endpoint_and_writes_otlp_json(
    tmp_path: Path, otlp: Receiver, any_db: Path | str
) -> None:
    db = str(any_db)
    imported = run_cli("import", str(GOLDEN / "v2-http.jsonl"), "--db", db)
    assert imported.returncode == 0, imported.stderr
    sid = imported.stdout.split()[0]
    sent = run_cli("export", sid, "--format", "otlp", "-o", otlp.url, "--db", db)
    assert sent.returncode == 0, sent.stderr
    assert "sent 3 span(s)" in sent.stderr  # the session, CLIENT and SERVER
    ((path, ctype, msg),) = otlp.received
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    spans = _spans(msg)
    call = next(s for s in spans if s.kind == Span.SPAN_KIND_CLIENT)
    a = _attrs(call)
    assert call.name == "tools/call echo" and a["network.transport"] == "tcp"
    assert a["network.protocol.name"] == "http"
    assert "network.protocol.version" not in a  # this recording does not say which HTTP
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == 8000
    out = tmp_path / "spans.otlp.json"
    written = run_cli("export", sid, "-o", str(out), "--db", db)
    assert written.returncode == 0 and "(otlp)" in written.stderr
    again = _spans(_as_proto(out.read_bytes()))
    assert [(s.name, s.span_id) for s in again] == [(s.name, s.span_id) for s in spans]
    refused = run_cli(
        "export", sid, "--format", "otlp", "-o", "http://127.0.0.1:9/v1/traces", "--db", db
    )
    assert refused.returncode == 2 and "did not accept" in refused.stderr
    assert "Traceback" not in refused.stderr
