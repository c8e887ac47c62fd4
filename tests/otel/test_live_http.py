"""``mcptape record --upstream … --otlp-endpoint``: live spans of a Streamable HTTP session carry
its ``Mcp-Session-Id``, the HTTP version the host spoke, the server's name and address."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers.db import wait_until
from tests.helpers.otlp import Receiver, otlp_receiver
from tests.relay.conftest import Upstream, local_url, run_proxy, start_upstream

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with start_upstream("--transport", "http") as up:
        yield up


def _post(url: str, body: dict[str, Any], session: str | None) -> tuple[str | None, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json, text/event-stream")
    if session:
        req.add_header("Mcp-Session-Id", session)
        req.add_header("Mcp-Protocol-Version", "2025-11-25")
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.headers.get("Mcp-Session-Id"), resp.read()


def test_http_spans_carry_the_session_id_and_the_http_version(
    tmp_path: Path, upstream: Upstream
) -> None:
    with (
        otlp_receiver() as rec,
        run_proxy(upstream.url, tmp_path / "h.db", "--otlp-endpoint", rec.url) as px,
    ):
        url = local_url(px, upstream.url)
        init = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "http-host", "version": "2"},
            },
        }  # fmt: skip
        sid, _ = _post(url, init, None)
        assert sid
        _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)

        def listed() -> list[tuple[str, Span]]:
            return [(svc, sp) for svc, sp in _spans(rec) if sp.name == "tools/list"]

        assert wait_until(lambda: len(listed()) == 2, timeout=20), _spans(rec)
        assert px.proc.poll() is None  # live
    kinds = {sp.kind: (svc, sp) for svc, sp in listed()}
    host, client = kinds[Span.SPAN_KIND_CLIENT]
    server, _ = kinds[Span.SPAN_KIND_SERVER]
    assert host == "http-host" and server not in ("mcp-server", "http-host")
    a = {kv.key: kv.value for kv in client.attributes}
    assert a["mcp.session.id"].string_value == sid
    assert a["network.transport"].string_value == "tcp"
    assert a["network.protocol.name"].string_value == "http"
    assert a["network.protocol.version"].string_value == "1.1"
    assert a["server.address"].string_value == "127.0.0.1" and a["server.port"].int_value > 0


def _spans(rec: Receiver) -> list[tuple[str, Span]]:
    out = []
    for _path, _ctype, msg in list(rec.received):
        for rs in msg.resource_spans:
            res = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            out.extend((res["service.name"], sp) for ss in rs.scope_spans for sp in ss.spans)
    return out
