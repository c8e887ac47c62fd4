"""The lean engine's TLS contexts: certificates it shows hosts, and trust towards upstreams.

Host side: mitmproxy's :class:`~mitmproxy.certs.CertStore` makes the certificates (the names, the
extensions, the CA's key as every leaf's key — exactly what the mitmproxy engine shows hosts); the
stdlib ``ssl`` module serves them. Upstream side: mitmproxy's rule under mitmproxy's option
names (certifi's bundle, or the CA ``config.yaml`` names instead), so both engines trust the same.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import ssl
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["LEAF_CACHE", "SNI_ATTR", "LeafContexts", "upstream_context"]

#: Where the SNI callback leaves the name a host sent (on its ``SSLObject``).
SNI_ATTR = "mcptape_sni"
#: Host names whose TLS context (certificate) is kept, most recently used first (mitmproxy
#: keeps 100 certificates).
LEAF_CACHE = 256


def upstream_context(options: dict[str, Any]) -> ssl.SSLContext:
    """The TLS context for upstream connections, with mitmproxy's rule and option names (one
    rule for both engines, docs/forward-proxy.md "Which upstreams are trusted"): certifi's
    bundle (Mozilla's list, what mitmproxy ships with) — not the system's store, nor
    ``SSL_CERT_FILE`` — unless ``ssl_verify_upstream_trusted_ca``/``_confdir`` name the trust,
    which then *replaces* it; no verification at all with ``ssl_insecure``."""
    cafile = options.get("ssl_verify_upstream_trusted_ca") or None
    capath = options.get("ssl_verify_upstream_trusted_confdir") or None
    if cafile is None and capath is None:
        import certifi

        cafile = certifi.where()
    # With a cafile or capath, create_default_context loads only those (no default paths).
    ctx = ssl.create_default_context(cafile=cafile, capath=capath)
    if options.get("ssl_insecure"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class LeafContexts:
    """Server-side TLS contexts per host name, with certificates from mitmproxy's CA.

    mitmproxy's :class:`~mitmproxy.certs.CertStore` makes the certificates (the names, the
    extensions and the CA's key as every leaf's key, exactly as the mitmproxy engine shows
    hosts); the stdlib ``ssl`` module serves them (C: no Python per TLS record beyond asyncio's).
    One context per name, the :data:`LEAF_CACHE` most recently used kept; each certificate's PEM
    file lives in a private temporary directory only until it is loaded.
    """

    def __init__(self, conf: Path, basename: str = "mitmproxy") -> None:
        from mitmproxy import certs

        self.store = certs.CertStore.from_store(conf, basename, 2048)
        self.dir = Path(tempfile.mkdtemp(prefix="mcptape-leaf-"))
        # The CA's own file (its key, then its certificate) keys every leaf: no copy of the
        # key outside the confdir (a temporary one would outlive a crash of the proxy).
        self.key_file = conf / f"{basename}-ca.pem"
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._made = 0

    def context(self, name: str) -> ssl.SSLContext:
        """The context for ``name``; the :data:`LEAF_CACHE` most recently used are kept (a new
        name costs a certificate: ~3 ms of CPU on the event loop)."""
        contexts = self._contexts
        ctx = contexts.get(name)
        if ctx is None:
            ctx = contexts[name] = self._make(name)
            if len(contexts) > LEAF_CACHE:
                contexts.popitem(last=False)
        else:
            contexts.move_to_end(name)
        return ctx

    def _make(self, name: str) -> ssl.SSLContext:
        from cryptography import x509

        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            alt = x509.DNSName(name.encode("idna").decode())
        entry = self.store.get_cert(name, [alt])
        pem = entry.cert.to_pem() + b"".join(c.to_pem() for c in entry.chain_certs)
        self._made += 1
        path = self.dir / f"{self._made}.pem"
        path.write_bytes(pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(path, self.key_file)
        finally:
            path.unlink()  # loaded: the file is not needed any more
        ctx.set_alpn_protocols(["http/1.1"])
        # One TLS 1.3 session ticket, not OpenSSL's two: hosts open a connection per call
        # without resuming (the SDK's httpx keeps no sessions), and each ticket costs the proxy
        # CPU on every handshake. Not none: the ticket's segment is what acknowledges the
        # host's Finished at once — without it a host without TCP_NODELAY holds its first
        # request until the proxy's delayed ACK (40 ms; measured).
        ctx.num_tickets = 1
        ctx.sni_callback = self._sni
        return ctx

    def _sni(self, obj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        """A host whose SNI names another host than its CONNECT line gets that host's cert
        (and the upstream is asked for that name: see :class:`TunnelFront`)."""
        if name:
            setattr(obj, SNI_ATTR, name)
            with contextlib.suppress(Exception):
                chosen = self.context(name)
                if chosen is not ctx:
                    obj.context = chosen

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
