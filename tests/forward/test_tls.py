"""LeanTlsConfig (mcp_proxy/forward/tls.py): host-side TLS like mitmproxy's, key loaded once.

Each case drives the TLS addon the way mitmproxy's proxy does (``tls_start_client`` for a host
connection of a real proxy context, mitmproxy's test harness for options) and completes a real
TLS handshake in memory against it with a pyOpenSSL client that verifies the certificate
against the CA in the confdir. The whole proxy path is covered by the other forward tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from mitmproxy import connection, tls
from mitmproxy.addons import tlsconfig
from mitmproxy.proxy import context
from mitmproxy.test import taddons, tflow
from OpenSSL import SSL

from mcp_proxy.forward.certs import create_ec_ca
from mcp_proxy.forward.tls import LeanTlsConfig, upstream_matches, upstream_source_sha256


def test_the_copied_mitmproxy_method_is_the_installed_one() -> None:
    """The copy in LeanTlsConfig follows mitmproxy's method; a new mitmproxy whose method
    changed makes it fall back to the original, and this test asks for the copy to follow."""
    assert upstream_matches(), (
        "mitmproxy's TlsConfig.tls_start_client changed (sha256 "
        f"{upstream_source_sha256()}): bring mcp_proxy/forward/tls.py up to date"
    )


@pytest.fixture(scope="module")
def conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mitm")
    create_ec_ca(d)
    return d


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often a key is loaded into a connection or a context (the real calls, counted)."""
    counts = {"connection": 0, "context": 0}
    conn_use, ctx_use = SSL.Connection.use_privatekey, SSL.Context.use_privatekey

    def on_conn(self: Any, key: Any) -> None:
        counts["connection"] += 1
        conn_use(self, key)

    def on_ctx(self: Any, key: Any) -> None:
        counts["context"] += 1
        ctx_use(self, key)

    monkeypatch.setattr(SSL.Connection, "use_privatekey", on_conn)
    monkeypatch.setattr(SSL.Context, "use_privatekey", on_ctx)
    yield counts


def handshake(server: SSL.Connection, ca: Path, alpn: list[bytes]) -> SSL.Connection:
    """A verifying TLS client against ``server``, in memory, to the end of the handshake."""
    cctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    cctx.load_verify_locations(str(ca))
    cctx.set_verify(SSL.VERIFY_PEER, None)
    client = SSL.Connection(cctx, None)
    client.set_tlsext_host_name(b"example.mcp")
    client.set_alpn_protos(alpn)
    client.set_connect_state()
    done = [False, False]
    for _ in range(20):
        for i, (a, b) in enumerate(((client, server), (server, client))):
            try:
                a.do_handshake()
                done[i] = True
            except SSL.WantReadError:
                pass
            try:
                data = a.bio_read(65536)
            except SSL.WantReadError:
                data = b""
            if data:
                b.bio_write(data)
        if all(done):
            return client
    raise AssertionError("no handshake")


def connections(addon: Any, conf: Path, n: int) -> list[tuple[SSL.Connection, SSL.Connection]]:
    out = []
    with taddons.context(addon) as tctx:
        tctx.configure(addon, confdir=str(conf))
        for _ in range(n):
            client = tflow.tclient_conn()
            client.sni = "example.mcp"
            client.alpn_offers = [b"h2", b"http/1.1"]
            ctx = context.Context(client, tctx.options)
            ctx.server = connection.Server(address=("example.mcp", 443))
            ctx.server.alpn = b"http/1.1"
            data = tls.TlsData(client, context=ctx)
            addon.tls_start_client(data)
            assert data.ssl_conn is not None
            peer = handshake(data.ssl_conn, conf / "mitmproxy-ca-cert.pem", [b"h2", b"http/1.1"])
            out.append((data.ssl_conn, peer))
    return out


@pytest.mark.parametrize("kind", ["lean", "mitmproxy"])
def test_host_handshakes_as_mitmproxy_and_key_loaded_once(
    kind: str, conf: Path, counted: dict[str, int]
) -> None:
    addon = LeanTlsConfig() if kind == "lean" else tlsconfig.TlsConfig()
    pairs = connections(addon, conf, 3)
    leaves = [peer.get_peer_certificate(as_cryptography=True) for _, peer in pairs]
    assert all(leaf is not None for leaf in leaves)
    assert all(leaf == leaves[0] for leaf in leaves)  # one certificate per server, reused
    san = leaves[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "example.mcp" in san.get_values_for_type(x509.DNSName)
    for server, peer in pairs:
        # The server's ALPN choice: mitmproxy's callback, which follows the upstream's.
        assert server.get_alpn_proto_negotiated() == peer.get_alpn_proto_negotiated() == b"http/1.1"
    if kind == "lean":
        assert counted == {"connection": 0, "context": 1}
    else:
        assert counted == {"connection": 3, "context": 0}
