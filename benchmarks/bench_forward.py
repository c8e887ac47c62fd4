"""Forward-proxy benchmark: ``mcptape record --forward`` against a direct HTTPS connection.

    .venv/bin/python benchmarks/bench_forward.py                  # 5 rounds x 200 calls per leg
    .venv/bin/python benchmarks/bench_forward.py --rounds 3 --calls 100 --events 30 --mitmdump

Measures, each through the forward proxy and direct, in the same run:

1. Official SDK client <-> SDK server over Streamable HTTP behind TLS (a test-made CA),
   sequential ``tools/call`` echo, both eras (``legacy`` = 2025-11-25 handshake, ``auto`` =
   2026-07-28). The legs (direct; ``record --forward`` — its default lean engine; ``--engine
   mitmproxy`` — mitmproxy as it ships, same P-256 CA; with ``--rsa-leg`` ``record --forward``
   with the RSA-2048 CA mitmproxy makes, and with ``--mitmdump`` plain ``mitmdump`` and
   ``mitmdump -s addons/mcptape.py``)
   run in rounds, interleaved and rotated, so that the
   noise of a shared machine falls on all of them; each figure is min / median / max over the
   rounds: wall time per call, its ratio to the direct leg of the same round (issue #23's
   targets on the median: <= 1.25 in the 2025-11-25 era, <= 1.10 in the 2026-07-28 era), CPU per call of the proxy process and of its recorder worker (from ``/proc``:
   survives a busy machine, where wall time does not), CPU of everything, and the TCP
   connections the client opened per call. In the legacy era the SDK client closes each POST's
   event stream as soon as the response event is in, before the stream's end, so httpcore
   drops the connection (it keeps only a connection whose response it read to the end): every
   call is a new TCP+TLS connection — direct: one handshake; forwarded: a CONNECT and the
   proxy's handshake with the host (the lean engine keeps its upstream connection pooled;
   mitmproxy makes a second handshake upstream and does its per-connection work).
2. SSE: the server writes events stamped with ``time.monotonic_ns()`` (one clock for every
   process on the machine), the client notes each arrival; per event min/median/max direct and
   forward, and per round the added median. Target <= 2 ms added.

Then the recording is read back: every call recorded, no recorder gap. Not a test: it prints a
table; read it with the machine's load in mind (``uptime`` is shown).

``--profile FILE`` instead runs only ``record --forward`` under cProfile (on the proxy's
main-thread CPU clock, from after 20 warm-up calls) for ``--calls`` calls per era (``--eras``;
``--ca rsa`` for the figures before) and prints where the proxy's time went
(cumulative and own time of the top functions); ``FILE.<era>`` stays for ``python -m pstats``.
cProfile slows Python code about four times and C code (OpenSSL) not at all: read it for
shares and for C functions, not for totals.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import signal
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import trustme  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_proxy.testing.client import make_client  # noqa: E402
from tests.forward.conftest import TLSFiles, run_forward, start_tls_server  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int, descendants: bool = True) -> float:
    """CPU milliseconds (user + system) of a process (and all its descendants), from /proc."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) * 1000 / TICK
        if not descendants:
            return total
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


def make_conf(d: Path, tls: TLSFiles, ca: str, name: str = "mitm") -> Path:
    """mitmproxy's confdir for the run; ``ca="rsa"`` puts mitmproxy's own RSA-2048 CA there
    first (the CA before mcp_proxy/forward/certs.py), ``ec`` leaves it to record --forward."""
    conf = d / name
    conf.mkdir()
    (conf / "config.yaml").write_text(f"ssl_verify_upstream_trusted_ca: {tls.ca_pem}\n")
    if ca == "rsa":
        from mitmproxy import certs

        certs.CertStore.create_store(conf, "mitmproxy", 2048)
    return conf


def client_for(cafile: Path, proxy: str | None) -> httpx2.AsyncClient:
    ctx = ssl.create_default_context(cafile=str(cafile))
    return httpx2.AsyncClient(
        proxy=proxy, verify=ctx, timeout=httpx2.Timeout(30, read=300), trust_env=False
    )


CONNECTS = [0]


def count_connections() -> None:
    """Count the TCP connections this process's HTTP clients open (httpcore2's backend), so
    the table can show connections per call: the legacy-era SDK client drops its connection
    after each POST's response event (``response.aclose()`` before the stream's end)."""
    from httpcore2._backends.auto import AutoBackend

    original = AutoBackend.connect_tcp

    async def connect_tcp(self: Any, *args: Any, **kwargs: Any) -> Any:
        CONNECTS[0] += 1
        return await original(self, *args, **kwargs)

    AutoBackend.connect_tcp = connect_tcp  # type: ignore[method-assign]


