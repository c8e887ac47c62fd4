"""``record --forward --engine mitmproxy``: mitmproxy as it ships (issue #23).

Nothing of mitmproxy is replaced or recompiled: the real proxy runs with a private bytecode
cache (``PYTHONPYCACHEPREFIX``) and what it compiled is on disk afterwards — mitmproxy's
modules as the plain ``.pyc`` any import writes, none as ``.opt-1.pyc`` (the import hook that
loaded them without their asserts is gone). A user's script from config.yaml sees the flows
through mitmproxy's own addon manager. mitmproxy's own TLS addon, on the P-256 CA
``record --forward`` makes, completes a real (in-memory) handshake with a verifying client.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from mitmproxy import connection, tls
from mitmproxy.addons import tlsconfig
from mitmproxy.proxy import context
from mitmproxy.test import taddons, tflow
from OpenSSL import SSL

from mcp_proxy.forward.certs import create_ec_ca
from tests.forward.conftest import TLSFiles, TLSServer, run_forward, wait_exchanges

pytestmark = pytest.mark.timeout(180)

RPC = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"echo","arguments":{"text":"shipped"}}}'
)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def compiled(prefix: Path, package: str) -> tuple[set[str], set[str]]:
    """Names of ``package``'s cached modules under a pycache prefix: (optimized, plain)."""
    opt, plain = set(), set()
    for p in prefix.rglob("*.pyc"):
        if f"/{package}/" not in p.as_posix():
            continue
        (opt if ".opt-1." in p.name else plain).add(p.name.split(".")[0])
    return opt, plain


@pytest.mark.full  # the engine itself runs in the default run: test_sdk's mitmproxy cell
async def test_mitmproxy_is_loaded_as_it_ships(
    tmp_path: Path, confdir: Path, tls_files: TLSFiles, tls_stateless: TLSServer
) -> None:
    prefix = tmp_path / "pyc"
    env = {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": ""}
    with run_forward(tmp_path / "o.db", confdir, "--engine", "mitmproxy", env=env) as fw:
        async with fw.http_client() as client:
            r = await client.post(tls_stateless.url, content=RPC, headers=HEADERS)
        assert r.status_code == 200, r.text
        wait_exchanges(fw, "/mcp")
    opt, plain = compiled(prefix, "mitmproxy")
    assert {"http", "layer", "tls", "addonmanager", "tlsconfig"} <= plain, plain
    assert not opt, opt


def test_record_forward_runs_a_config_yaml_script(
    tmp_path: Path, tls_files: TLSFiles, tls_stateful: TLSServer
) -> None:
    """Through the real proxy: a user's script from config.yaml (which selects the mitmproxy
    engine) sees the flows, and the MCP call is still recorded."""
    seen = tmp_path / "seen.txt"
    script = tmp_path / "note.py"
    script.write_text(
        "def response(flow):\n"
        f"    open({str(seen)!r}, 'a').write(f'{{flow.request.path}} {{flow.response.status_code}}\\n')\n"
    )
    conf = tmp_path / "mitm"
    conf.mkdir()
    (conf / "config.yaml").write_text(
        f"ssl_verify_upstream_trusted_ca: {tls_files.ca_pem}\nscripts: [{script}]\n"
    )
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    with run_forward(tmp_path / "rec.db", conf) as fw:

        async def go() -> int:
            async with fw.http_client() as c:
                r = await c.post(tls_stateful.url, content=body, headers=HEADERS)
                return r.status_code

        status = asyncio.run(go())
        assert fw.stop() == 0
    assert any("forward engine: mitmproxy" in line for line in fw.stderr)
    assert seen.read_text() == f"/mcp {status}\n"
    assert any(e["url"].endswith("/mcp") for e in fw.exchanges())


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


def test_mitmproxys_tls_addon_on_the_p256_ca(tmp_path: Path) -> None:
    """mitmproxy's own TlsConfig, driven as its proxy drives it (``tls_start_client`` for a
    host connection), with the CA ``record --forward`` makes: one P-256 leaf per server,
    naming the server, verified against the confdir's CA; ALPN follows the upstream's."""
    conf = tmp_path / "mitm"
    assert create_ec_ca(conf)
    addon = tlsconfig.TlsConfig()
    pairs: list[tuple[SSL.Connection, SSL.Connection]] = []
    with taddons.context(addon) as tctx:
        tctx.configure(addon, confdir=str(conf))
        for _ in range(3):
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
            pairs.append((data.ssl_conn, peer))
    leaves: list[Any] = [peer.get_peer_certificate(as_cryptography=True) for _, peer in pairs]
    assert all(leaf is not None for leaf in leaves)
    assert all(leaf == leaves[0] for leaf in leaves)  # one certificate per server, reused
    key = leaves[0].public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    san = leaves[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "example.mcp" in san.get_values_for_type(x509.DNSName)
    for server, peer in pairs:
        assert server.get_alpn_proto_negotiated() == peer.get_alpn_proto_negotiated() == b"http/1.1"
