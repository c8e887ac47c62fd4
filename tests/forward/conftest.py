"""Harness for the forward-proxy tests: real TLS servers, the real proxy, the real database.

- A test-made CA (``trustme``) signs the servers' certificates; mitmproxy is told to trust it
  for upstreams through ``config.yaml`` in its configuration directory (a temporary one, given by
  ``MCPTAPE_MITMPROXY_CONFDIR``), exactly as a user would.
- The proxy is ``mcptape record --forward --port 0 --db FILE``, a real subprocess, read for its
  ``mcptape: forward proxy on <url>`` line; SIGINT drains the recording.
- Clients are the SDK's, over an ``httpx2`` client that uses the proxy and trusts mitmproxy's CA
  (and nothing else: a request that bypassed the proxy would fail TLS).
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trustme

from tests.forward.tee import TeeTransport
from tests.helpers.forkserver import server_python
from tests.relay.conftest import MCPTAPE, Proxy

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "tls_servers.py"
READY = "MCPTAPE_TEST_SERVER_READY"


@dataclass
class TLSFiles:
    ca: trustme.CA
    ca_pem: Path
    chain: Path
    key: Path


@pytest.fixture(scope="session")
def private_dir() -> Iterator[Path]:
    """A directory of our own: pytest prunes old ``basetemp`` trees, and parallel runs of the
    suite (same user) can prune a session-scoped one from under us."""
    with tempfile.TemporaryDirectory(prefix="mcptape-fwd-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def tls_files(private_dir: Path) -> TLSFiles:
    d = private_dir / "tls"
    d.mkdir()
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_pem = d / "test-ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    chain = d / "server-chain.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    key = d / "server-key.pem"
    cert.private_key_pem.write_to_path(str(key))
    return TLSFiles(ca, ca_pem, chain, key)


@pytest.fixture(scope="session")
def confdir(private_dir: Path, tls_files: TLSFiles) -> Path:
    """mitmproxy's configuration directory: its CA is made on first start."""
    d = private_dir / "mitm"
    d.mkdir()
    (d / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {tls_files.ca_pem}\n")
    return d


@dataclass
class TLSServer:
    url: str
    proc: subprocess.Popen[bytes]
    issuer: str | None = None
    lines: list[str] = field(default_factory=list)


@contextlib.contextmanager
def start_tls_server(tls: TLSFiles, *args: str, timeout: float = 90.0) -> Iterator[TLSServer]:
    proc = subprocess.Popen(
        [server_python(), str(SERVERS), "--cert", str(tls.chain), "--key", str(tls.key), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    found: dict[str, str] = {}
    event = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if line.startswith("AS "):
                found["as"] = line.split()[1]
            if line.startswith(READY + " "):
                found["url"] = line.split()[1]
                event.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        if not event.wait(timeout):
            raise RuntimeError("TLS server did not start:\n" + "\n".join(lines))
        yield TLSServer(found["url"], proc, found.get("as"), lines)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        t.join(2)


@pytest.fixture(scope="session")
def tls_stateful(tls_files: TLSFiles) -> Iterator[TLSServer]:
    with start_tls_server(tls_files, "--mode", "stateful") as s:
        yield s


@pytest.fixture(scope="session")
def tls_stateless(tls_files: TLSFiles) -> Iterator[TLSServer]:
    with start_tls_server(tls_files, "--mode", "stateless") as s:
        yield s


@pytest.fixture(scope="session")
def tls_sse(tls_files: TLSFiles) -> Iterator[TLSServer]:
    with start_tls_server(tls_files, "--mode", "sse") as s:
        yield s


@dataclass
class Forward(Proxy):
    """The running forward proxy (``url`` is the proxy URL)."""

    ca_cert: Path = Path()

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def http_client(self, **kwargs: Any) -> httpx2.AsyncClient:
        """An httpx2 client as the SDK would make, through the proxy, trusting only its CA."""
        timeout = httpx2.Timeout(30.0, read=300.0)
        return httpx2.AsyncClient(
            proxy=self.url, verify=self.ssl_context(), timeout=timeout, trust_env=False, **kwargs
        )

    def tee_client(self) -> tuple[httpx2.AsyncClient, TeeTransport]:
        """A client through the proxy that keeps what it saw (see :mod:`tests.forward.tee`)."""
        inner = httpx2.AsyncHTTPTransport(
            proxy=self.url, verify=self.ssl_context(), trust_env=False
        )
        tee = TeeTransport(inner)
        client = httpx2.AsyncClient(
            transport=tee, timeout=httpx2.Timeout(30.0, read=300.0), trust_env=False
        )
        return client, tee


def direct_client(tls: TLSFiles) -> httpx2.AsyncClient:
    """An httpx2 client straight to the test servers (trusting the test CA only)."""
    ctx = ssl.create_default_context(cafile=str(tls.ca_pem))
    return httpx2.AsyncClient(verify=ctx, timeout=httpx2.Timeout(30.0, read=300.0), trust_env=False)


@contextlib.contextmanager
def run_forward(
    db: Path,
    confdir: Path,
    *extra: str,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> Iterator[Forward]:
    """``mcptape record --forward`` as a subprocess; ``prefix`` runs it under a wrapper (the
    benchmark's ``python -m cProfile -o FILE``)."""
    import os

    full_env = dict(os.environ)
    full_env["MCPTAPE_MITMPROXY_CONFDIR"] = str(confdir)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        full_env.pop(name, None)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(
        [*prefix, str(MCPTAPE), "record", "--forward", "--port", "0", "--db", str(db), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=full_env,
    )
    lines: list[str] = []
    found: dict[str, str] = {}
    event = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if line.startswith("mcptape: forward proxy on "):
                found["url"] = line.split()[4]
            if line.startswith("mcptape: mitmproxy CA certificate: "):
                found["ca"] = line.split(": ", 2)[2]
                event.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while not event.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            t.join(2)
            raise RuntimeError("forward proxy did not start:\n" + "\n".join(lines))
    fw = Forward(found["url"], proc, db, lines, ca_cert=Path(found["ca"]))
    try:
        yield fw
    finally:
        if proc.poll() is None:
            fw.stop()
        t.join(5)


@pytest.fixture(scope="session")
def shared_fw(private_dir: Path, confdir: Path) -> Iterator[Forward]:
    """One proxy for every test that looks only at its own exchanges (by URL or origin) and
    needs no session to end: a proxy start (mitmproxy import, CA, recorder worker) is seconds
    on a busy machine."""
    with run_forward(private_dir / "shared.db", confdir) as proxy:
        yield proxy


def wait_exchanges(fw: Forward, url_part: str, n: int = 1, within: float = 60.0) -> list[Any]:
    """The recorded exchanges whose URL contains ``url_part`` once ``n`` of them have ended
    (the recorder writes asynchronously; the proxy keeps running)."""
    deadline = time.monotonic() + within
    rows: list[Any] = []
    while time.monotonic() < deadline:
        try:
            rows = [e for e in fw.exchanges() if url_part in e["url"] and e["ended_at"] is not None]
        except Exception:  # the database may not exist yet
            rows = []
        if len(rows) >= n:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"no {n} recorded exchange(s) for {url_part}: {rows}")


def frames_of(fw: Forward, exchange_id: int) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in fw.query(
            "SELECT * FROM frames WHERE http_exchange_id = ? ORDER BY seq", exchange_id
        )
    ]
