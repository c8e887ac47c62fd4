"""``mcptape record --otlp-endpoint``: spans sent live from the recorder process.

A real ``mcptape record`` relays a stdio server (``mcp_proxy.testing.rawecho``) for a host this
test plays, line by line; a real OTLP/HTTP receiver (``tests/helpers/otlp.py``, protobuf
decoded) gets the spans while the session is still live, and a request whose ``_meta`` carries
a W3C ``traceparent`` joins that trace. With the receiver down the recording is still whole.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.db import wait_until
from tests.helpers.otlp import Receiver, otlp_receiver

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SERVER = [sys.executable, "-m", "mcp_proxy.testing.rawecho"]

pytestmark = pytest.mark.both_dialects


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


INIT = _line(
    {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test-host", "version": "1.0"},
        },
    }
)  # fmt: skip
TRACED = _line(
    {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {
            "name": "echo", "arguments": {},
            "_meta": {"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "k=v"},
        },
    }
)  # fmt: skip


def _record(
    db: Path | str, endpoint: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*mcptape_cmd(), *("record", "--db", str(db), "--otlp-endpoint", endpoint, "--"), *SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )


def _ask(proc: subprocess.Popen[bytes], line: bytes) -> dict[str, Any]:
    """Send one request as the host and read the server's answer through the relay."""
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(line)
    stdin.flush()
    answer: dict[str, Any] = json.loads(stdout.readline())
    return answer


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """The host goes away (stdin closes): the relay and its recorder finish."""
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


def _spans(rec: Receiver) -> list[tuple[str, Span]]:
    """(service.name, span) of everything the receiver got so far."""
    out = []
    for _path, _ctype, msg in list(rec.received):
        for rs in msg.resource_spans:
            res = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            out.extend((res["service.name"], sp) for ss in rs.scope_spans for sp in ss.spans)
    return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as rec:
        yield rec


def test_spans_arrive_while_the_session_is_live_and_join_the_callers_trace(
    tmp_path: Path, db_path: Path | str, receiver: Receiver
) -> None:
    db = db_path
    proc = _record(db, receiver.url)
    try:
        assert _ask(proc, INIT)["id"] == 1
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        assert _ask(proc, TRACED)["id"] == 2

        def joined() -> list[tuple[str, Span]]:
            return [(svc, sp) for svc, sp in _spans(receiver) if sp.trace_id.hex() == TRACE]

        assert wait_until(lambda: len(joined()) == 2, timeout=20), _spans(receiver)
        assert proc.poll() is None  # the session is still live
        by_kind = {sp.kind: (svc, sp) for svc, sp in joined()}
        host_svc, client = by_kind[Span.SPAN_KIND_CLIENT]
        server_svc, server = by_kind[Span.SPAN_KIND_SERVER]
        assert client.parent_span_id.hex() == PARENT and client.trace_state == "k=v"
        assert client.name == "tools/call echo"
        assert server.parent_span_id == client.span_id
        assert (host_svc, server_svc) == ("test-host", "mcp-server")  # rawecho has no serverInfo
        attrs = {kv.key: kv.value.string_value for kv in client.attributes}
        assert attrs["mcp.method.name"] == "tools/call" and attrs["jsonrpc.request.id"] == "2"
        assert attrs["network.transport"] == "pipe"
        assert {path for path, _, _ in receiver.received} == {"/v1/traces"}
        assert {ctype for _, ctype, _ in receiver.received} == {"application/x-protobuf"}
    finally:
        code, err = _finish(proc)
    assert code == 0, err
    # At the end: the session span, under mcptape's service (OTEL_SERVICE_NAME renames it).
    assert wait_until(lambda: any(sp.name == "mcp session" for _, sp in _spans(receiver)))
    assert "OpenTelemetry" not in err, err
    # One span builder: the recorded session exported after the fact gives the same spans.
    (session,) = rdb.sessions(db)
    out = tmp_path / "after.otlp.json"
    done = run_mcptape("export", session["id"], "--db", str(db), "-o", str(out))  # in-process
    assert done.returncode == 0, done.stderr
    after = json.loads(out.read_bytes())

    def frames(attributes: Any) -> Any:
        return [a for a in attributes if a["key"] == "mcptape.frames"]

    exported = {
        (sp["name"], sp["spanId"], sp.get("parentSpanId"), sp["kind"])
        for rs in after["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    }
    sent = {(sp.name, sp.span_id.hex(), sp.parent_span_id.hex() or None, sp.kind)
            for _, sp in _spans(receiver)}  # fmt: skip
    assert sent == exported
    (live_root,) = [sp for _, sp in _spans(receiver) if sp.name == "mcp session"]
    (root,) = [sp for rs in after["resourceSpans"] for ss in rs["scopeSpans"]
               for sp in ss["spans"] if sp["name"] == "mcp session"]  # fmt: skip
    assert (
        [(a.key, a.value.int_value) for a in live_root.attributes if a.key == "mcptape.frames"]
        == [("mcptape.frames", int(a["value"]["intValue"])) for a in frames(root["attributes"])]
        == [("mcptape.frames", 5)]  # a notification is a frame too
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_with_the_receiver_down_the_recording_is_complete_and_one_line_says_so(
    db_path: Path | str,
) -> None:
    db = db_path
    proc = _record(db, f"http://127.0.0.1:{_closed_port()}")
    try:
        assert _ask(proc, INIT)["id"] == 1
        for k in range(2, 12):
            assert _ask(proc, _line({"jsonrpc": "2.0", "id": k, "method": "tools/list"}))["id"] == k
    finally:
        code, err = _finish(proc)
    assert code == 0, err
    (session,) = rdb.sessions(db)
    frames = rdb.frames(db, session["id"])
    assert len(frames) == 22 and session["frame_count"] == 22  # 11 requests, 11 answers
    assert session["gap_count"] == 0
    lines = [line for line in err.splitlines() if "OpenTelemetry" in line]
    assert len(lines) == 2, err  # the warning when it happens, the count at the end
    assert "spans are dropped and counted" in lines[0] and "Connection refused" in lines[0]
    assert "were not sent" in lines[1] and "the recording does not miss them" in lines[1]
    assert "Traceback" not in err and "Retrying" not in err and "Failed to export" not in err


def test_a_bad_endpoint_is_one_line_and_a_usage_exit(tmp_path: Path) -> None:
    # In-process: it fails before anything starts (a record process's usage error:
    # tests/test_cli_flags.py AS_A_PROCESS).
    for bad in ("grpc:4317", "http://[::1:4318"):  # the second: urlsplit raises ValueError
        db = str(tmp_path / "x.db")
        done = run_mcptape("record", "--db", db, "--otlp-endpoint", bad)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "--otlp-endpoint" in done.stderr
