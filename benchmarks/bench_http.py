"""HTTP relay benchmark: ``mcptape record --upstream`` against a direct connection, same run.

    .venv/bin/python benchmarks/bench_http.py            # everything (~2-3 minutes)
    .venv/bin/python benchmarks/bench_http.py --calls 300 --skip-sdk

Measures, each proxied and direct, interleaved in rounds so that machine noise hits both:

1. Official SDK client ↔ SDK server over Streamable HTTP (``tests/relay/upstream_server.py``,
   stateful), N sequential ``tools/call`` echo, both eras (``mode="legacy"`` = 2025-11-25
   handshake, ``mode="auto"`` = 2026-07-28): time per call and the ratio proxied/direct
   (target ≤ 1.05), min/median/max over the rounds, with nginx in the same rounds; and
   mcptape's CPU per proxied call (relay + recorder, ``/proc/<pid>/task/*/schedstat``, every
   thread, around the calls, start-up excluded).
2. The TypeScript SDK client (npm ``@modelcontextprotocol/sdk``, installed once with ``npm`` into
   ``~/.cache/mcptape-bench/ts-sdk``, a folder this benchmark owns) against the same server:
   time per call direct and proxied (target ratio ≤ 1.05). Skipped with a note when ``node`` or
   ``npm`` is missing (``--skip-ts`` skips it on purpose).
3. A minimal raw JSON-RPC client (``http.client`` keep-alive) against a tiny aiohttp upstream
   that answers JSON at once: p50/p99 per request, added p50 (target ≤ 100 µs) and p99
   (target ≤ 0.5 ms), and CPU per request, mcptape's (relay + recorder) beside nginx's.
4. SSE: upstream writes an event stamped with ``time.monotonic_ns()`` (one clock for every
   process on the machine), the host notes its arrival: p50 added per event (target ≤ 300 µs).
   The host reads each stream to its end, so every exchange is complete.
5. Load: 200 requests in flight at once (the upstream holds each 300 ms) and 50 concurrent SDK
   sessions; then the recording is read back: no errors, no lost frames, and the outcome of
   every exchange that did not complete.

The physical reference: Debian's nginx as a reverse proxy (``proxy_pass`` with upstream
keep-alive, ``proxy_buffering off``), started by the benchmark with its own configuration in a
temporary folder, measured in the same interleaved rounds (direct, nginx, mcptape) for the raw
requests and the SDK calls. mcptape's CPU is the relay's plus its recorder process's (every
descendant of ``mcptape record``); nginx's is its master's plus its worker's. The targets of issue
#23 are printed beside the figures: CPU per raw request ≤ 4× nginx's, added p50 ≤ 100 µs, added
p99 ≤ 0.5 ms, SDK ratio ≤ 1.05. Without nginx (``apt-get install nginx``) its leg is skipped
with a note (``--skip-nginx`` skips it on purpose).

Not a test: it prints a table; read it with the machine's load in mind (``uptime`` is shown).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
SDK_UPSTREAM = ROOT / "tests" / "relay" / "upstream_server.py"
MCPTAPE = Path(sys.executable).with_name("mcptape")

RESULT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"pong"}]}}'


# --------------------------------------------------------------------------- fast upstream
def serve_fast() -> None:
    """A tiny aiohttp upstream: JSON at once, a held reply, and a timed SSE stream."""
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        await request.content.read()
        if request.path == "/hold":
            await asyncio.sleep(float(request.query.get("s", "0.3")))
        if request.path == "/sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(int(request.query.get("n", "200"))):
                await resp.write(
                    b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/message",'
                    b'"params":{"level":"info","data":{"i":%d,"t":%d}}}\r\n\r\n'
                    % (i, time.monotonic_ns())
                )
                await asyncio.sleep(float(request.query.get("gap", "0.005")))
            await resp.write_eof()
            return resp
        return web.Response(body=RESULT, content_type="application/json")

    async def main() -> None:
        runner = web.ServerRunner(web.Server(handle))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"READY http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# --------------------------------------------------------------------------- processes
def _start(argv: list[str], marker: str, pick: int) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline().decode()
        if not line:
            raise RuntimeError(f"{argv} exited before it was ready")
        if line.startswith(marker):
            url = line.split()[pick]
            break
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()  # type: ignore[union-attr]
    return proc, url


@contextmanager
def process(
    argv: list[str], marker: str, pick: int
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    proc, url = _start(argv, marker, pick)
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT if "record" in argv else signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


NGINX_CONF = """worker_processes 1;
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream up {{ server {upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def nginx(upstream: str, tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], str] | None]:
    """Debian's nginx as a reverse proxy to ``upstream`` (None when nginx is not installed)."""
    import shutil

    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        yield None
        return
    u = urlsplit(upstream)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="nginx-", dir=tmp))
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=folder, upstream=u.netloc, port=port))
    proc = subprocess.Popen(
        [binary, "-p", str(folder), "-c", str(conf), "-e", str(folder / "nginx-error.log")],
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}{u.path}"
    try:
        deadline = time.monotonic() + 10
        while True:  # ready when it accepts a connection
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"nginx did not start: {(folder / 'nginx-error.log').read_text()}"
                    ) from None
                time.sleep(0.02)
        yield proc, url
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def proxy(upstream: str, db: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    argv = [str(MCPTAPE), "record", "--upstream", upstream, "--port", "0", "--db", str(db)]
    return process(argv, "mcptape: relaying", 2)


# --------------------------------------------------------------------------- measurements
async def sdk_calls(url: str, mode: str, n: int) -> float:
    """Seconds per sequential tools/call (after a warm-up)."""
    from mcp_proxy.testing.client import make_client

    async with make_client(url, mode=mode, log_level=None) as client:
        for _ in range(20):
            await client.call_tool("echo", {"text": "warm"})
        t0 = time.perf_counter()
        for i in range(n):
            await client.call_tool("echo", {"text": f"x{i}"})
        return (time.perf_counter() - t0) / n


def raw_latencies(url: str, n: int) -> list[float]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        conn.request("POST", u.path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        out.append((time.perf_counter_ns() - t0) / 1000)
    conn.close()
    return out


def sse_latencies(url: str, n: int) -> list[float]:
    """Added latency per event; the stream is read to its end (the chunked terminator), as a
    host that wants the whole response does — closing early would record host_aborted."""
    import socket

    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(
        f"GET /sse?n={n}&gap=0.005 HTTP/1.1\r\nHost: {u.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    buf = b""
    out: list[float] = []
    pos = 0
    while not buf.endswith(b"0\r\n\r\n"):
        chunk = s.recv(65536)
        now = time.monotonic_ns()
        if not chunk:
            break
        buf += chunk
        while True:
            i = buf.find(b'"t":', pos)
            if i < 0:
                break
            j = buf.index(b"}", i)
            out.append((now - int(buf[i + 4 : j])) / 1000)
            pos = j
    s.close()
    return out


async def in_flight(url: str, count: int) -> tuple[int, int, float]:
    """``count`` requests held by the upstream at the same time; returns (ok, errors, seconds)."""
    import aiohttp

    u = urlsplit(url)
    target = f"{u.scheme}://{u.netloc}/hold?s=0.3"
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}'
    ok = errors = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one() -> None:
            nonlocal ok, errors
            try:
                async with session.post(
                    target, data=body, headers={"Content-Type": "application/json"}
                ) as r:
                    await r.read()
                    ok += r.status == 200
                    errors += r.status != 200
            except Exception:
                errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        return ok, errors, time.perf_counter() - t0


async def sessions(url: str, count: int, calls: int) -> tuple[int, int]:
    """``count`` SDK clients at once (half per era), ``calls`` echo calls each; (ok, errors)."""
    from mcp_types import Implementation

    from mcp_proxy.testing.client import make_client

    ok = errors = 0

    async def one(i: int) -> None:
        nonlocal ok, errors
        mode = "auto" if i % 2 else "legacy"
        try:
            info = Implementation(name=f"bench-{i}", version="1")
            async with make_client(url, mode=mode, log_level=None, client_info=info) as c:
                for k in range(calls):
                    r = await c.call_tool("echo", {"text": f"{i}-{k}"})
                    ok += not r.is_error
        except Exception:
            errors += 1

    await asyncio.gather(*(one(i) for i in range(count)))
    return ok, errors


def proc_cpu(pid: int) -> float:
    """CPU seconds a process has used so far, every thread (Linux ``/proc``).

    ``/proc/<pid>/task/*/schedstat`` counts nanoseconds on the CPU per thread; the tick counts
    of ``/proc/<pid>/stat`` (10 ms) are too coarse for a few hundred calls per round. Falls back
    to the ticks when schedstat is missing (kernels without ``CONFIG_SCHEDSTATS``).
    """
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its descendants (mcptape's relay + recorder,
    nginx's master + worker)."""
    total = 0.0
    for p in descendants(pid):
        try:
            total += proc_cpu(p)
        except OSError:
            pass  # a child that ended between the listing and the read
    return total


def settle(pid: int, *, quiet: float = 0.005, period: float = 0.2, timeout: float = 60.0) -> float:
    """Wait until ``pid`` and its descendants use under ``quiet`` CPU seconds per ``period``;
    the seconds waited. After the warm-up the recorder process is still starting (imports, the
    new database's schema) and catching up: ~1.7 s of CPU over ~2.5 s, measured on a loaded
    machine, which the first measured rounds used to absorb as "CPU per request"."""
    t0 = time.monotonic()
    last = tree_cpu(pid)
    while time.monotonic() - t0 < timeout:
        time.sleep(period)
        now = tree_cpu(pid)
        if now - last < quiet:
            break
        last = now
    return time.monotonic() - t0


async def sdk_calls_cpu(url: str, mode: str, n: int, pid: int) -> tuple[float, float]:
    """(seconds per call, relay CPU seconds per call) over ``n`` calls after a warm-up."""
    from mcp_proxy.testing.client import make_client

    async with make_client(url, mode=mode, log_level=None) as client:
        for _ in range(20):
            await client.call_tool("echo", {"text": "warm"})
        c0 = tree_cpu(pid)
        t0 = time.perf_counter()
        for i in range(n):
            await client.call_tool("echo", {"text": f"x{i}"})
        return (time.perf_counter() - t0) / n, (tree_cpu(pid) - c0) / n


TS_DIR = Path.home() / ".cache" / "mcptape-bench" / "ts-sdk"
TS_SCRIPT = """// N sequential tools/call echo through the TypeScript SDK client; prints ms per call.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, n] = [process.argv[2], Number(process.argv[3] || 200)];
const client = new Client({ name: "bench-ts", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
for (let i = 0; i < 20; i++) await client.callTool({ name: "echo", arguments: { text: "warm" } });
const t0 = performance.now();
for (let i = 0; i < n; i++) await client.callTool({ name: "echo", arguments: { text: `x${i}` } });
console.log(JSON.stringify({ ms_per_call: (performance.now() - t0) / n }));
await client.close();
"""


def ts_client() -> str | None:
    """Install the TypeScript SDK client once into the benchmark's cache; None if impossible."""
    import shutil

    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    TS_DIR.mkdir(parents=True, exist_ok=True)
    (TS_DIR / "calls.mjs").write_text(TS_SCRIPT)
    if not (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        (TS_DIR / "package.json").write_text(
            '{"name":"mcptape-bench-ts","private":true,"type":"module"}'
        )
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "@modelcontextprotocol/sdk"],
            cwd=TS_DIR,
            capture_output=True,
            timeout=600,
        )
        if done.returncode != 0:
            return None
    return str(TS_DIR / "calls.mjs")


def ts_calls(script: str, url: str, n: int) -> float:
    """Seconds per sequential tools/call through the TypeScript SDK client."""
    out = subprocess.run(
        ["node", script, url, str(n)], capture_output=True, text=True, timeout=600, cwd=TS_DIR
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms_per_call"]) / 1e3


def spread(values: list[float], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """min/median/max of per-round figures."""
    v = sorted(x * scale for x in values)
    return "/".join(fmt.format(x) for x in (v[0], statistics.median(v), v[-1]))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# --------------------------------------------------------------------------- main
@contextmanager
def reference(
    args: argparse.Namespace, upstream: str, tmp: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str] | None]:
    """The nginx leg, or None (with the reason printed) when skipped."""
    if args.skip_nginx:
        print("nginx leg: skipped (--skip-nginx)")
        yield None
        return
    with nginx(upstream, tmp) as ref:
        if ref is None:
            print("nginx leg: skipped (nginx is not installed: apt-get install nginx)")
        yield ref


def raw_rows(
    direct: list[float],
    relayed: list[float],
    cpu: list[float],
    via_nginx: list[float],
    nginx_cpu: list[float],
    with_nginx: bool,
) -> list[tuple[str, str, str, str, str]]:
    d50, p50 = statistics.median(direct), statistics.median(relayed)
    d99, p99 = pct(direct, 0.99), pct(relayed, 0.99)
    rows = [
        (
            "raw JSON-RPC p50 (µs)",
            f"{d50:.0f}",
            f"{p50:.0f}",
            f"{p50 / d50:.2f}",
            f"added {p50 - d50:.0f} µs (target ≤ 100)",
        ),
        (
            "raw JSON-RPC p99 (µs)",
            f"{d99:.0f}",
            f"{p99:.0f}",
            f"{p99 / d99:.2f}",
            f"added {p99 - d99:.0f} µs (target ≤ 500)",
        ),
        (
            "relay+recorder CPU per raw request (µs)",
            "",
            f"{statistics.median(cpu) * 1e6:.0f}",
            "",
            f"min/med/max {spread(cpu, 1e6, '{:.0f}')}",
        ),
    ]
    if with_nginx:
        n50, n99 = statistics.median(via_nginx), pct(via_nginx, 0.99)
        ncpu = statistics.median(nginx_cpu)
        rows += [
            (
                "nginx raw p50 / p99 (µs)",
                f"{d50:.0f} / {d99:.0f}",
                f"{n50:.0f} / {n99:.0f}",
                f"{n50 / d50:.2f}",
                f"nginx adds {n50 - d50:.0f} µs p50, {n99 - d99:.0f} µs p99;"
                f" mcptape adds {p50 - d50:.0f} / {p99 - d99:.0f}",
            ),
            (
                "nginx CPU per raw request (µs)",
                "",
                f"{ncpu * 1e6:.0f}",
                f"×{statistics.median(cpu) / ncpu:.1f}",
                f"mcptape relay+recorder CPU / nginx's (target ≤ ×4);"
                f" min/med/max {spread(nginx_cpu, 1e6, '{:.0f}')}",
            ),
        ]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-fast", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--calls", type=int, default=1000, help="SDK tools/call per era and side")
    ap.add_argument("--raw", type=int, default=5000, help="raw requests per side")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--skip-sdk", action="store_true")
    ap.add_argument("--skip-ts", action="store_true", help="skip the TypeScript SDK client")
    ap.add_argument("--ts-calls", type=int, default=500, help="TypeScript SDK calls per side")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-nginx", action="store_true", help="skip the nginx reference leg")
    args = ap.parse_args()
    if args.serve_fast:
        serve_fast()
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="mcptape-bench-http-"))
    rows: list[tuple[str, str, str, str, str]] = []
    print(f"load before: {os.getloadavg()[0]:.2f} (2 cores: above ~1 the numbers are noisy)")

    with process([sys.executable, __file__, "--serve-fast"], "READY", 1) as (_, fast):
        db = tmp / "raw.db"
        with proxy(fast, db) as (relay, purl), reference(args, fast, tmp) as ref:
            direct: list[float] = []
            relayed: list[float] = []
            raw_cpu: list[float] = []
            via_nginx: list[float] = []
            nginx_cpu: list[float] = []
            per = args.raw // args.rounds
            raw_latencies(fast, 200), raw_latencies(purl, 200)  # warm both paths
            if ref is not None:
                raw_latencies(ref[1], 200)
            waited = settle(relay.pid)  # the recorder's start-up is not a request's CPU
            print(f"mcptape settled {waited:.1f} s after the warm-up (recorder start-up)")
            for _ in range(args.rounds):
                direct += raw_latencies(fast, per)
                if ref is not None:
                    c0 = tree_cpu(ref[0].pid)
                    via_nginx += raw_latencies(ref[1], per)
                    nginx_cpu.append((tree_cpu(ref[0].pid) - c0) / per)
                c0 = tree_cpu(relay.pid)
                relayed += raw_latencies(purl, per)
                raw_cpu.append((tree_cpu(relay.pid) - c0) / per)
            rows += raw_rows(direct, relayed, raw_cpu, via_nginx, nginx_cpu, ref is not None)
            sd: list[float] = []
            sp: list[float] = []
            for _ in range(2):
                sd += sse_latencies(fast, 200)
                sp += sse_latencies(purl, 200)
            rows.append(
                (
                    "SSE event latency p50 (µs)",
                    f"{statistics.median(sd):.0f}",
                    f"{statistics.median(sp):.0f}",
                    f"{statistics.median(sp) / statistics.median(sd):.2f}",
                    f"added {statistics.median(sp) - statistics.median(sd):.0f} µs (target ≤ 300)",
                )
            )
            if not args.skip_load:
                ok, err, secs = asyncio.run(in_flight(purl, 200))
                rows.append(
                    ("200 in flight (proxied)", "", f"{ok} ok", f"{err} err", f"{secs:.2f} s wall")
                )
        con = sqlite3.connect(db)
        n_ex = con.execute("SELECT count(*) FROM http_exchanges").fetchone()[0]
        n_fr = con.execute("SELECT count(*) FROM frames").fetchone()[0]
        bad = con.execute(
            "SELECT count(*) FROM http_exchanges WHERE outcome != 'complete' OR outcome IS NULL"
        ).fetchone()[0]
        why = con.execute(
            "SELECT method, coalesce(outcome, 'open'), count(*) FROM http_exchanges"
            " WHERE outcome != 'complete' OR outcome IS NULL GROUP BY 1, 2"
        ).fetchall()
        con.close()
        # Proxied: 200 warm-up + the measured requests + the in-flight ones, 2 frames each (body
        # and reply); two SSE reads of 200 events (a GET has no body frame).
        posts = 200 + (args.raw // args.rounds) * args.rounds + (0 if args.skip_load else 200)
        expected = 2 * posts + 2 * 200
        rows.append(
            (
                "recording (raw db)",
                f"{n_ex} exch",
                f"{n_fr} frames",
                f"{bad} not complete",
                f"expected {expected} frames, {posts + 2} exchanges"
                + "".join(f"; {m} {o}: {n}" for m, o, n in why),
            )
        )

    if not args.skip_sdk:
        with process(
            [sys.executable, str(SDK_UPSTREAM), "--transport", "http", "--preset", "basic"],
            "MCPTAPE_TEST_SERVER_READY",
            1,
        ) as (_, sdk):
            db = tmp / "sdk.db"
            ts_script = None if args.skip_ts else ts_client()
            ts_done = 0
            with proxy(sdk, db) as (relay, purl), reference(args, sdk, tmp) as ref:
                asyncio.run(sdk_calls(purl, "legacy", 20))  # start the recorder, then let it settle
                settle(relay.pid)
                for mode, label in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
                    d: list[float] = []
                    p: list[float] = []
                    ng: list[float] = []
                    cpu: list[float] = []
                    per = args.calls // args.rounds
                    for _ in range(args.rounds):
                        d.append(asyncio.run(sdk_calls(sdk, mode, per)))
                        if ref is not None:
                            ng.append(asyncio.run(sdk_calls(ref[1], mode, per)))
                        secs, used = asyncio.run(sdk_calls_cpu(purl, mode, per, relay.pid))
                        p.append(secs)
                        cpu.append(used)
                    dm, pm = statistics.median(d), statistics.median(p)
                    rows.append(
                        (
                            f"SDK tools/call {label} (ms/call)",
                            f"{dm * 1e3:.2f}",
                            f"{pm * 1e3:.2f}",
                            f"{pm / dm:.3f}",
                            f"ratio min/med/max {spread([b / a for a, b in zip(d, p, strict=True)])};"
                            f" {per * args.rounds} calls; target ≤ 1.05",
                        )
                    )
                    if ng:
                        nm = statistics.median(ng)
                        rows.append(
                            (
                                f"  via nginx {label} (ms/call)",
                                f"{dm * 1e3:.2f}",
                                f"{nm * 1e3:.2f}",
                                f"{nm / dm:.3f}",
                                "ratio min/med/max"
                                f" {spread([b / a for a, b in zip(d, ng, strict=True)])}",
                            )
                        )
                    rows.append(
                        (
                            f"mcptape CPU per call {label} (µs)",
                            "",
                            f"{statistics.median(cpu) * 1e6:.0f}",
                            "",
                            f"min/med/max {spread(cpu, 1e6, '{:.0f}')} (relay + recorder)",
                        )
                    )
                if ts_script is None:
                    why = "--skip-ts" if args.skip_ts else "no node/npm"
                    rows.append(("TS SDK tools/call", "", "", "", f"skipped ({why})"))
                else:
                    td: list[float] = []
                    tp: list[float] = []
                    for _ in range(args.rounds):
                        td.append(ts_calls(ts_script, sdk, args.ts_calls // args.rounds))
                        tp.append(ts_calls(ts_script, purl, args.ts_calls // args.rounds))
                        ts_done += 20 + args.ts_calls // args.rounds
                    dm, pm = statistics.median(td), statistics.median(tp)
                    rows.append(
                        (
                            "TS SDK tools/call (ms/call)",
                            f"{dm * 1e3:.2f}",
                            f"{pm * 1e3:.2f}",
                            f"{pm / dm:.3f}",
                            f"ratio min/med/max {spread([b / a for a, b in zip(td, tp, strict=True)])};"
                            f" added {(pm - dm) * 1e3:.2f} ms/call; target ≤ 1.05",
                        )
                    )
                if not args.skip_load:
                    ok, err = asyncio.run(sessions(purl, 50, 10))
                    rows.append(("50 SDK sessions x 10 calls", "", f"{ok} ok", f"{err} err", ""))
            con = sqlite3.connect(db)
            n_sess = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
            calls = con.execute(
                "SELECT count(*) FROM frames WHERE method = 'tools/call'"
            ).fetchone()[0]
            gaps = con.execute("SELECT coalesce(sum(gap_count), 0) FROM sessions").fetchone()[0]
            con.close()
            exp_calls = (
                2 * args.rounds * (20 + args.calls // args.rounds)
                + (0 if args.skip_load else 500)
                + ts_done
            )
            rows.append(
                (
                    "recording (sdk db)",
                    f"{n_sess} sessions",
                    f"{calls} tools/call frames",
                    f"{gaps} gaps",
                    f"expected {exp_calls} tools/call frames",
                )
            )

    w = [
        max(len(r[i]) for r in [("measure", "direct", "proxied", "ratio", "note"), *rows])
        for i in range(5)
    ]
    head = ("measure", "direct", "proxied", "ratio", "note")
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
    for r in rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    print(f"load after: {os.getloadavg()[0]:.2f}; recordings in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
