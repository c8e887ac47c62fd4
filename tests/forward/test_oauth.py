"""OAuth through the forward proxy: a real authorization server on a second origin.

The SDK client's own OAuth support (``mcp.client.auth.OAuthClientProvider``) drives the whole
dance through the proxy — 401 with ``WWW-Authenticate``, protected-resource metadata (MCP
origin), authorization-server metadata, dynamic client registration, the authorization redirect
and the token endpoint (authorization server origin) — then the MCP session. The recording must
link the dance to that session, keep every exchange, and never let a token, code, client secret
or PKCE verifier reach the database bytes or an export.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from mcp_proxy.analysis.model import FindingSink
from mcp_proxy.analysis.oauth import oauth_checks
from mcp_proxy.testing.client import CallbackRecorder, make_client, run_scripted_session
from tests.conftest import matrix
from tests.forward.conftest import Forward, TLSFiles, TLSServer, run_forward, start_tls_server
from tests.forward.tee import Seen, TeeTransport
from tests.helpers.cli import run_mcptape
from tests.helpers.watch import until

pytestmark = pytest.mark.timeout(120)


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Plays the user's browser: follows the authorization URL (through the proxy too) and
    hands the code from the redirect to the client."""

    def __init__(self, fw: Forward) -> None:
        self.fw = fw
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        async with httpx2.AsyncClient(
            proxy=self.fw.url, verify=self.fw.ssl_context(), trust_env=False
        ) as c:
            r = await c.get(url)
        assert r.status_code in (302, 303, 307), r.text
        qs = parse_qs(urlsplit(r.headers["location"]).query)
        self.result = AuthorizationCodeResult(
            code=qs["code"][0], state=qs.get("state", [None])[0], iss=qs.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


@pytest.fixture(scope="module")
def tls_oauth(tls_files: TLSFiles) -> Iterator[TLSServer]:
    with start_tls_server(tls_files, "--mode", "stateful", "--oauth") as s:
        yield s


async def authorized_session(
    fw: Forward, url: str, mode: str
) -> tuple[dict[str, Any], TeeTransport]:
    browser = Browser(fw)
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="mcptape-test",
            redirect_uris=["http://127.0.0.1:1/callback"],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
        ),
        storage=MemoryStorage(),
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    inner = httpx2.AsyncHTTPTransport(proxy=fw.url, verify=fw.ssl_context(), trust_env=False)
    tee = TeeTransport(inner)
    client = httpx2.AsyncClient(
        transport=tee, auth=provider, timeout=httpx2.Timeout(30, read=300), trust_env=False
    )
    rec = CallbackRecorder()
    async with client:
        transport = streamable_http_client(url, http_client=client)
        async with make_client(transport, mode=mode, recorder=rec) as c:
            out = await run_scripted_session(c, rec)
    return out, tee


def secrets_seen(seen: list[Seen]) -> set[str]:
    """Every token, code, client secret and PKCE verifier the client sent or received."""
    found: set[str] = set()
    keys = {"access_token", "refresh_token", "client_secret", "code_verifier", "code"}
    for s in seen:
        for raw in (s.request_body, s.body):
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                found |= {str(v) for k, v in doc.items() if k in keys and v}
            elif raw:
                qs = parse_qs(raw.decode("utf-8", "replace"))
                found |= {v[0] for k, v in qs.items() if k in keys and v}
    return {f for f in found if len(f) >= 8}


# The dance is the same HTTP in both eras: the default run keeps the 2026 era on the lean
# engine; the 2025 era and the mitmproxy engine run under --full.
@pytest.mark.parametrize(
    ("mode", "engine"),
    matrix([("legacy", "lean"), ("auto", "lean"), ("legacy", "mitmproxy")], {("auto", "lean")}),
)
async def test_oauth_dance_recorded_linked_and_redacted(
    mode: str, engine: str, tmp_path: Path, confdir: Path, tls_oauth: TLSServer
) -> None:
    db = tmp_path / "oauth.db"
    with run_forward(db, confdir, "--engine", engine) as fw:
        out, tee = await authorized_session(fw, tls_oauth.url, mode)
        assert fw.stop() == 0
    assert out["echo"] == "hello, wire"
    secrets = secrets_seen(tee.seen)
    assert any(s.startswith("at-") for s in secrets) and any(s.startswith("rt-") for s in secrets)
    assert any(s.startswith("code-") for s in secrets)

    sessions = fw.sessions()
    exchanges = fw.exchanges()
    assert len(sessions) == 1, [(s["id"][:6], s["meta"]["grouping"]["rule"]) for s in sessions] + [
        (e["session_id"][:6], e["method"], e["url"], e["status"], e["meta"].get("oauth"))
        for e in exchanges
    ]
    as_origin = tls_oauth.issuer
    assert as_origin is not None
    roles = [e["meta"].get("oauth", {}).get("role") for e in exchanges]
    for role in (
        "protected_resource_metadata",
        "authorization_server_metadata",
        "registration_endpoint",
        "token_endpoint",
    ):
        assert role in roles, roles
    # The dance is in the MCP session, in wire order: 401 first, then discovery and token.
    first = exchanges[0] if exchanges[0]["status"] == 401 else None
    ordered = sorted(exchanges, key=lambda e: e["started_at"])
    assert ordered[0]["status"] == 401 and ordered[0]["url"] == tls_oauth.url, ordered[0]
    assert first is not None or ordered[0]["status"] == 401
    challenge = ordered[0]["meta"]["oauth"]["challenge"]
    assert challenge["scheme"] == "Bearer" and "resource_metadata" in challenge
    on_as = [e for e in exchanges if e["url"].startswith(as_origin)]
    assert on_as and all(e["session_id"] == sessions[0]["id"] for e in on_as)
    token = next(e for e in exchanges if e["meta"].get("oauth", {}).get("role") == "token_endpoint")
    assert token["status"] == 200
    assert '"access_token":"[REDACTED]"' in token["meta"]["response_body"]["text"]
    assert "code=%5BREDACTED%5D" in token["meta"]["request_body"]["text"] or (
        "code=[REDACTED]" in token["meta"]["request_body"]["text"]
    )

    # No secret anywhere in the database files, nor in an export of the session.
    for path in db.parent.glob(db.name + "*"):
        data = path.read_bytes()
        for s in secrets:
            assert s.encode() not in data, (path.name, s[:12])
    export = run_mcptape(
        "export", "--db", str(db), sessions[0]["id"], "-o", str(tmp_path / "x.jsonl")
    )
    assert export.returncode == 0, export.stderr
    text = (tmp_path / "x.jsonl").read_text()
    assert "oauth-protected-resource" in text
    for s in secrets:
        assert s not in text

    # The OAuth checks see a clean dance.
    sink = FindingSink()
    oauth_checks({e["id"]: e for e in exchanges}, sink)
    assert [f.code for f in sink.result()] == []


