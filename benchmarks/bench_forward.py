"""Forward-proxy benchmark: ``mcptape record --forward`` against a direct HTTPS connection.

    .venv/bin/python benchmarks/bench_forward.py                 # 1,000 calls per leg
    .venv/bin/python benchmarks/bench_forward.py --calls 200 --events 50

Measures, each through the forward proxy and direct, in the same run:

1. Official SDK client ↔ SDK server over Streamable HTTP behind TLS (a test-made CA), N
   sequential ``tools/call`` echo, both eras (``legacy`` = 2025-11-25 handshake, ``auto`` =
   2026-07-28): time per call and the ratio forward/direct. Target ≤ 1.5: TLS is terminated
   twice (host↔mitmproxy, mitmproxy↔server) and mitmproxy is pure Python. Four legs: direct,
   plain ``mitmdump`` (mitmproxy's own cost), ``mitmdump -s addons/mcptape.py`` and
   ``mcptape record --forward``; for each, the CPU time per call of the client (this process),
   the server and the proxy (with its recorder worker), read from ``/proc`` — a figure that
   survives a busy machine, where wall time does not. In the legacy era the SDK client closes
   each POST's event stream as soon as the response event is in, before the stream's end, so
   its HTTP client drops the connection: every call is a new TCP+TLS connection (direct: one
   handshake; forwarded: CONNECT and two handshakes, and mitmproxy's per-connection work).
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
import dataclasses
import json
import os
import resource
import socket
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import trustme  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_proxy.testing.client import make_client  # noqa: E402
from tests.forward.conftest import TLSFiles, run_forward, start_tls_server  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> float:
    """CPU milliseconds (user + system) of a process and all its descendants, from /proc."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) * 1000 / TICK
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return total
    return total + sum(cpu_ms(int(c)) for c in children)


def self_cpu_ms() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1000


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


@dataclasses.dataclass
class Leg:
    """One leg's figures, per call: wall seconds and CPU milliseconds of each process."""

    wall: float
    client: float
    server: float
    proxy: float

    @property
    def cpu(self) -> float:
        return self.client + self.server + self.proxy


