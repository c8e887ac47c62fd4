"""A minimal OTLP/HTTP traces receiver on 127.0.0.1 for the tests that send spans: it decodes
each protobuf body (gzip too) and answers as an OTLP collector does."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Receiver:
    """Where the receiver listens (``url``: its ``/v1/traces``) and what it got: one
    ``(path, content type, request)`` per POST."""

    url: str
    received: list[tuple[str, str, ExportTraceServiceRequest]] = field(default_factory=list)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    got: list[tuple[str, str, ExportTraceServiceRequest]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            msg = ExportTraceServiceRequest.FromString(body)
            got.append((self.path, str(self.headers.get("Content-Type")), msg))
            out = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", got)
    finally:
        server.shutdown()
        server.server_close()
