"""Forward-proxy benchmark: ``mcptape record --forward`` against a direct HTTPS connection.

    .venv/bin/python benchmarks/bench_forward.py                 # 1,000 calls per leg
    .venv/bin/python benchmarks/bench_forward.py --calls 200 --events 50

Measures, each through the forward proxy and direct, in the same run:

1. Official SDK client ↔ SDK server over Streamable HTTP behind TLS (a test-made CA), N
   sequential ``tools/call`` echo, both eras (``legacy`` = 2025-11-25 handshake, ``auto`` =
   2026-07-28): time per call and the ratio forward/direct. Target ≤ 1.5: TLS is terminated
   twice (host↔mitmproxy, mitmproxy↔server) and mitmproxy is pure Python.
2. SSE: the server writes events stamped with ``time.monotonic_ns()`` (one clock for every
   process on the machine), the client notes each arrival; p50/p99 of the difference, direct
   and forward, and the added p50. Target ≤ 2 ms added.

Then the recording is read back: every call recorded, no frame lost. Not a test: it prints a
table; read it with the machine's load in mind (``uptime`` is shown).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import trustme  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_proxy.testing.client import make_client  # noqa: E402
from tests.forward.conftest import TLSFiles, run_forward, start_tls_server  # noqa: E402


def make_tls(d: Path) -> TLSFiles:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = TLSFiles(ca, d / "ca.pem", d / "chain.pem", d / "key.pem")
    ca.cert_pem.write_to_path(str(files.ca_pem))
    cert.private_key_and_cert_chain_pem.write_to_path(str(files.chain))
    cert.private_key_pem.write_to_path(str(files.key))
    return files


def client_for(cafile: Path, proxy: str | None) -> httpx2.AsyncClient:
    ctx = ssl.create_default_context(cafile=str(cafile))
    return httpx2.AsyncClient(
        proxy=proxy, verify=ctx, timeout=httpx2.Timeout(30, read=300), trust_env=False
    )


async def calls(url: str, cafile: Path, proxy: str | None, mode: str, n: int) -> float:
    """Seconds per call for ``n`` sequential echo calls (after a short warm-up)."""
    async with client_for(cafile, proxy) as hc:
        async with make_client(
            streamable_http_client(url, http_client=hc), mode=mode, log_level=None
        ) as c:
            for _ in range(20):
                await c.call_tool("echo", {"text": "warm"})
            t0 = time.perf_counter()
            for i in range(n):
                await c.call_tool("echo", {"text": f"call {i}"})
            return (time.perf_counter() - t0) / n


async def sse_delays(origin: str, cafile: Path, proxy: str | None, n: int) -> list[float]:
    """Milliseconds from the server's write of each event to the client's receipt of it."""
    out: list[float] = []
    body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
    async with client_for(cafile, proxy) as hc:
        async with hc.stream(
            "POST",
            f"{origin}/timed?n={n}&gap=0.02",
            content=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        ) as resp:
            buf = b""
            async for chunk in resp.aiter_raw():
                now = time.monotonic_ns()
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if line.startswith(b"data: "):
                            msg = json.loads(line[6:])
                            data = msg.get("params", {}).get("data")
                            if isinstance(data, dict) and "t" in data:
                                out.append((now - data["t"]) / 1e6)
    return out


@contextlib.contextmanager
def plain_mitmdump(conf: Path, ca: Path) -> Iterator[str]:
    """mitmproxy alone (no addon), same options: what mitmproxy itself costs."""
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mitmdump")),
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "--set",
            f"confdir={conf}",
            "--set",
            f"ssl_verify_upstream_trusted_ca={ca}",
            "--set",
            "flow_detail=0",
            "--set",
            "connection_strategy=lazy",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = proc.stdout.readline().decode("utf-8", "replace")
        m = re.search(r"listening at [\d.*]+:(\d+)", line)
        if m:
            port = m.group(1)
    # Keep reading its log: a full pipe would stall mitmdump.
    threading.Thread(target=lambda: proc.stdout and proc.stdout.read(), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--events", type=int, default=200)
    args = ap.parse_args()
    print(f"uptime: {os.popen('uptime').read().strip()}")
    with tempfile.TemporaryDirectory(prefix="mcptape-bench-fwd-") as tmp:
        d = Path(tmp)
        tls = make_tls(d)
        conf = d / "mitm"
        conf.mkdir()
        (conf / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {tls.ca_pem}\n")
        db = d / "bench.db"
        with start_tls_server(tls, "--mode", "stateful") as srv, run_forward(db, conf) as fw:
            origin = srv.url.rsplit("/", 1)[0]
            results: dict[str, Any] = {}
            plain: dict[str, float] = {}
            with plain_mitmdump(conf, tls.ca_pem) as mitm:
                for mode in ("legacy", "auto"):
                    plain[mode] = asyncio.run(calls(srv.url, fw.ca_cert, mitm, mode, args.calls))
            for mode in ("legacy", "auto"):
                direct = asyncio.run(calls(srv.url, tls.ca_pem, None, mode, args.calls))
                forward = asyncio.run(calls(srv.url, fw.ca_cert, fw.url, mode, args.calls))
                results[mode] = (direct, forward)
            d_sse = asyncio.run(sse_delays(origin, tls.ca_pem, None, args.events))
            f_sse = asyncio.run(sse_delays(origin, fw.ca_cert, fw.url, args.events))
            assert fw.stop() == 0
        con = sqlite3.connect(db)
        recorded = con.execute(
            "SELECT count(*) FROM frames WHERE direction='c2s' AND method='tools/call'"
        ).fetchone()[0]
        gaps = con.execute("SELECT count(*) FROM findings WHERE code='recorder.gap'").fetchone()[0]
        con.close()
    print(
        f"\n{'SDK tools/call over HTTPS':<34}{'direct':>10}{'forward':>10}{'ratio':>8}"
        f"{'mitmdump alone':>16}"
    )
    ok = True
    for mode, (direct, forward) in results.items():
        ratio = forward / direct
        ok = ok and ratio <= 1.5
        print(
            f"  {mode:<32}{direct * 1e3:>8.2f}ms{forward * 1e3:>8.2f}ms{ratio:>8.2f}"
            f"{plain[mode] * 1e3:>9.2f}ms ({plain[mode] / direct:.2f})"
            f"  (target <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})"
        )
    added = statistics.median(f_sse) - statistics.median(d_sse)
    print(f"\n{'SSE event latency':<34}{'p50':>10}{'p99':>10}")
    print(f"  {'direct':<32}{pct(d_sse, 0.5):>8.2f}ms{pct(d_sse, 0.99):>8.2f}ms")
    print(f"  {'forward':<32}{pct(f_sse, 0.5):>8.2f}ms{pct(f_sse, 0.99):>8.2f}ms")
    print(f"  added p50: {added:.2f} ms (target <= 2 ms: {'met' if added <= 2 else 'NOT met'})")
    expected = 2 * (args.calls + 20)
    print(f"\nrecorded tools/call requests: {recorded} of {expected}; recorder gaps: {gaps}")
    return 0 if ok and added <= 2 and recorded >= expected and not gaps else 1


if __name__ == "__main__":
    raise SystemExit(main())
