"""OAuth checks over a session's HTTP exchanges: the usual ways the authorization dance fails.

The forward proxy (:mod:`mcp_proxy.forward`) records the dance around an MCP server — the 401
and its ``WWW-Authenticate``, the protected-resource and authorization-server metadata, the
registration and token endpoints — as HTTP exchanges of the MCP session, their bodies redacted
into ``meta.request_body`` / ``meta.response_body`` and their part in the dance in
``meta.oauth.role``. The reverse proxy records the same shapes for what reaches it. These checks
read only those rows (pure, no I/O):

- ``oauth.resource_mismatch`` — protected-resource metadata whose ``resource`` is not the MCP
  server it was fetched for (RFC 9728 §3.3: the client must refuse it);
- ``oauth.missing_www_authenticate`` — a 401 from an MCP endpoint with no challenge;
- ``oauth.token_error`` — the token endpoint answered an error;
- ``oauth.unauthorized_loop`` — the same client kept presenting a refused token.

``oauth_checks(http, sink)`` takes the session's exchange rows by id (as the analysis core
holds them) and, optionally, the frame seqs of each exchange to point the findings at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp_proxy.analysis.model import Exchange, FindingSink, Msg

__all__ = ["LOOP_THRESHOLD", "oauth_checks"]

#: Consecutive refused bearer tokens that make a loop.
LOOP_THRESHOLD = 3
PRM_PATH = "/.well-known/oauth-protected-resource"


def _meta(row: Mapping[str, Any]) -> dict[str, Any]:
    meta = row.get("meta")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = None
    return meta if isinstance(meta, dict) else {}


def _headers(row: Mapping[str, Any], key: str) -> list[Sequence[str]]:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    return [h for h in value or [] if isinstance(h, list | tuple) and len(h) >= 2]


def _header(row: Mapping[str, Any], key: str, name: str) -> str | None:
    low = name.lower()
    for h in _headers(row, key):
        if str(h[0]).lower() == low:
            return str(h[1])
    return None


def _role(meta: Mapping[str, Any], url: str) -> str | None:
    oauth = meta.get("oauth")
    if isinstance(oauth, dict) and isinstance(oauth.get("role"), str):
        return str(oauth["role"])
    path = urlsplit(url).path
    if path.startswith(PRM_PATH):
        return "protected_resource_metadata"
    return None


def _body_doc(meta: Mapping[str, Any], key: str) -> Any:
    body = meta.get(key)
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        return None
    try:
        return json.loads(body["text"])
    except ValueError:
        return None


def _origin(url: str) -> str:
    p = urlsplit(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    return f"{p.scheme}://{(p.hostname or '').lower()}:{port}"


def _norm(url: str) -> str:
    p = urlsplit(url)
    return _origin(url) + (p.path.rstrip("/") or "")


def oauth_checks(
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
    seqs_of: Mapping[int, Sequence[int]] | None = None,
) -> None:
    """Add the OAuth findings of one session's HTTP exchanges (rows keyed by id) to ``sink``."""
    seqs_of = seqs_of or {}
    rows = sorted(http.items(), key=lambda kv: (kv[1].get("started_at") or 0, kv[0]))
    mcp_urls: set[str] = set()
    for _, row in rows:
        url = str(row.get("url") or "")
        if _role(_meta(row), url) is None and not urlsplit(url).path.startswith("/.well-known/"):
            mcp_urls.add(_norm(url))
    refused_run: list[int] = []
    for hid, row in rows:
        url = str(row.get("url") or "")
        meta = _meta(row)
        role = _role(meta, url)
        status = row.get("status")
        seqs = list(seqs_of.get(hid, ()))
        if role == "protected_resource_metadata" and isinstance(status, int) and status < 300:
            _resource(hid, url, meta, mcp_urls, sink, seqs)
        elif role == "token_endpoint" and isinstance(status, int) and status >= 400:
            doc = _body_doc(meta, "response_body")
            err = doc.get("error") if isinstance(doc, dict) else None
            desc = doc.get("error_description") if isinstance(doc, dict) else None
            sink.add(
                "oauth.token_error",
                f"Token endpoint answered {status}" + (f" {err}" if err else ""),
                f"POST {url} (exchange {hid}) was refused with HTTP {status}"
                + (f": {err}" if err else "")
                + (f" — {desc}" if desc else "")
                + ".",
                seqs,
            )
        if role is not None:
            continue
        # An MCP exchange.
        if status == 401:
            if _header(row, "response_headers", "www-authenticate") is None:
                sink.add(
                    "oauth.missing_www_authenticate",
                    "401 without WWW-Authenticate",
                    f"{row.get('method')} {url} (exchange {hid}) was answered 401 with no"
                    " WWW-Authenticate header.",
                    seqs,
                )
            if _header(row, "request_headers", "authorization") is not None:
                refused_run.append(hid)
                if len(refused_run) == LOOP_THRESHOLD:
                    sink.add(
                        "oauth.unauthorized_loop",
                        f"{LOOP_THRESHOLD} refused tokens in a row",
                        "The client presented a bearer token and got 401 on exchanges "
                        + ", ".join(str(i) for i in refused_run)
                        + " with no successful request in between.",
                        [s for i in refused_run for s in seqs_of.get(i, ())],
                    )
        elif isinstance(status, int) and 200 <= status < 300:
            refused_run = []


