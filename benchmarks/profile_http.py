"""Profile the HTTP relay process under load: where its CPU per exchange goes.

    .venv/bin/python benchmarks/profile_http.py --mode raw --n 3000
    .venv/bin/python benchmarks/profile_http.py --mode legacy --n 500   # SDK, 2025-11-25
    .venv/bin/python benchmarks/profile_http.py --mode auto --n 500     # SDK, 2026-07-28

Runs ``mcptape record --upstream`` under ``cProfile`` (``--tool cprofile``, deterministic: every
call counted, the interpreter's work inflated but its split kept) or ``py-spy`` (``--tool
pyspy``, sampling with native frames: the kernel's and the C parsers' share too), drives it with
the same clients as ``bench_http.py`` (raw keep-alive JSON-RPC POSTs against a tiny upstream, or
the SDK client against the SDK server), and prints the top functions by own time and the
relay's CPU per exchange (``/proc`` schedstat, start-up excluded). Not a test; not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_http as bh

#: Runs the relay under cProfile with the thread's CPU clock (not wall time: a loopback
#: ``send`` that wakes the receiver and is descheduled would otherwise look expensive).
_CPU_PROFILE = """
import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = sys.argv[2:]
prof = cProfile.Profile(time.thread_time)
try:
    prof.runcall(runpy.run_path, sys.argv[0], run_name="__main__")
except SystemExit:
    pass
finally:
    prof.dump_stats(out)
"""


def _children(pid: int) -> list[int]:
    """The relay's child processes (its recorder process)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("raw", "legacy", "auto"), default="raw")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument(
        "--tool", choices=("cprofile", "pyspy", "perf", "instr", "none"), default="cprofile"
    )
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument(
        "--code", help="run the relay from this source tree (an A/B against another version)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="measure this many times")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcptape-prof-"))
    prof = tmp / "relay.prof"
    if args.mode == "raw":
        up_argv = [sys.executable, bh.__file__, "--serve-fast"]
        marker, pick = "READY", 1
    else:
        up_argv = [sys.executable, str(bh.SDK_UPSTREAM), "--transport", "http", "--preset", "basic"]
        marker, pick = "MCPTAPE_TEST_SERVER_READY", 1
    with bh.process(up_argv, marker, pick) as (_, upstream):
        relay_argv = [str(bh.MCPTAPE), "record", "--upstream", upstream, "--port", "0"]
        relay_argv += ["--db", str(tmp / "p.db")]
        if args.tool == "cprofile":
            relay_argv = [sys.executable, "-c", _CPU_PROFILE, str(prof), *relay_argv]
        if args.code:
            os.environ["PYTHONPATH"] = args.code
        if args.tool == "perf":
            os.environ["PYTHONPERFSUPPORT"] = "1"  # Python frames in perf's stacks (3.12+)
        relay, purl = bh._start(relay_argv, "mcptape: relaying", 2)
        spy: subprocess.Popen[bytes] | None = None
        try:
            if args.mode == "raw":
                bh.raw_latencies(purl, 200)
            else:
                asyncio.run(bh.sdk_calls(purl, args.mode, 20))
            bh.settle(relay.pid)  # the recorder's start-up is not an exchange's CPU
            if args.tool == "pyspy":
                spy = subprocess.Popen(
                    ["py-spy", "record", "--native", "-r", "500", "-f", "raw", "-o",
                     str(tmp / "spy.txt"), "-p", str(relay.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            elif args.tool == "perf":
                spy = subprocess.Popen(
                    ["perf", "record", "-F", "4000", "-g", "-o", str(tmp / "perf.data"),
                     "-p", str(relay.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            for _ in range(args.repeat):
                counter = None
                if args.tool == "instr":
                    # Instructions retired by the relay (every thread, user and kernel): unlike
                    # CPU time, hardly moved by the other processes on a busy machine.
                    counter = subprocess.Popen(
                        ["perf", "stat", "-x", ",", "-e", "instructions:u,instructions:k",
                         "-p", str(relay.pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    )  # fmt: skip
                    time.sleep(0.3)
                workers = _children(relay.pid)
                w0 = sum(bh.proc_cpu(w) for w in workers)
                c0 = bh.proc_cpu(relay.pid)
                if args.mode == "raw":
                    bh.raw_latencies(purl, args.n)
                else:
                    asyncio.run(bh.sdk_calls(purl, args.mode, args.n))
                used = (bh.proc_cpu(relay.pid) - c0) / args.n
                rec_used = (sum(bh.proc_cpu(w) for w in workers) - w0) / args.n
                label = args.code or "this tree"
                extra = ""
                if counter is not None:
                    counter.send_signal(signal.SIGINT)
                    _, err = counter.communicate(timeout=30)
                    counts = {
                        row.split(",")[2]: int(row.split(",")[0])
                        for row in err.splitlines()
                        if row.count(",") >= 2 and row.split(",")[0].isdigit()
                    }
                    extra = ", ".join(
                        f"{k.split(':')[1]} {v / args.n / 1000:.0f}k instr"
                        for k, v in counts.items()
                    )
                print(
                    f"relay CPU per exchange ({args.mode}, {label}): {used * 1e6:.0f} µs;"
                    f" its recorder process {rec_used * 1e6:.0f} µs {extra}"
                )
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            relay.send_signal(signal.SIGINT)
            relay.wait(60)
    if args.tool == "cprofile":
        st = pstats.Stats(str(prof))
        st.sort_stats("tottime").print_stats(args.top)
        st.sort_stats("cumulative").print_stats(args.top)
    elif args.tool == "perf":
        data = str(tmp / "perf.data")
        for children in ("--no-children", "--children"):
            rep = subprocess.run(
                ["perf", "report", "-i", data, children, "--sort", "symbol", "--stdio",
                 "-g", "none", "--percent-limit", "0.4"],
                capture_output=True, text=True,
            )  # fmt: skip
            lines = [ln for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
            print(f"--- perf {children}")
            print("\n".join(lines[: args.top]))
    elif args.tool == "pyspy":
        print(f"py-spy raw stacks in {tmp / 'spy.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
