"""Which MCP session an OAuth dance served: the forward proxy's linking of the two.

An MCP server that needs authorization answers 401 with ``WWW-Authenticate``; the client then
reads the protected-resource metadata (on the MCP server's origin), the authorization server's
metadata (usually on another origin), registers itself, exchanges a code for a token, and retries
— now with a session to come. The dance happens *before* the session it serves exists (or, for a
refresh, in the middle of one), and on origins the MCP session never touches. So the linker:

- learns from the documents as they pass: the protected-resource metadata names the
  authorization servers of an MCP origin; the authorization server's metadata names its
  endpoints (registration, token, revocation…). Requests to those endpoints, and token requests
  recognised by their ``grant_type`` form body, are OAuth exchanges of that MCP origin;
- holds the dance (the 401'd MCP exchange that opened it, when it has no session yet, and every
  OAuth exchange) in memory, unwritten, until the next MCP exchange on that origin gets past
  authorization; the held exchanges are then written into *its* session, before it, with their
  own timestamps — so the session shows 401 → discovery → registration → token → initialize;
- writes what is still held when the proxy stops into the origin's fallback session, so a dance
  that never succeeded (token endpoint error, 401 loop) is recorded too.

Secrets: every OAuth body is kept only as redacted exchange metadata (``meta.request_body`` /
``meta.response_body``, see :func:`mcp_proxy.relay.http.common.meta_body`), never as a frame; the Authorization and
cookie headers are redacted like everywhere else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_proxy.forward.exchange import KIND_MCP, KIND_OAUTH
from mcp_proxy.forward.recognize import (
    RequestView,
    endpoint_key,
    json_doc,
    oauth_kind,
    origin_of,
    parse_www_authenticate,
)

if TYPE_CHECKING:
    from mcp_proxy.forward.exchange import TapeExchange
    from mcp_proxy.forward.tape import ForwardTape

__all__ = ["OAuthLinker"]

#: Endpoint names in authorization-server metadata (RFC 8414) that the client calls directly.
AS_ENDPOINTS = (
    "token_endpoint",
    "registration_endpoint",
    "revocation_endpoint",
    "introspection_endpoint",
    "authorization_endpoint",
    "device_authorization_endpoint",
    "pushed_authorization_request_endpoint",
)


@dataclass
class _Held:
    ex: TapeExchange
    outcome: str
    error: str | None
    at: float = field(default_factory=time.monotonic)


class OAuthLinker:
    """Per-proxy memory of OAuth documents seen, and of dances waiting for their session."""

    def __init__(self) -> None:
        #: Endpoint key → role, from authorization-server metadata.
        self.as_endpoints: dict[str, str] = {}
        #: Authorization-server origin → the MCP origin whose resource metadata named it.
        self.as_to_resource: dict[str, str] = {}
        #: MCP origin → exchanges of a dance, oldest first, waiting for their session.
        self.held: dict[str, list[_Held]] = {}

    # ------------------------------------------------------------------ recognition
    def kind(self, view: RequestView) -> str | None:
        return oauth_kind(view, self.as_endpoints)

    def origin_for(self, view: RequestView, origin: str) -> str:
        """The MCP origin an OAuth request serves (its own origin when nothing says else)."""
        return self.as_to_resource.get(origin, origin)

    def on_request(self, ex: TapeExchange) -> None:
        ex.meta.setdefault("oauth", {})["served_origin"] = ex.origin

    # ------------------------------------------------------------------ learning
    def on_response(self, ex: TapeExchange, body: bytes) -> None:
        """Learn from a finished response: its 401 challenge, the documents it carries
        (``body``: the response body when it was handed whole, else empty)."""
        resp = ex.response
        if resp is None:
            return
        status = resp.status
        if status == 401:
            challenge = resp.header(b"www-authenticate")
            info: dict[str, Any] = (
                {"challenge": parse_www_authenticate(challenge)} if challenge else {}
            )
            if not challenge:
                info["missing_www_authenticate"] = True
            ex.meta.setdefault("oauth", {}).update(info)
            return
        role = ex.oauth_role
        if role is None or not (200 <= status < 300):
            return
        doc = json_doc(body) if body else None
        if not isinstance(doc, dict):
            return
        if role == "protected_resource_metadata":
            servers = doc.get("authorization_servers")
            if isinstance(servers, list):
                for url in servers:
                    if isinstance(url, str) and "://" in url:
                        self.as_to_resource[origin_of(url)] = ex.origin
            resource = doc.get("resource")
            ex.meta.setdefault("oauth", {})["resource"] = resource
        elif role == "authorization_server_metadata":
            issuer_origin = origin_of(ex.url)
            for name in AS_ENDPOINTS:
                url = doc.get(name)
                if isinstance(url, str) and "://" in url:
                    self.as_endpoints[endpoint_key(url)] = name
                    self.as_to_resource.setdefault(origin_of(url), ex.origin)
            self.as_to_resource.setdefault(issuer_origin, ex.origin)

    # ------------------------------------------------------------------ holding
    def hold(self, ex: TapeExchange, outcome: str, error: str | None) -> bool:
        """Keep a dance exchange back until its session is known; True when it was kept."""
        status = ex.status
        dance_open = ex.origin in self.held
        if ex.kind == KIND_MCP:
            if status == 401 and ex.entry is None:
                self.held.setdefault(ex.origin, []).append(_Held(ex, outcome, error))
                return True
            if status == 401:
                # 401 inside a session (an expired token): the dance that follows belongs to it.
                self.held.setdefault(ex.origin, [])
            return False
        if ex.kind == KIND_OAUTH and (dance_open or ex.entry is None):
            self.held.setdefault(ex.origin, []).append(_Held(ex, outcome, error))
            return True
        return False

    def before_register(self, tape: ForwardTape, ex: TapeExchange) -> None:
        """An MCP exchange is about to be written: its origin's held dance goes first."""
        if ex.kind != KIND_MCP or ex.entry is None:
            return
        if ex.status == 401:
            return
        held = self.held.pop(ex.origin, None)
        if not held:
            return
        for item in held:
            item.ex.meta.setdefault("oauth", {})["linked_to_session"] = ex.entry.session_id
            tape.attach(item.ex, ex.entry)
            tape.write_finished(item.ex, item.outcome, item.error)

    def flush_all(self, tape: ForwardTape) -> None:
        """The proxy stops: write every dance still waiting into its origin's fallback session."""
        held, self.held = self.held, {}
        for items in held.values():
            for item in items:
                tape.attach_fallback(item.ex)
                tape.write_finished(item.ex, item.outcome, item.error)
