"""mitmproxy without its debug-only checks in ``record --forward`` (mcp_proxy/forward/optimize.py).

The real proxy runs with a private bytecode cache (``PYTHONPYCACHEPREFIX``): what it compiled,
and how, is on disk afterwards — mitmproxy's modules as ``.opt-1.pyc`` (what ``python -O``
writes), everything else as plain ``.pyc``. ``MCPTAPE_FORWARD_TUNING=off`` leaves mitmproxy as
it is. A second interpreter checks the finder in isolation: the optimized modules lose their
``__debug__`` code, other packages keep their asserts, and the cache is read back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_proxy.forward.runner import ENV_TUNING
from tests.forward.conftest import TLSFiles, TLSServer, run_forward, wait_exchanges

pytestmark = pytest.mark.timeout(180)

RPC = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"echo","arguments":{"text":"opt"}}}'
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


@pytest.mark.full  # the mitmproxy engine's start-up tuning: the forward-engine matrix
@pytest.mark.parametrize("tuning", ["on", "off"])
async def test_record_forward_loads_mitmproxy_optimized(
    tuning: str, tmp_path: Path, confdir: Path, tls_files: TLSFiles, tls_stateless: TLSServer
) -> None:
    prefix = tmp_path / "pyc"
    env = {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": ""}
    if tuning == "off":
        env[ENV_TUNING] = "off"
    with run_forward(tmp_path / "o.db", confdir, "--engine", "mitmproxy", env=env) as fw:
        async with fw.http_client() as client:
            r = await client.post(tls_stateless.url, content=RPC, headers=HEADERS)
        assert r.status_code == 200, r.text
        wait_exchanges(fw, "/mcp")
    opt, plain = compiled(prefix, "mitmproxy")
    ours_opt, ours_plain = compiled(prefix, "mcp_proxy")
    assert ours_plain and not ours_opt  # mcptape's own code keeps its asserts
    if tuning == "on":
        assert {"http", "layer", "tls"} <= opt and not plain, (opt, plain)
    else:
        assert {"http", "layer", "tls"} <= plain and not opt, (opt, plain)


CHECK = """
from mcp_proxy.forward.optimize import install, is_optimized
assert install()
from mitmproxy.proxy import utils
try:
    assert False, "asserts outside mitmproxy are kept"
except AssertionError:
    kept = True
else:
    kept = False
plain = utils.expect(int)(len)  # optimized: the method itself, no event type check
print(is_optimized(), kept, plain is len)
"""


def test_the_finder_alone_and_its_cache(tmp_path: Path) -> None:
    env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"), "PYTHONDONTWRITEBYTECODE": ""}
    full = {**os.environ, **env}
    for _ in range(2):  # the second run reads the .opt-1.pyc files the first one wrote
        r = subprocess.run(
            [sys.executable, "-c", CHECK], capture_output=True, text=True, env=full, timeout=120
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["True", "True", "True"], r.stdout
    opt, plain = compiled(tmp_path / "pyc", "mitmproxy")
    assert "http" in opt and not plain
    # Reading back: the cached code is what runs (a stale header would be recompiled).
    http_pyc = next((tmp_path / "pyc").rglob("mitmproxy/http.*.opt-1.pyc"))
    stamp = http_pyc.stat().st_mtime_ns
    r = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, env=full, timeout=120
    )
    assert r.returncode == 0 and http_pyc.stat().st_mtime_ns == stamp
