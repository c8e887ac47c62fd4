"""TLS session resumption towards upstream servers, for ``record --forward``.

mitmproxy opens one upstream connection per host connection and never reuses a TLS session
upstream (its ``tlsconfig`` leaves a TODO for it), so every host connection costs the proxy a
full TLS handshake to the server: certificate chain sent, verified and converted, a signature
made by the server. Hosts that open a connection per request — the MCP Python SDK of the
2025-11-25 era drops its connection after every POST — pay it per call.

:class:`UpstreamSessions` keeps the TLS session (with its TLS 1.3 ticket) of each upstream
connection when it closes and offers it on the next connection to the same server with the same
TLS settings, as browsers and most HTTP clients do. What the host sees does not change; the
server sees a resumed handshake (it may refuse it, and a full handshake follows). A session is
offered once (TLS 1.3 tickets are single-use) and only under the verification settings it was
verified with; sessions are kept in memory only, at most :data:`MAX_SESSIONS` servers.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any

__all__ = ["MAX_SESSIONS", "UpstreamSessions"]

#: Servers whose last session is kept (least recently stored dropped first).
MAX_SESSIONS = 256


class UpstreamSessions:
    """A mitmproxy addon: resume upstream TLS sessions across host connections."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        #: Upstream connections in TLS: connection id -> (key, pyOpenSSL connection).
        self._live: dict[str, tuple[tuple[Any, ...], Any]] = {}
        self.offered = 0
        self.resumed = 0

    @staticmethod
    def _key(conn: Any) -> tuple[Any, ...]:
        """Same server, same name, same protocols, same trust: only then is a session reused."""
        from mitmproxy import ctx

        o = ctx.options
        return (
            conn.address,
            conn.sni,
            tuple(conn.alpn_offers or ()),
            o.ssl_insecure,
            o.ssl_verify_upstream_trusted_ca,
            o.ssl_verify_upstream_trusted_confdir,
            o.client_certs,
            o.tls_version_server_min,
            o.tls_version_server_max,
            o.ciphers_server,
        )

    def tls_start_server(self, data: Any) -> None:
        if data.ssl_conn is None or data.is_dtls:
            return
        key = self._key(data.conn)
        session = self._sessions.pop(key, None)
        if session is not None:
            with contextlib.suppress(Exception):  # a stale session: a full handshake follows
                data.ssl_conn.set_session(session)
                self.offered += 1
        self._live[data.conn.id] = (key, data.ssl_conn)

    def tls_established_server(self, data: Any) -> None:
        item = self._live.get(data.conn.id)
        if item is not None and item[1].session_reused():
            self.resumed += 1

    def tls_failed_server(self, data: Any) -> None:
        item = self._live.pop(data.conn.id, None)
        if item is not None:
            self._sessions.pop(item[0], None)

    def server_disconnected(self, data: Any) -> None:
        item = self._live.pop(data.server.id, None)
        if item is None:
            return
        key, ssl_conn = item
        session = None
        with contextlib.suppress(Exception):
            session = ssl_conn.get_session()
        if session is None:
            return
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
