"""The HTTP relay: a recording reverse proxy for Streamable HTTP and legacy HTTP+SSE servers.

``mcptape record --upstream https://server.example/mcp`` listens on 127.0.0.1 and relays every
request — any method, any path — to the upstream origin, paths unchanged, so the host is pointed
at ``http://127.0.0.1:8765/mcp`` instead. What the relay guarantees, and how:

- **Exactly once.** Each host request is sent upstream once; nothing is buffered-and-resent and
  nothing is retried (a request that fails on a stale keep-alive connection is answered 502,
  never re-sent: only the host may decide to repeat a ``tools/call``).
- **Streaming.** Response bodies are forwarded chunk by chunk as they arrive, SSE keep-alive
  comments included; large request bodies stream through too. When the host closes its side,
  the handler is cancelled and the upstream response is closed at once — in the 2026-07-28 era
  that *is* how a request is cancelled.
- **Transparency.** The request head goes upstream as the host's own bytes (names, values,
  order), with hop-by-hop headers dropped as RFC 9110 requires and ``Host`` rewritten to the
  upstream's; status, reason and end-to-end response headers pass through in order, with the
  upstream's names (``Content-Length`` included); bodies are byte-exact (no decompression, no
  re-encoding). The one rewrite of content: a legacy SSE ``endpoint`` event carrying an absolute
  URL of the upstream origin is pointed at the relay, or the host would post around it.
- **DNS-rebinding protection.** Because ``Host`` is rewritten, the upstream's own check cannot
  see the host's ``Host``: the relay refuses (421) one that is not its own address
  (``--allow-host`` adds names); see :class:`~mcp_proxy.relay.http.common.HostCheck`.
- **Recording is a copy.** Frames and exchanges go to the recorder — a separate process fed
  through a pipe (:mod:`mcp_proxy.recorder.client`) — only after the bytes were forwarded; a quick
  exchange is handed over once, complete. Classification, redaction of bodies and database
  writes happen there, never on this event loop.

What is a frame here: every JSON-RPC body of an MCP exchange — a request body, a JSON response
body, or one SSE event's ``data`` (event type and id in their own columns) — exactly as the
upstream or the host sent it. For the rewritten ``endpoint`` event the frame is what the upstream
sent; what the host got is noted in the exchange's ``meta.endpoint``. SSE comments (keep-alives)
are forwarded and counted in ``meta.sse_comments``, not recorded as frames. Bodies of non-MCP
exchanges (``/.well-known/*``, OAuth endpoints) are kept, redacted and capped, in the exchange's
``meta.request_body`` / ``meta.response_body`` rather than as frames.

When the relay itself answers (upstream unreachable, timed out, reset before its response, a
refused ``Host``) the body is a JSON-RPC error with ``id: null`` plus an ``X-Mcptape-Error``
header; the exchange records what happened, and no frame is invented for the server.

Modules: ``common`` (limits, configuration, target, Host rules), ``forward`` (the upstream
request head, pure), ``exchange`` (one exchange and its recording state machine),
``request_side`` (the request's description and body), ``response`` and ``stream`` (the one
response path: small, streamed and SSE bodies), ``response_record`` (what a response leaves in
the recording), ``hooks`` (the verdicts hooks return at message boundaries), ``faults`` (fault
injection as hooks), ``server`` (the composed relay: lifecycle and the handler), ``upstream``
(the upstream seam and the connection pool), ``sessions`` (session grouping), ``run`` (the
command).

Importing this package is cheap: the heavy modules load only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_proxy.relay.http.common import RelayConfig
    from mcp_proxy.relay.http.run import record_http
    from mcp_proxy.relay.http.server import HTTPRelay

__all__ = ["HTTPRelay", "RelayConfig", "record_http"]

_LAZY = {
    "HTTPRelay": "mcp_proxy.relay.http.server",
    "RelayConfig": "mcp_proxy.relay.http.common",
    "record_http": "mcp_proxy.relay.http.run",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
