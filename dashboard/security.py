"""Who may talk to the dashboard, and what the browser may do with its pages.

The dashboard shows everything an MCP server and host exchanged — often tokens, file contents,
prompts. Threats and answers:

- **Another site in the user's browser** (CSRF, DNS rebinding): every request's ``Host`` must be
  one of the dashboard's own names (the address the connection arrived on, or ``localhost``,
  with the port), and any ``Origin`` must be the dashboard's own origin. A rebinding page has
  the attacker's host name in ``Host``; a cross-site form or fetch carries a foreign ``Origin``.
- **Another local user or process**: every request needs the per-run token — from the URL
  printed at start (``?token=``, which is swapped for a ``SameSite=Strict``, ``HttpOnly``
  cookie and removed from the address bar), an ``Authorization: Bearer`` header or an
  ``X-Mcptape-Token`` header.
- **State changes** (annotations) additionally need the token *in the request itself* — the
  ``_token`` form field or the ``X-Mcptape-Token`` header, never the cookie alone — so a
  request a browser adds cookies to cannot change anything by itself.
- **Hostile recorded content**: escaping (see :mod:`dashboard.present`), plus a strict
  Content-Security-Policy that allows no inline script at all, so even a missed escape cannot
  run code.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN_HEADER = "X-Mcptape-Token"
TOKEN_FIELD = "_token"

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not "no-referrer": with it, browsers send `Origin: null` on our own form posts.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

#: Paths served without the token: the stylesheet and script the refusal page itself uses.
PUBLIC_PREFIXES = ("/static/",)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def cookie_name(port: int) -> str:
    # Cookies ignore ports: two dashboards on one machine must not overwrite each other's.
    return f"mcptape_dashboard_{port}"


def _local_port(request: web.Request) -> int | None:
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sock, tuple) and len(sock) >= 2:
        return int(sock[1])
    return None


def own_hosts(request: web.Request, extra: frozenset[str] = frozenset()) -> set[str]:
    """The ``Host`` values that name this dashboard for the connection the request came on."""
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    if not (isinstance(sock, tuple) and len(sock) >= 2):
        return set()
    ip, port = str(sock[0]), int(sock[1])
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        addr = None
    hosts = {f"localhost:{port}"}
    if addr is not None and addr.version == 6:
        mapped = addr.ipv4_mapped
        hosts.add(f"{mapped}:{port}" if mapped else f"[{ip}]:{port}")
    else:
        hosts.add(f"{ip}:{port}")
    hosts.update(f"{h}:{port}" for h in extra)
    if port == 80:  # browsers leave the default port out
        hosts.update(h.rsplit(":", 1)[0] for h in list(hosts))
    return {h.lower() for h in hosts}


def presented_token(request: web.Request, *, cookie: bool = True) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if TOKEN_HEADER in request.headers:
        return request.headers[TOKEN_HEADER]
    if cookie:
        port = _local_port(request)
        if port is not None:
            value = request.cookies.get(cookie_name(port))
            if value:
                return value
        if request.method in SAFE_METHODS and "token" in request.query:
            return request.query["token"]
    return None


def token_ok(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def refuse(request: web.Request, status: int, reason: str) -> web.Response:
    """A plain refusal: JSON for API callers, a short page otherwise (no recorded data)."""
    if request.path.endswith(".json") or "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"error": {"status": status, "message": reason}}, status=status)
    body = (
        "<!doctype html><meta charset=utf-8><title>mcptape dashboard</title>"
        '<link rel="stylesheet" href="/static/dashboard.css">'
        f'<main class="refused"><h1>{status}</h1><p>{html.escape(reason)}</p></main>'
    )
    return web.Response(text=body, status=status, content_type="text/html")


def security_middleware(token: str, extra_hosts: frozenset[str] = frozenset()) -> Any:
    """Host/Origin checks, the token, and the security headers on every response."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await _check(request, handler, token, extra_hosts)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.path.startswith(PUBLIC_PREFIXES):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    return middleware


async def _check(
    request: web.Request, handler: Handler, token: str, extra_hosts: frozenset[str]
) -> web.StreamResponse:
    hosts = own_hosts(request, extra_hosts)
    host = request.headers.get("Host", "").lower()
    if host not in hosts:
        return refuse(request, 421, "This address is not the dashboard's own (Host refused).")
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin)
        if parts.scheme != "http" or parts.netloc.lower() not in hosts:
            return refuse(request, 403, "Cross-origin request refused.")
    elif request.method not in SAFE_METHODS:
        # Browsers send Origin on every POST; without one, insist on a same-origin fetch.
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return refuse(request, 403, "Cross-site request refused.")
    if request.path.startswith(PUBLIC_PREFIXES):
        return await handler(request)
    if not token_ok(token, presented_token(request)):
        return refuse(
            request,
            401,
            "Open the address that `mcptape dashboard` printed: it carries this run's token.",
        )
    if request.method not in SAFE_METHODS:
        explicit = presented_token(request, cookie=False)
        if explicit is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            value = form.get(TOKEN_FIELD)
            explicit = value if isinstance(value, str) else None
        if not token_ok(token, explicit):
            return refuse(request, 403, "A change needs this run's token in the request.")
    elif "token" in request.query and not request.path.endswith(".json"):
        # Trade the URL token for a cookie and drop it from the address bar (and history).
        query = {k: v for k, v in request.query.items() if k != "token"}
        location = request.path + ("?" + urlencode(query) if query else "")
        response = web.Response(status=303, headers={"Location": location})
        port = _local_port(request)
        if port is not None:
            response.set_cookie(
                cookie_name(port), token, httponly=True, samesite="Strict", path="/"
            )
        return response
    return await handler(request)