async def test_oauth_failures_are_findings(
    tmp_path: Path, confdir: Path, tls_files: TLSFiles
) -> None:
    """Metadata naming another resource, and a token endpoint that refuses: findings."""
    with (
        start_tls_server(
            tls_files,
            "--mode",
            "stateful",
            "--oauth",
            "--prm-resource",
            "https://elsewhere.example/mcp",
        ) as srv,
        run_forward(tmp_path / "bad.db", confdir) as fw,
    ):
        with pytest.raises(Exception):  # noqa: B017 - the SDK refuses the mismatched resource
            await asyncio.wait_for(authorized_session(fw, srv.url, "legacy"), 60)
        assert fw.stop() == 0
    exchanges = fw.exchanges()
    sink = FindingSink()
    oauth_checks({e["id"]: e for e in exchanges}, sink)
    codes = {f.code for f in sink.result()}
    assert "oauth.resource_mismatch" in codes, codes


async def test_token_refresh_recorded_in_the_session(
    shared_fw: Forward, tls_files: TLSFiles
) -> None:
    """A token that expires mid-session: the refresh goes into the session it kept alive.

    On the shared proxy: this test's servers are on origins of their own, and only the
    exchanges and sessions of those origins are looked at."""
    fw = shared_fw
    with start_tls_server(tls_files, "--mode", "stateful", "--oauth", "--token-ttl", "1") as srv:
        browser = Browser(fw)
        provider = OAuthClientProvider(
            server_url=srv.url,
            client_metadata=OAuthClientMetadata(
                client_name="mcptape-test",
                redirect_uris=["http://127.0.0.1:1/callback"],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="client_secret_post",
            ),
            storage=MemoryStorage(),
            redirect_handler=browser.redirect,
            callback_handler=browser.callback,
        )
        inner = httpx2.AsyncHTTPTransport(proxy=fw.url, verify=fw.ssl_context(), trust_env=False)
        tee = TeeTransport(inner)
        client = httpx2.AsyncClient(
            transport=tee, auth=provider, timeout=httpx2.Timeout(30, read=300), trust_env=False
        )
        async with client:
            transport = streamable_http_client(srv.url, http_client=client)
            async with make_client(transport, mode="legacy") as c:
                await c.call_tool("echo", {"text": "before"})
                # The access token expires (a lifetime of 1 s): the client sees it so.
                assert await until(lambda: not provider.context.is_token_valid(), within=30)
                after = await c.call_tool("echo", {"text": "after"})
    assert not after.is_error
    mcp_origin = srv.url.rsplit("/", 1)[0]
    assert srv.issuer is not None
    origins = (mcp_origin + "/", srv.issuer + "/")
    # The browser's redirect went through the proxy but is not the client's (not in tee.seen).
    sessions, exchanges = await asyncio.to_thread(
        settled, fw, mcp_origin, origins, len(tee.seen) + 1
    )
    assert len(sessions) == 1
    tokens = [e for e in exchanges if e["meta"].get("oauth", {}).get("role") == "token_endpoint"]
    grants = [e["meta"]["request_body"]["text"] for e in tokens]
    assert any("grant_type=refresh_token" in g for g in grants), grants
    assert any("grant_type=authorization_code" in g for g in grants), grants
    assert all(e["session_id"] == sessions[0]["id"] for e in exchanges)
    secrets = secrets_seen(tee.seen)
    assert len([s for s in secrets if s.startswith("at-")]) >= 2
    for path in fw.db.parent.glob(fw.db.name + "*"):
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data]


def settled(
    fw: Forward, upstream: str, origins: tuple[str, ...], n: int, within: float = 60.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sessions of ``upstream`` and the exchanges on ``origins`` once the session has
    ended (the client's DELETE) and ``n`` exchanges have been written — the shared proxy keeps
    running, so nothing is drained by a stop."""
    deadline = time.monotonic() + within
    sessions: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        sessions = [
            s for s in fw.sessions() if s["meta"].get("relay", {}).get("upstream") == upstream
        ]
        exchanges = [
            e for e in fw.exchanges() if e["url"].startswith(origins) and e["ended_at"] is not None
        ]
        if sessions and all(s["status"] == "ended" for s in sessions) and len(exchanges) >= n:
            return sessions, exchanges
        time.sleep(0.1)
    raise AssertionError(f"not settled: {sessions} {len(exchanges)} of {n} exchanges")