@dataclasses.dataclass
class Round:
    """One round of one leg, per call: wall ms, CPU µs of each process, TCP connections."""

    wall: float
    client: float
    server: float
    proxy: float  # the proxy process alone
    recorder: float  # its recorder worker (another process: off the forwarding path)
    conns: float

    @property
    def cpu(self) -> float:
        return self.client + self.server + self.proxy + self.recorder


@dataclasses.dataclass
class LegSpec:
    name: str
    proxy: str | None
    cafile: Path
    pid: int | None


async def rounds_of_calls(
    url: str, server_pid: int, legs: list[LegSpec], mode: str, n: int, rounds: int
) -> dict[str, list[Round]]:
    """``rounds`` rounds of ``n`` sequential echo calls per leg, the legs interleaved (and
    their order rotated each round) so the machine's noise falls on all of them alike."""
    out: dict[str, list[Round]] = {leg.name: [] for leg in legs}
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for leg in legs:
            hc = await stack.enter_async_context(client_for(leg.cafile, leg.proxy))
            c = await stack.enter_async_context(
                make_client(streamable_http_client(url, http_client=hc), mode=mode, log_level=None)
            )
            for _ in range(20):
                await c.call_tool("echo", {"text": "warm"})
            clients.append(c)
        for r in range(rounds):
            order = list(range(len(legs)))
            order = order[r % len(order) :] + order[: r % len(order)]
            for i in order:
                leg, c = legs[i], clients[i]
                c0, s0, k0 = self_cpu_ms(), cpu_ms(server_pid), CONNECTS[0]
                p0 = cpu_ms(leg.pid, False) if leg.pid else 0.0
                w0 = cpu_ms(leg.pid) if leg.pid else 0.0
                t0 = time.perf_counter()
                for j in range(n):
                    await c.call_tool("echo", {"text": f"call {j}"})
                wall = (time.perf_counter() - t0) / n * 1e3
                c1, s1, k1 = self_cpu_ms(), cpu_ms(server_pid), CONNECTS[0]
                p1 = cpu_ms(leg.pid, False) if leg.pid else 0.0
                w1 = cpu_ms(leg.pid) if leg.pid else 0.0
                out[leg.name].append(
                    Round(
                        wall,
                        (c1 - c0) / n * 1e3,
                        (s1 - s0) / n * 1e3,
                        (p1 - p0) / n * 1e3,
                        ((w1 - w0) - (p1 - p0)) / n * 1e3,
                        (k1 - k0) / n,
                    )
                )
    return out


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


def spread(xs: list[float]) -> str:
    """min / median / max, aligned."""
    return f"{min(xs):8.2f} {statistics.median(xs):8.2f} {max(xs):8.2f}"


def spread_us(xs: list[float]) -> str:
    return f"{min(xs):7.0f} {statistics.median(xs):7.0f} {max(xs):7.0f}"


#: Issue #23's targets for ``record --forward`` (the lean engine), median ratio to direct.
TARGET_RATIO = {"legacy": 1.25, "auto": 1.10}


def print_calls(mode: str, table: dict[str, list[Round]]) -> bool:
    """One era's table: each leg's min/median/max over rounds; True if the target is met."""
    direct = table["direct"]
    print(f"  {mode} era")
    met = True
    for name, rounds in table.items():
        ratios = [r.wall / d.wall for r, d in zip(rounds, direct, strict=True)]
        line = (
            f"    {name:<24}{spread([r.wall for r in rounds])}  {spread(ratios)}"
            f"  {spread_us([r.proxy for r in rounds])}"
            f" {statistics.median([r.recorder for r in rounds]):7.0f}"
            f"  {spread_us([r.cpu for r in rounds])}"
            f"  {statistics.median([r.conns for r in rounds]):5.2f}"
        )
        if name == "record --forward":
            target = TARGET_RATIO.get(mode, 1.25)
            ok = statistics.median(ratios) <= target
            met = met and ok
            line += f"  target ratio <= {target}: {'met' if ok else 'NOT met'}"
        print(line)
    return met


