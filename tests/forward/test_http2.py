"""A host that offers HTTP/2 through ``mcptape record --forward``: recorded as an HTTP/1.1 one is.

The host (the SDK over an ``httpx2`` client with ``http2=True``) offers ``h2`` by ALPN inside the
CONNECT tunnel. The mitmproxy engine takes it and speaks HTTP/1.1 to the SDK server (uvicorn has
no HTTP/2); the lean engine offers ``http/1.1`` only, so the host falls back to it (RFC 7301).
Either way the conversation must come out as it does directly, and the recording must hold every
exchange byte-equal to what the host saw, marked with the HTTP version the host spoke.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from tests.forward.conftest import TLSFiles, TLSServer, direct_client, run_forward
from tests.forward.tee import TeeTransport
from tests.forward.test_sdk import assert_recorded_as_seen, scripted

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("engine", ["lean", "mitmproxy"])
async def test_http2_host_recorded_like_http1(
    engine: str, tmp_path: Path, confdir: Path, tls_files: TLSFiles, tls_stateful: TLSServer
) -> None:
    direct = await scripted(direct_client(tls_files), tls_stateful.url, "legacy")
    with run_forward(tmp_path / "h2.db", confdir, "--engine", engine) as fw:
        inner = httpx2.AsyncHTTPTransport(
            proxy=fw.url, verify=fw.ssl_context(), trust_env=False, http2=True
        )
        tee = TeeTransport(inner)
        client = httpx2.AsyncClient(
            transport=tee, timeout=httpx2.Timeout(30.0, read=300.0), trust_env=False
        )
        relayed = await scripted(client, tls_stateful.url, "legacy")
        assert fw.stop() == 0
    assert relayed == direct
    sessions = fw.sessions()
    assert len(sessions) == 1, sessions
    session = sessions[0]
    assert session["status"] == "ended" and session["era"] == "initialize"
    assert session["meta"]["grouping"]["rule"] == "mcp-session-id"
    exchanges = fw.exchanges()
    frames = fw.frames()
    assert session["frame_count"] == len(frames)
    assert all(f["session_id"] == session["id"] for f in frames)
    requests = [f for f in frames if f["direction"] == "c2s" and f["kind"] == "request"]
    answers = [f for f in frames if f["direction"] == "s2c" and f["kind"] in ("response", "error")]
    assert sorted(f["msg_id"] for f in requests) == sorted(f["msg_id"] for f in answers)
    for e in exchanges:
        assert e["url"] == tls_stateful.url and e["status"] is not None
        if e["method"] == "POST":
            assert e["outcome"] == "complete", e
        # HTTP/2 has no Host header (the authority is a pseudo-header, and in the URL).
        names = {h[0].lower() for h in e["request_headers"]}
        assert "accept" in names and ("host" in names) == (engine == "lean")
    assert_recorded_as_seen(fw, tee)
    versions = {e["meta"]["http_version"] for e in exchanges}
    assert versions == {"HTTP/1.1" if engine == "lean" else "HTTP/2.0"}, versions
