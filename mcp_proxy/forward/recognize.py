"""What an HTTP exchange seen by the forward proxy is: MCP, part of an OAuth dance, or neither.

A forward proxy sees every request a host makes, to every origin; only MCP exchanges and the
OAuth exchanges that serve them are recorded. They are recognised by what they are, never by a
URL guess:

- **MCP**: a request body that is JSON-RPC 2.0; any ``Mcp-*`` request header
  (``Mcp-Session-Id``, ``MCP-Protocol-Version``, ``Mcp-Method``); a request to an endpoint already
  known to speak MCP (a legacy message endpoint named by an ``endpoint`` event, an MCP URL seen
  before); an event stream whose first event is a legacy ``endpoint`` event or carries JSON-RPC.
- **OAuth**: a 401 with ``WWW-Authenticate`` on an MCP endpoint; the discovery documents
  (``/.well-known/oauth-protected-resource``, ``/.well-known/oauth-authorization-server``,
  ``/.well-known/openid-configuration``); and any request to an endpoint that an authorization
  server's metadata named (registration, token, revocation…) or a token request by its body
  (``grant_type=`` form). Which MCP server a dance serves is learnt from the documents.

Pure functions over bytes and header lists: no mitmproxy import, testable without sockets.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qs, urljoin, urlsplit

from mcp_proxy.relay.http.sessions import BodyFacts, body_facts

__all__ = [
    "WELL_KNOWN_AS",
    "WELL_KNOWN_PRM",
    "RequestView",
    "is_event_stream",
    "legacy_endpoint",
    "looks_jsonrpc_data",
    "oauth_kind",
    "origin_of",
    "parse_www_authenticate",
    "url_parts",
]

WELL_KNOWN_PRM = "/.well-known/oauth-protected-resource"
WELL_KNOWN_AS = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")

_AUTH_PARAM = re.compile(r'([A-Za-z0-9_\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(slots=True)
class RequestView:
    """The facts of one request the recogniser needs (filled by the addon from a flow)."""

    method: str
    url: str  # absolute, scheme://host[:port]/path?query
    headers: list[tuple[str, str]]
    body: bytes
    facts: BodyFacts | None = None
    #: Lower-case name -> first value, made on the first look-up (one pass over the headers).
    index: dict[str, str] | None = None
    #: origin, endpoint key and query of ``url`` (:func:`url_parts`), made on first use.
    parts: tuple[str, str, str] | None = None
    #: Any ``Mcp-*`` header, found in the same pass as ``index``.
    mcp: bool = False

    def header(self, name: str) -> str | None:
        return self._names().get(name.lower())

    @property
    def has_mcp_header(self) -> bool:
        if self.index is None:
            self._names()
        return self.mcp

    def _names(self) -> dict[str, str]:
        index = self.index
        if index is None:
            index = self.index = {}
            for k, v in self.headers:
                index.setdefault(k.lower(), v)
            self.mcp = any(k.startswith("mcp-") for k in index)
        return index

    def url_parts(self) -> tuple[str, str, str]:
        if self.parts is None:
            self.parts = url_parts(self.url)
        return self.parts

    def body_facts(self) -> BodyFacts:
        if self.facts is None:
            self.facts = body_facts(self.body) if self.body else BodyFacts()
        return self.facts


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an absolute URL (default ports kept explicit for keys).

    Never raises: a URL that does not parse — mitmproxy writes an IPv6 host without brackets
    (``http://::1:8080/``) — is keyed by its whole network location instead.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _whole_location(url)
    return _origin(url, parts)


def _whole_location(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _origin(url: str, parts: SplitResult) -> str:
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return _whole_location(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port}"


def endpoint_key(url: str) -> str:
    """An endpoint without its query: ``origin`` + path (the unit MCP-ness is remembered by)."""
    return url_parts(url)[1]


def url_parts(url: str) -> tuple[str, str, str]:
    """The origin (:func:`origin_of`), endpoint key (:func:`endpoint_key`) and query of an
    absolute URL, from one parse."""
    parts = urlsplit(url)
    origin = _origin(url, parts)
    return origin, origin + (parts.path or "/"), parts.query


def is_event_stream(content_type: str | None) -> bool:
    return (content_type or "").lower().lstrip().startswith("text/event-stream")


def looks_jsonrpc_data(data: bytes) -> bool:
    """Whether one SSE event's data (or a body) is a JSON-RPC message (cheap look at its head)."""
    head = data[:512].lstrip()
    return head[:1] in (b"{", b"[") and b'"jsonrpc"' in data[:4096]


def legacy_endpoint(base_url: str, data: bytes) -> tuple[str, str | None]:
    """The absolute message URL and session id a legacy ``endpoint`` event names."""
    text = data.decode("utf-8", "replace").strip()
    url = urljoin(base_url, text)
    query = urlsplit(url).query
    sid = None
    if query:
        qs = parse_qs(query)
        for key in ("session_id", "sessionId"):
            if qs.get(key):
                sid = qs[key][0]
                break
    return url, sid


def parse_www_authenticate(value: str) -> dict[str, str]:
    """The scheme and auth-params of a ``WWW-Authenticate`` value (first challenge)."""
    value = value.strip()
    scheme, _, rest = value.partition(" ")
    out = {"scheme": scheme}
    for m in _AUTH_PARAM.finditer(rest):
        out[m.group(1).lower()] = m.group(2) if m.group(2) is not None else m.group(3)
    return out


def oauth_kind(req: RequestView, as_endpoints: dict[str, str]) -> str | None:
    """What part of an OAuth dance a request is, or None.

    ``as_endpoints`` maps endpoint keys (see :func:`endpoint_key`) learnt from authorization
    server metadata to their role (``token_endpoint`` …).
    """
    path = urlsplit(req.url).path  # the raw path (an endpoint key's is "/" when empty)
    if path.startswith(WELL_KNOWN_PRM):
        return "protected_resource_metadata"
    if any(path.startswith(p) for p in WELL_KNOWN_AS) or path.endswith(
        "/.well-known/openid-configuration"
    ):
        return "authorization_server_metadata"
    role = as_endpoints.get(req.url_parts()[1])
    if role is not None:
        return role
    ctype = (req.header("content-type") or "").lower()
    if (
        req.method == "POST"
        and ctype.startswith("application/x-www-form-urlencoded")
        and b"grant_type=" in req.body[:4096]
    ):
        return "token_endpoint"
    return None


def json_doc(body: bytes) -> Any:
    """A JSON document, or None (never raises)."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