#: Runs ``mcptape`` (argv[2:]) under cProfile with the main thread's CPU clock (wall time would
#: charge the machine's other processes to whatever function was running), profiling only
#: between SIGUSR1 (after the warm-up calls) and exit; the stats go to argv[1].
PROFILER = """
import cProfile, runpy, signal, sys, time
out = sys.argv[1]
sys.argv = sys.argv[2:]
prof = cProfile.Profile(time.thread_time)
signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    prof.disable()
    prof.dump_stats(out)
"""


async def profiled_calls(url: str, fw: Any, mode: str, n: int) -> float:
    """``n`` echo calls through the proxy in one era, profiled after 20 warm-up calls; the
    proxy's CPU ms per call."""
    async with contextlib.AsyncExitStack() as stack:
        hc = await stack.enter_async_context(client_for(fw.ca_cert, fw.url))
        c = await stack.enter_async_context(
            make_client(streamable_http_client(url, http_client=hc), mode=mode, log_level=None)
        )
        for _ in range(20):
            await c.call_tool("echo", {"text": "warm"})
        fw.proc.send_signal(signal.SIGUSR1)
        await asyncio.sleep(0.2)
        p0 = cpu_ms(fw.proc.pid, False)
        for j in range(n):
            await c.call_tool("echo", {"text": f"call {j}"})
        return (cpu_ms(fw.proc.pid, False) - p0) / n


def profiled_ms(stats: Any) -> float:
    """The profile's own time in ms, without the lock waits of threads started while it ran
    (cProfile charges those oddly under a per-thread clock)."""
    return 1e3 * sum(
        row[2]
        for (_, _, name), row in stats.stats.items()
        if row[2] > 0 and "_thread.lock" not in name
    )


