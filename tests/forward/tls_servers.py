"""Real HTTPS servers for the forward-proxy tests: the SDK's MCP server behind TLS, and (with
``--oauth``) a real OAuth authorization server on a second loopback origin.

    python tests/forward/tls_servers.py --cert CHAIN.pem --key KEY.pem --mode stateful [--oauth]

Prints ``MCPTAPE_TEST_SERVER_READY <mcp url>`` on stderr once it accepts connections (and
before it, ``AS <issuer url>`` with ``--oauth``). Modes: ``stateful`` / ``stateless`` / ``json``
(Streamable HTTP) and ``sse`` (legacy HTTP+SSE). Extra raw routes on the MCP origin serve what
the SDK never sends: ``/big?mib=N`` (a large body), ``/badutf8`` (a JSON-RPC body with invalid
UTF-8), ``/reset`` (an event stream cut mid-event), ``/timed?n=&gap=`` (SSE events stamped with
the monotonic time they were written, for latency).

The authorization server is the SDK's own (``create_auth_routes``) with an in-memory provider
that approves every authorization at once (the redirect carries the code); access tokens are
HMAC-signed so the resource server verifies them without calling back. ``--token-ttl`` makes
tokens expire (refresh flows); ``--prm-resource`` makes the protected-resource metadata name a
wrong ``resource`` (a finding).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import secrets
import socket
import sys
import time
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from mcp_proxy.testing.client import SCRIPTED_PRESETS
from mcp_proxy.testing.presets import apply_presets

READY = "MCPTAPE_TEST_SERVER_READY"
KEY = b"mcptape-forward-test-signing-key"


def _bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def sign(payload: dict[str, Any]) -> str:
    body = json.dumps(payload, separators=(",", ":")).encode().hex()
    mac = hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()[:32]
    return f"at-{body}.{mac}"


def verify(token: str) -> dict[str, Any] | None:
    if not token.startswith("at-") or "." not in token:
        return None
    body, mac = token[3:].rsplit(".", 1)
    if not hmac.compare_digest(mac, hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()[:32]):
        return None
    payload = json.loads(bytes.fromhex(body))
    if payload["exp"] < time.time():
        return None
    return payload


class Provider:
    """In-memory OAuth provider: every authorization is approved at once."""

    def __init__(self, ttl: int) -> None:
        self.ttl = ttl
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = "code-" + secrets.token_hex(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            client_id=client.client_id or "",
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            expires_at=time.time() + 300,
            scopes=params.scopes or ["mcp"],
            code_challenge=params.code_challenge,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _tokens(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = sign(
            {
                "c": client_id,
                "s": scopes,
                "r": resource,
                "exp": time.time() + self.ttl,
                "n": secrets.token_hex(4),
            }
        )
        rt = "rt-" + secrets.token_hex(16)
        self.refresh[rt] = RefreshToken(token=rt, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.ttl,
            refresh_token=rt,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._tokens(
            client.client_id or "", authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        return self._tokens(client.client_id or "", scopes or refresh_token.scopes, None)

    async def load_access_token(self, token: str) -> AccessToken | None:
        payload = verify(token)
        if payload is None:
            return None
        return AccessToken(
            token=token, client_id=payload["c"], scopes=payload["s"], expires_at=int(payload["exp"])
        )

    async def revoke_token(self, token: Any) -> None:
        return None


class Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        payload = verify(token)
        if payload is None:
            return None
        return AccessToken(
            token=token, client_id=payload["c"], scopes=payload["s"], expires_at=int(payload["exp"])
        )


async def _raw(request: Request) -> Response:
    path = request.url.path
    if path == "/big":
        size = int(request.query_params.get("mib", "12")) << 20
        chunk = b'{"jsonrpc":"2.0","id":1,"result":{"pad":"' + b"x" * ((1 << 20) - 40)

        async def gen() -> Any:
            sent = 0
            while sent < size:
                piece = chunk[: size - sent]
                sent += len(piece)
                yield piece

        return StreamingResponse(gen(), media_type="application/octet-stream")
    if path == "/badutf8":
        body = b'{"jsonrpc":"2.0","id":1,"result":{"text":"caf\xe9 \xff\xfe"}}'
        return Response(body, media_type="application/json")
    if path == "/reset":

        async def gen_reset() -> Any:
            yield (
                b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
                b'"params":{"progressToken":1,"progress":1}}\n\n'
            )
            await asyncio.sleep(0.1)
            yield b'event: message\ndata: {"jsonrpc":"2.0","id":1,'
            await asyncio.sleep(0.1)
            raise RuntimeError("cut mid-stream")

        return StreamingResponse(gen_reset(), media_type="text/event-stream")
    if path == "/timed":
        n = int(request.query_params.get("n", "5"))
        gap = float(request.query_params.get("gap", "0.05"))

        async def gen_timed() -> Any:
            for i in range(n):
                data = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "data": {"i": i, "t": time.monotonic_ns()}},
                    }
                )
                yield f"event: message\nid: {i}\ndata: {data}\n\n".encode()
                await asyncio.sleep(gap)
            yield b'event: message\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\n'

        return StreamingResponse(gen_timed(), media_type="text/event-stream")
    return Response("not found", status_code=404)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--mode", default="stateful")
    ap.add_argument("--oauth", action="store_true")
    ap.add_argument("--token-ttl", type=int, default=3600)
    ap.add_argument("--prm-resource", default=None)
    args = ap.parse_args()

    mcp_sock = _bind()
    mcp_origin = f"https://127.0.0.1:{mcp_sock.getsockname()[1]}"
    servers: list[tuple[Any, socket.socket]] = []
    auth = None
    verifier = None
    if args.oauth:
        as_sock = _bind()
        issuer = f"https://127.0.0.1:{as_sock.getsockname()[1]}"
        provider = Provider(args.token_ttl)
        # AuthSettings keeps a path-less issuer as given (a bare AnyHttpUrl would add "/", and
        # the client compares the issuer exactly): the same value serves both sides.
        auth = AuthSettings(
            issuer_url=issuer,  # type: ignore[arg-type]
            resource_server_url=args.prm_resource or f"{mcp_origin}/mcp",  # type: ignore[arg-type]
            required_scopes=["mcp"],
        )
        routes = create_auth_routes(
            provider,  # type: ignore[arg-type]
            issuer_url=auth.issuer_url,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"]
            ),
        )
        servers.append((Starlette(routes=routes), as_sock))
        verifier = Verifier()
        print(f"AS {issuer}", file=sys.stderr, flush=True)
    server = MCPServer(
        name="mcptape-tls",
        version="1.0.0",
        log_level="WARNING",
        auth=auth,
        token_verifier=verifier,  # type: ignore[arg-type]
    )
    apply_presets(server, ",".join(SCRIPTED_PRESETS))
    if args.mode == "sse":
        app = server.sse_app(host="127.0.0.1")
        path = "/sse"
    else:
        app = server.streamable_http_app(
            stateless_http=args.mode == "stateless",
            json_response=args.mode == "json",
            host="127.0.0.1",
        )
        path = "/mcp"
    for p in ("/big", "/badutf8", "/reset", "/timed"):
        app.router.routes.insert(0, Route(p, _raw, methods=["GET", "POST"]))  # type: ignore[attr-defined]
    servers.append((app, mcp_sock))

    ready: list[uvicorn.Server] = []
    async with anyio.create_task_group() as tg:
        for app_, sock in servers:
            config = uvicorn.Config(
                app_,
                log_level="warning",
                access_log=False,
                lifespan="on",
                ssl_certfile=args.cert,
                ssl_keyfile=args.key,
                timeout_graceful_shutdown=1,
            )
            srv = uvicorn.Server(config)
            ready.append(srv)
            tg.start_soon(srv.serve, [sock])
        while not all(s.started for s in ready):  # noqa: ASYNC110 - uvicorn has no event
            await anyio.sleep(0.01)
        print(f"{READY} {mcp_origin}{path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
