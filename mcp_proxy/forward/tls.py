"""Host-side TLS set-up without the per-connection key and certificate conversions.

mitmproxy's :meth:`TlsConfig.tls_start_client` makes every host connection from a shared,
cached ``SSL.Context`` and then loads the certificate and the private key *into the connection*:
pyOpenSSL converts each from its ``cryptography`` object by serialising it to DER and parsing it
back (``X509.from_cryptography``, ``PKey.from_cryptography_key``) — about 0.28 ms of CPU per
connection here (0.13 + 0.15 ms with a P-256 key, more with RSA), paid on every connection
although a certificate is reused for every connection to the same server.

:class:`LeanTlsConfig` makes the same connection from a context that already holds the
certificate and the key: one context per (certificate entry, context settings), built by
mitmproxy's own uncached ``create_client_proxy_context`` and loaded once; a connection of it
costs ~0.014 ms. Everything else is mitmproxy's method line for line (ciphers, versions, ALPN,
chain certificates, client certificate requests, the app data the ALPN callback reads).

The copy is guarded: :data:`UPSTREAM_SHA256` is the hash of the mitmproxy method it was copied
from; when the installed mitmproxy's method differs, :class:`LeanTlsConfig` falls back to it
whole (and ``tests/forward/test_tls.py`` fails, asking for the copy to be brought up to date).
Only ``record --forward`` uses it, and ``MCPTAPE_FORWARD_TUNING=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import inspect
import textwrap
from collections import OrderedDict
from typing import Any

from mitmproxy import connection, ctx, tls
from mitmproxy.addons import tlsconfig
from mitmproxy.net import tls as net_tls
from mitmproxy.proxy.layers import modes
from OpenSSL import SSL

__all__ = ["MAX_CONTEXTS", "UPSTREAM_SHA256", "LeanTlsConfig", "upstream_matches"]

#: SHA-256 of mitmproxy 12.3.1's ``TlsConfig.tls_start_client`` source (dedented).
UPSTREAM_SHA256 = "684e8c8c6adfb587c97d84b50bad02b419084d6cadb2c3789db7da877053ef32"
#: Contexts kept (mitmproxy's certificate store keeps 100 certificates).
MAX_CONTEXTS = 256


def upstream_source_sha256() -> str:
    """The hash of the installed mitmproxy's ``tls_start_client``."""
    src = textwrap.dedent(inspect.getsource(tlsconfig.TlsConfig.tls_start_client))
    return hashlib.sha256(src.encode()).hexdigest()


def upstream_matches() -> bool:
    try:
        return upstream_source_sha256() == UPSTREAM_SHA256
    except (OSError, TypeError):  # no source (a frozen build): cannot tell, do not copy
        return False


class LeanTlsConfig(tlsconfig.TlsConfig):
    """mitmproxy's TLS addon; host connections start from a context holding their key."""

    # Same name as the addon it replaces, for anyone who looks it up (``addons.get``).
    name = "tlsconfig"

    def __init__(self) -> None:
        super().__init__()
        self.lean = upstream_matches()
        #: ``id(entry)`` -> (the entry, kept so that its id is not reused; settings -> context).
        self._contexts: OrderedDict[int, tuple[Any, dict[tuple[Any, ...], SSL.Context]]] = (
            OrderedDict()
        )

    def configure(self, updated: Any) -> None:
        super().configure(updated)
        self._contexts.clear()  # a new certificate store, new entries (and settings)

    def _context_for(self, entry: Any, settings: dict[str, Any]) -> SSL.Context:
        slot = self._contexts.get(id(entry))
        if slot is None or slot[0] is not entry:
            slot = (entry, {})
            self._contexts[id(entry)] = slot
            while len(self._contexts) > MAX_CONTEXTS:
                self._contexts.popitem(last=False)
        else:
            self._contexts.move_to_end(id(entry))
        key = tuple(settings.values())
        ssl_ctx = slot[1].get(key)
        if ssl_ctx is None:
            # mitmproxy's own context maker, uncached (ours is keyed by the entry too).
            ssl_ctx = net_tls.create_client_proxy_context.__wrapped__(**settings)
            ssl_ctx.use_certificate(entry.cert.to_cryptography())
            ssl_ctx.use_privatekey(entry.privatekey)
            slot[1][key] = ssl_ctx
        return ssl_ctx

    def tls_start_client(self, tls_start: tls.TlsData) -> None:
        """Establish TLS or DTLS between client and proxy (mitmproxy's, see the module)."""
        if not self.lean:
            return super().tls_start_client(tls_start)
        if tls_start.ssl_conn is not None:
            return  # a user addon has already provided the pyOpenSSL context.

        assert isinstance(tls_start.conn, connection.Client)

        client: connection.Client = tls_start.conn
        server: connection.Server = tls_start.context.server

        entry = self.get_cert(tls_start.context)

        if not client.cipher_list and ctx.options.ciphers_client:
            client.cipher_list = ctx.options.ciphers_client.split(":")
        # don't assign to client.cipher_list, doesn't need to be stored.
        cipher_list = client.cipher_list or tlsconfig._default_ciphers(
            net_tls.Version[ctx.options.tls_version_client_min]
        )

        extra_chain_certs = []
        if entry.chain_file is None and len(entry.chain_certs) > 1:
            extra_chain_certs.extend(entry.chain_certs)
        if ctx.options.add_upstream_certs_to_client_chain:  # pragma: no cover
            extra_chain_certs.extend(server.certificate_list)

        settings = dict(
            method=net_tls.Method.DTLS_SERVER_METHOD
            if tls_start.is_dtls
            else net_tls.Method.TLS_SERVER_METHOD,
            min_version=net_tls.Version[ctx.options.tls_version_client_min],
            max_version=net_tls.Version[ctx.options.tls_version_client_max],
            cipher_list=tuple(cipher_list),
            ecdh_curve=net_tls.get_curve(ctx.options.tls_ecdh_curve_client),
            chain_file=entry.chain_file,
            request_client_cert=ctx.options.request_client_cert,
            alpn_select_callback=tlsconfig.alpn_select_callback,
            extra_chain_certs=tuple(extra_chain_certs),
            dhparams=self.certstore.dhparams,
        )
        # The one change: the certificate and key are in the context already.
        tls_start.ssl_conn = SSL.Connection(self._context_for(entry, settings))

        # Force HTTP/1 for secure web proxies, we currently don't support CONNECT over HTTP/2.
        if len(tls_start.context.layers) == 2 and isinstance(
            tls_start.context.layers[0], modes.HttpProxy
        ):
            client_alpn: bytes | None = b"http/1.1"
        else:
            client_alpn = client.alpn

        tls_start.ssl_conn.set_app_data(
            tlsconfig.AppData(
                client_alpn=client_alpn,
                server_alpn=server.alpn,
                http2=ctx.options.http2,
            )
        )
        tls_start.ssl_conn.set_accept_state()
        return None