def profile(args: argparse.Namespace, modes: tuple[str, ...]) -> int:
    """Per era, a fresh proxy under cProfile for ``--calls`` calls; the top of its profile
    (``FILE.<era>`` stays for ``python -m pstats``)."""
    import pstats

    with contextlib.ExitStack() as stack:
        d = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcptape-prof-fwd-")))
        tls = make_tls(d)
        conf = make_conf(d, tls, args.ca)
        srv = stack.enter_context(start_tls_server(tls, "--mode", "stateful"))
        for mode in modes:
            out = Path(f"{args.profile}.{mode}").resolve()
            prefix = (sys.executable, "-c", PROFILER, str(out))
            with run_forward(d / f"{mode}.db", conf, "--engine", args.engine, prefix=prefix) as fw:
                ms = asyncio.run(profiled_calls(srv.url, fw, mode, args.calls))
                assert fw.stop() == 0
            print(f"\n{mode} era: {args.calls} calls, proxy CPU {ms:.2f} ms/call under cProfile")
            stats = pstats.Stats(str(out))
            print(f"profiled main-thread CPU: {profiled_ms(stats) / args.calls:.2f} ms/call")
            stats.sort_stats("cumulative").print_stats(args.top)
            stats.sort_stats("tottime").print_stats(args.top)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200, help="calls per leg per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=50, help="SSE events per round (0: none)")
    ap.add_argument(
        "--eras", default="legacy,auto", help="legacy, auto or both (comma); empty: SSE only"
    )
    ap.add_argument(
        "--mitmdump",
        action="store_true",
        help="also time plain mitmdump and mitmdump -s addons/mcptape.py (all of mitmproxy's "
        "default addons, its own dispatch)",
    )
    ap.add_argument(
        "--no-mitmproxy",
        action="store_true",
        help="skip the --engine mitmproxy leg (mitmproxy as shipped, the same P-256 CA)",
    )
    ap.add_argument(
        "--engine",
        choices=("lean", "mitmproxy"),
        default="lean",
        help="with --profile: the engine profiled",
    )
    ap.add_argument("--profile", metavar="FILE", help="profile record --forward (see above)")
    ap.add_argument(
        "--ca",
        choices=("ec", "rsa"),
        default="ec",
        help="the proxy's CA key: ec (what record --forward makes) or rsa (mitmproxy's own)",
    )
    ap.add_argument(
        "--rsa-leg",
        action="store_true",
        help="also time record --forward with mitmproxy's own RSA-2048 CA in its confdir",
    )
    ap.add_argument("--top", type=int, default=50, help="with --profile: functions shown")
    args = ap.parse_args()
    if args.profile:
        return profile(args, tuple(m.strip() for m in args.eras.split(",") if m.strip()))
    print(f"uptime: {os.popen('uptime').read().strip()}; CA key: {args.ca}")
    count_connections()
    modes = tuple(m.strip() for m in args.eras.split(",") if m.strip())
    tables: dict[str, dict[str, list[Round]]] = {}
    sse: dict[str, list[list[float]]] = {"direct": [], "record --forward": []}
    with contextlib.ExitStack() as stack:
        d = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcptape-bench-fwd-")))
        tls = make_tls(d)
        conf = make_conf(d, tls, args.ca)
        db = d / "bench.db"
        srv = stack.enter_context(start_tls_server(tls, "--mode", "stateful"))
        fw = stack.enter_context(run_forward(db, conf))
        legs = [
            LegSpec("direct", None, tls.ca_pem, None),
            LegSpec("record --forward", fw.url, fw.ca_cert, fw.proc.pid),
        ]
        if not args.no_mitmproxy:
            mitm = stack.enter_context(run_forward(d / "mitm.db", conf, "--engine", "mitmproxy"))
            legs.append(LegSpec("  --engine mitmproxy", mitm.url, mitm.ca_cert, mitm.proc.pid))
        if args.rsa_leg:
            conf_rsa = make_conf(d, tls, "rsa", "mitm-rsa")
            rsa = stack.enter_context(run_forward(d / "rsa.db", conf_rsa))
            legs.append(LegSpec("  (RSA-2048 CA)", rsa.url, rsa.ca_cert, rsa.proc.pid))
        if args.mitmdump:
            addon = ("-s", str(ROOT / "addons" / "mcptape.py"))
            addon += ("--set", f"mcptape_db={d / 'addon.db'}")
            plain, ppid = stack.enter_context(mitmdump(conf, tls.ca_pem))
            with_addon, apid = stack.enter_context(mitmdump(conf, tls.ca_pem, *addon))
            legs.append(LegSpec("mitmdump", plain, fw.ca_cert, ppid))
            legs.append(LegSpec("mitmdump -s mcptape.py", with_addon, fw.ca_cert, apid))
        for mode in modes:
            tables[mode] = asyncio.run(
                rounds_of_calls(srv.url, srv.proc.pid, legs, mode, args.calls, args.rounds)
            )
        origin = srv.url.rsplit("/", 1)[0]
        for r in range(args.rounds if args.events else 0):
            pair = [("direct", tls.ca_pem, None), ("record --forward", fw.ca_cert, fw.url)]
            for name, ca, proxy in pair if r % 2 == 0 else pair[::-1]:
                sse[name].append(asyncio.run(sse_delays(origin, ca, proxy, args.events)))
        assert fw.stop() == 0
        recorded, gaps = recorded_calls(db)
    ok = True
    if modes:
        print(
            f"\nSDK tools/call over HTTPS: {args.rounds} rounds x {args.calls} calls per leg, legs "
            "interleaved; min / median / max over rounds"
        )
        print(
            f"    {'leg':<24}{'wall ms/call':^26}  {'ratio to direct':^26}  {'proxy CPU µs/call':^23}"
            f" {'+rec':>7}  {'all CPU µs/call':^23}  conns/call"
        )
        ok = all([print_calls(mode, tables[mode]) for mode in modes])
        print(
            "    (proxy CPU: the proxy process; +rec: median of its recorder worker process; all CPU: "
            "client + server + proxy + recorder; conns/call: TCP connections the client opened)"
        )
    sse_ok = True
    if args.events:
        print(
            f"\nSSE event latency, upstream write -> host receipt: {args.rounds} rounds x "
            f"{args.events} events; ms"
        )
        print(f"    {'':<24}{'per event: min':>14} {'median':>8} {'max':>8}   round medians")
        for name, per_round in sse.items():
            flat = [x for xs in per_round for x in xs]
            meds = " ".join(f"{statistics.median(xs):.2f}" for xs in per_round)
            print(f"    {name:<24}{spread(flat)}   {meds}")
        added = [
            statistics.median(f) - statistics.median(d)
            for f, d in zip(sse["record --forward"], sse["direct"], strict=True)
        ]
        sse_ok = statistics.median(added) <= 2
        print(
            f"    added (median per round): min/median/max {spread(added)}"
            f"   target <= 2 ms: {'met' if sse_ok else 'NOT met'}"
        )
    expected = len(modes) * args.rounds * args.calls + len(modes) * 20
    print(
        f"\nrecorded tools/call requests through record --forward: {recorded} "
        f"(at least {expected} expected; recorder gaps: {gaps})"
    )
    return 0 if ok and sse_ok and recorded >= expected and not gaps else 1


if __name__ == "__main__":
    raise SystemExit(main())