async def calls(
    url: str, cafile: Path, proxy: str | None, mode: str, n: int, pids: tuple[int, int | None]
) -> Leg:
    """Figures per call for ``n`` sequential echo calls (after a short warm-up)."""
    server_pid, proxy_pid = pids
    async with client_for(cafile, proxy) as hc:
        async with make_client(
            streamable_http_client(url, http_client=hc), mode=mode, log_level=None
        ) as c:
            for _ in range(20):
                await c.call_tool("echo", {"text": "warm"})
            c0, s0 = self_cpu_ms(), cpu_ms(server_pid)
            p0 = cpu_ms(proxy_pid) if proxy_pid else 0.0
            t0 = time.perf_counter()
            for i in range(n):
                await c.call_tool("echo", {"text": f"call {i}"})
            wall = (time.perf_counter() - t0) / n
            c1, s1 = self_cpu_ms(), cpu_ms(server_pid)
            p1 = cpu_ms(proxy_pid) if proxy_pid else 0.0
    return Leg(wall, (c1 - c0) / n, (s1 - s0) / n, (p1 - p0) / n)


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
def mitmdump(conf: Path, ca: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """A real ``mitmdump`` with the same options as ``record --forward`` (plus ``extra``): alone
    it is what mitmproxy itself costs; with ``-s addons/mcptape.py`` a user's own mitmproxy.

    Its terminal log is at ``warn``: at ``info`` it prints two lines per connection (in the
    legacy era, per call), a cost ``record --forward`` does not have. That also hides the
    "listening at" line, so the port is chosen here."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mitmdump")),
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
            "--set",
            f"confdir={conf}",
            "--set",
            f"ssl_verify_upstream_trusted_ca={ca}",
            "--set",
            "flow_detail=0",
            "--set",
            "connection_strategy=lazy",
            "--set",
            "termlog_verbosity=warn",
            *extra,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    # Keep reading its log: a full pipe would stall mitmdump.
    threading.Thread(target=lambda: proc.stdout and proc.stdout.read(), daemon=True).start()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mitmdump did not start") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def recorded_calls(db: Path) -> tuple[int, int]:
    """tools/call requests recorded, and recorder gaps, in a recording."""
    con = sqlite3.connect(db)
    try:
        recorded = con.execute(
            "SELECT count(*) FROM frames WHERE direction='c2s' AND method='tools/call'"
        ).fetchone()[0]
        gaps = con.execute("SELECT count(*) FROM findings WHERE code='recorder.gap'").fetchone()[0]
    finally:
        con.close()
    return int(recorded), int(gaps)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--events", type=int, default=200)
    args = ap.parse_args()
    print(f"uptime: {os.popen('uptime').read().strip()}")
    modes = ("legacy", "auto")
    legs: dict[str, dict[str, Leg]] = {m: {} for m in modes}
    with tempfile.TemporaryDirectory(prefix="mcptape-bench-fwd-") as tmp:
        d = Path(tmp)
        tls = make_tls(d)
        conf = d / "mitm"
        conf.mkdir()
        (conf / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {tls.ca_pem}\n")
        db = d / "bench.db"
        addon_db = d / "addon.db"
        addon = ("-s", str(ROOT / "addons" / "mcptape.py"), "--set", f"mcptape_db={addon_db}")
        with start_tls_server(tls, "--mode", "stateful") as srv, run_forward(db, conf) as fw:
            origin = srv.url.rsplit("/", 1)[0]
            spid = srv.proc.pid
            with (
                mitmdump(conf, tls.ca_pem) as (plain, ppid),
                mitmdump(conf, tls.ca_pem, *addon) as (
                    with_addon,
                    apid,
                ),
            ):
                for mode in modes:
                    run = legs[mode]
                    run["direct"] = asyncio.run(
                        calls(srv.url, tls.ca_pem, None, mode, args.calls, (spid, None))
                    )
                    run["mitmdump"] = asyncio.run(
                        calls(srv.url, fw.ca_cert, plain, mode, args.calls, (spid, ppid))
                    )
                    run["mitmdump+addon"] = asyncio.run(
                        calls(srv.url, fw.ca_cert, with_addon, mode, args.calls, (spid, apid))
                    )
                    run["record --forward"] = asyncio.run(
                        calls(srv.url, fw.ca_cert, fw.url, mode, args.calls, (spid, fw.proc.pid))
                    )
            d_sse = asyncio.run(sse_delays(origin, tls.ca_pem, None, args.events))
            f_sse = asyncio.run(sse_delays(origin, fw.ca_cert, fw.url, args.events))
            assert fw.stop() == 0
        recorded, gaps = recorded_calls(db)
        addon_recorded, addon_gaps = recorded_calls(addon_db)
    print(
        f"\n{'SDK tools/call over HTTPS':<28}{'wall/call':>10}{'ratio':>7}"
        f"{'CPU ms/call: client':>21}{'server':>8}{'proxy':>8}{'total':>8}{'ratio':>7}"
    )
    ok = True
    for mode in modes:
        base = legs[mode]["direct"]
        print(f"  {mode}")
        for name, leg in legs[mode].items():
            ratio = leg.wall / base.wall
            line = (
                f"    {name:<24}{leg.wall * 1e3:>8.2f}ms{ratio:>7.2f}{leg.client:>21.2f}"
                f"{leg.server:>8.2f}{leg.proxy:>8.2f}{leg.cpu:>8.2f}{leg.cpu / base.cpu:>7.2f}"
            )
            if name == "record --forward":
                ok = ok and ratio <= 1.5
                line += f"  (target <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})"
            print(line)
    added = statistics.median(f_sse) - statistics.median(d_sse)
    print(f"\n{'SSE event latency':<34}{'p50':>10}{'p99':>10}")
    print(f"  {'direct':<32}{pct(d_sse, 0.5):>8.2f}ms{pct(d_sse, 0.99):>8.2f}ms")
    print(f"  {'forward':<32}{pct(f_sse, 0.5):>8.2f}ms{pct(f_sse, 0.99):>8.2f}ms")
    print(f"  added p50: {added:.2f} ms (target <= 2 ms: {'met' if added <= 2 else 'NOT met'})")
    expected = 2 * (args.calls + 20)
    # The SSE leg's POST through record --forward carries a tools/call body too.
    print(
        f"\nrecorded tools/call requests: record --forward {recorded} of {expected + 1} "
        f"(recorder gaps: {gaps}); mitmdump -s addons/mcptape.py {addon_recorded} of {expected} "
        f"(gaps: {addon_gaps})"
    )
    complete = recorded >= expected + 1 and addon_recorded >= expected and not gaps + addon_gaps
    return 0 if ok and added <= 2 and complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
