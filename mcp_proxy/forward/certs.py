"""The CA ``record --forward`` creates: mitmproxy's, with a P-256 key instead of RSA-2048.

mitmproxy makes every certificate it shows a host with the *CA's own key pair* (its leaf
certificates carry the CA's public key), so the CA's key type is the key type of every TLS
handshake between host and proxy. With mitmproxy's default RSA-2048 key the proxy's side of one
handshake costs about 2.0 ms of CPU here (the RSA signature is ~1 ms of it); with a P-256 key
0.6 ms (measured in-process with pyOpenSSL, both sides in memory). A host that opens a connection
per call — the MCP Python SDK in the 2025-11-25 era — pays it on every call.

Only a CA that does not exist yet is made here, in the files and format mitmproxy itself writes
(``mitmproxy-ca.pem`` with key and certificate, ``-ca-cert.pem``/``.cer``/``.p12``,
``-ca.p12``, ``-dhparam.pem``), with mitmproxy's extensions, names and validity, so
``mitmdump``/``mitmweb`` load it unchanged. An existing CA — mitmproxy's RSA one, or a CA a
user put there — is never touched: mitmproxy loads any key type it can sign with.
"""

from __future__ import annotations

import datetime
from pathlib import Path

__all__ = ["BASENAME", "create_ec_ca"]

#: mitmproxy's file prefix in its confdir (``mitmproxy.addons.tlsconfig.CONF_BASENAME``).
BASENAME = "mitmproxy"


def create_ec_ca(conf: Path, basename: str = BASENAME) -> bool:
    """Make mitmproxy's CA files in ``conf`` with a P-256 key, unless a CA is there already.

    Returns True when it made one. Same certificate as ``mitmproxy.certs.create_ca`` but for
    the key: CN and O ``mitmproxy``, CA basic constraints, key usage certificate and CRL
    signing, server-auth EKU, a subject key identifier, ten years from two days ago.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    from mitmproxy import certs

    store = conf / f"{basename}-ca.pem"
    if store.exists():
        return False
    conf.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, basename),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, basename),
        ]
    )
    now = datetime.datetime.now()
    usage = x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    ca = (
        x509.CertificateBuilder()
        .serial_number(x509.random_serial_number())
        .subject_name(name)
        .issuer_name(name)
        .not_valid_before(now + certs.CERT_VALIDITY_OFFSET)
        .not_valid_after(now + certs.CERT_VALIDITY_OFFSET + certs.CA_EXPIRY)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(private_key=key, algorithm=hashes.SHA256())
    )
    pem_cert = ca.public_bytes(serialization.Encoding.PEM)
    (conf / f"{basename}-ca-cert.pem").write_bytes(pem_cert)
    (conf / f"{basename}-ca-cert.cer").write_bytes(pem_cert)

    def p12(with_key: bool) -> bytes:
        """The CA as PKCS#12, with or without its key (mitmproxy writes both files)."""
        return pkcs12.serialize_key_and_certificates(
            name=basename.encode(),
            key=key if with_key else None,
            cert=ca,
            cas=None,
            encryption_algorithm=serialization.NoEncryption(),
        )

    (conf / f"{basename}-ca-cert.p12").write_bytes(p12(with_key=False))
    dhparam = conf / f"{basename}-dhparam.pem"
    if not dhparam.exists():
        dhparam.write_bytes(certs.DEFAULT_DHPARAM)
    with certs.CertStore.umask_secret():
        (conf / f"{basename}-ca.p12").write_bytes(p12(with_key=True))
        key_pem = key.private_bytes(
            encoding=serialization.Encoding.PEM,
            format=serialization.PrivateFormat.TraditionalOpenSSL,
            encryption_algorithm=serialization.NoEncryption(),
        )
        # Last, and whole: its existence is what mitmproxy (and this function) test for, so
        # a start cut short leaves no CA without the certificate file hosts are told to trust.
        tmp = conf / f".{basename}-ca.pem.tmp"
        tmp.write_bytes(key_pem + pem_cert)
        tmp.replace(store)
    return True