def _resource(
    hid: int,
    url: str,
    meta: Mapping[str, Any],
    mcp_urls: set[str],
    sink: FindingSink,
    seqs: list[int],
) -> None:
    oauth = meta.get("oauth") if isinstance(meta.get("oauth"), dict) else {}
    resource = oauth.get("resource") if isinstance(oauth, dict) else None
    if resource is None:
        doc = _body_doc(meta, "response_body")
        resource = doc.get("resource") if isinstance(doc, dict) else None
    if not isinstance(resource, str) or not resource:
        return
    path = urlsplit(url).path
    suffix = path[len(PRM_PATH) :] if path.startswith(PRM_PATH) else ""
    expected = _origin(url) + suffix.rstrip("/")
    got = _norm(resource)
    ok = got == expected.rstrip("/") or (
        not suffix and any(m == got or m.startswith(got + "/") for m in mcp_urls)
    )
    if suffix == "" and got == _origin(url):
        ok = True  # the whole origin is the resource
    if not ok:
        sink.add(
            "oauth.resource_mismatch",
            "Protected-resource metadata names another resource",
            f"{url} (exchange {hid}) says resource {resource!r}; the client fetched it for"
            f" {expected or _origin(url)}.",
            seqs,
        )


#: Frames of one HTTP exchange an OAuth finding points at (its first ones).
_SEQS_PER_EXCHANGE = 4


class OAuth:
    """The OAuth checks as a :class:`~mcp_proxy.analysis.consumer.Consumer`: the messages give
    each HTTP exchange's first frames (what a finding points at), the checks run at the end over
    the session's http rows (held by the caller; this keeps a few seqs per row)."""

    def __init__(self, http: Mapping[int, Mapping[str, Any]], sink: FindingSink) -> None:
        self.http = http
        self.sink = sink
        self.seqs: dict[int, list[int]] = {}

    def exchange(self, ex: Exchange) -> None:
        pass

    def reads_messages(self) -> bool:
        return bool(self.http)

    def reads_exchanges(self) -> bool:
        return False

    def message(self, m: Msg) -> None:
        if m.http is None or not self.http:
            return
        seqs = self.seqs.setdefault(m.http, [])
        if len(seqs) < _SEQS_PER_EXCHANGE and (not seqs or seqs[-1] != m.seq):
            seqs.append(m.seq)

    def finish(self) -> None:
        if self.http:
            oauth_checks(self.http, self.sink, self.seqs)
