"""The CA ``record --forward`` makes (P-256) and the CA it finds (kept as it is).

mitmproxy gives every certificate it makes the CA's own key, so the CA's key type is the key of
every host-side TLS handshake: a P-256 key costs the proxy a third of an RSA-2048 one per
connection (mcp_proxy/forward/certs.py). Each case starts a real proxy on its own confdir and
looks at the certificate a real TLS client receives through it, then makes a real MCP call.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.forward.conftest import Forward, TLSFiles, TLSServer, run_forward, wait_exchanges

pytestmark = pytest.mark.timeout(180)

RPC = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"ca"}}}'
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def confdir_for(tmp: Path, tls: TLSFiles) -> Path:
    conf = tmp / "mitm"
    conf.mkdir()
    (conf / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {tls.ca_pem}\n")
    return conf


def leaf_through(fw: Forward, server_url: str) -> x509.Certificate:
    """The certificate a TLS client verifying against the proxy's CA gets for the server."""
    host, port = server_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    phost, pport = fw.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((phost, int(pport)), timeout=30) as raw:
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = raw.recv(4096)
            assert chunk, head
            head += chunk
        assert head.split(b" ", 2)[1] == b"200", head
        with fw.ssl_context().wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def one_call(fw: Forward, server_url: str) -> None:
    async with fw.http_client() as client:
        r = await client.post(server_url, content=RPC, headers=HEADERS)
    assert r.status_code == 200, r.text


async def test_a_new_ca_has_a_p256_key(
    tmp_path: Path, tls_files: TLSFiles, tls_stateless: TLSServer
) -> None:
    conf = confdir_for(tmp_path, tls_files)
    with run_forward(tmp_path / "ec.db", conf) as fw:
        ca = x509.load_pem_x509_certificate((conf / "mitmproxy-ca-cert.pem").read_bytes())
        key = ca.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
        leaf = leaf_through(fw, tls_stateless.url)
        assert leaf.public_key() == key  # mitmproxy's leaves carry the CA's key
        leaf.verify_directly_issued_by(ca)
        await one_call(fw, tls_stateless.url)
        wait_exchanges(fw, "/mcp")
    # Every file mitmproxy writes for its CA, the key ones private.
    names = {p.name for p in conf.iterdir()}
    for suffix in ("ca.pem", "ca.p12", "ca-cert.pem", "ca-cert.cer", "ca-cert.p12", "dhparam.pem"):
        assert f"mitmproxy-{suffix}" in names
    assert (conf / "mitmproxy-ca.pem").stat().st_mode & 0o077 == 0
    assert (conf / "mitmproxy-ca.p12").stat().st_mode & 0o077 == 0
    assert not any(n.endswith(".tmp") for n in names)


async def test_an_existing_rsa_ca_is_kept(
    tmp_path: Path, tls_files: TLSFiles, tls_stateless: TLSServer
) -> None:
    """A CA already in the confdir (here mitmproxy's own RSA one) is used, never replaced."""
    from mitmproxy import certs

    conf = confdir_for(tmp_path, tls_files)
    certs.CertStore.create_store(conf, "mitmproxy", 2048)
    before = (conf / "mitmproxy-ca.pem").read_bytes()
    with run_forward(tmp_path / "rsa.db", conf) as fw:
        leaf = leaf_through(fw, tls_stateless.url)
        assert isinstance(leaf.public_key(), rsa.RSAPublicKey)
        await one_call(fw, tls_stateless.url)
        wait_exchanges(fw, "/mcp")
    assert (conf / "mitmproxy-ca.pem").read_bytes() == before
