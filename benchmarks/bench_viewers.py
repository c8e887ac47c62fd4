"""The viewers on a big session: ``show`` (JSON and text) and ``export`` to a pipe, ``check`` and
``stats``.

    uv run python benchmarks/bench_viewers.py                 # 1,000,000 frames
    uv run python benchmarks/bench_viewers.py --frames 200000 # quicker

A session of small frames (a modern-era conversation: tools/call with a progress notification
and a result, ~90-byte frames like the performance issue's) is written straight into a migrated
SQLite file, then each command runs as a user runs it — the real ``mcptape`` console script in
a subprocess whose stdout is a pipe read and thrown away — and reports wall time, frames/s and
peak RSS (of the command, from ``getrusage`` of the children).

Targets (issue #24, at 1,000,000 frames): ``show --format json`` ≥ 250,000 frames/s, ``show``
text ≥ 150,000 frames/s, ``export`` (JSON Lines) ≥ 200,000 frames/s, streaming with bounded
memory; ``stats`` ≤ 2 s. The session is written without the recorder process, so it has no
stored findings: its ``check`` is the whole analysis, held to ``check --recompute``'s target
(≤ 4 s, ≤ 150 MB); the other commands to ≤ 200 MB RSS.

Each command's CPU time (user + system, ``wait4``) is printed beside its wall time: on a shared
machine the wall clock measures the neighbours, CPU time mostly the command (a single-threaded
command on a quiet machine takes its CPU time in wall time). The verdicts are given for both.
The floor is measured in the same run: sqlite3 alone selecting the session's frame columns
(CPU of this process), and each command's CPU is printed as a multiple of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BIN = Path(sys.executable).parent / "mcptape"


#: The commands run as an installed mcptape runs: with its modules' bytecode cached. An
#: environment with ``PYTHONDONTWRITEBYTECODE`` set (these machines have it) makes every run
#: compile the project and SQLAlchemy from source first — ~2 s of CPU measured in session 4,
#: more than ``check``'s whole work on stored findings.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def generate(db: Path, frames: int) -> str:
    """A migrated database with one ended stdio session of ``frames`` frames; its id."""
    from mcp_proxy.store.engine import ensure_schema

    url = "sqlite:///" + str(db)
    ensure_schema(url)
    sid = uuid.uuid4().hex
    t0 = time.time() - frames / 1000
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO sessions (id, name, transport, status, started_at, ended_at, era,"
        " protocol_version, frame_count, gap_count) VALUES (?,?,?,?,?,?,?,?,?,0)",
        (sid, "big", "stdio", "ended", t0, t0 + frames / 1000, "2026-07-28", "2026-07-28", frames),
    )

    def rows():
        seq = 0
        i = 0
        while seq < frames:
            i += 1
            mid = str(i)
            req = (
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {
                            "name": "echo",
                            "arguments": {"text": "hi"},
                            "_meta": {"progressToken": i},
                        },
                    },
                    separators=(",", ":"),
                ).encode()
                + b"\n"
            )
            note = (
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": i, "progress": 1},
                    },
                    separators=(",", ":"),
                ).encode()
                + b"\n"
            )
            res = (
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "result": {"content": [{"type": "text", "text": "hi"}]},
                    },
                    separators=(",", ":"),
                ).encode()
                + b"\n"
            )
            for direction, kind, method, msg_id, raw in (
                ("c2s", "request", "tools/call", mid, req),
                ("s2c", "notification", "notifications/progress", None, note),
                ("s2c", "response", None, mid, res),
            ):
                seq += 1
                if seq > frames:
                    return
                ts = t0 + seq / 1000
                yield (
                    sid,
                    seq,
                    ts,
                    int(ts * 1e9),
                    direction,
                    "stdio",
                    kind,
                    method,
                    msg_id,
                    None,
                    len(raw),
                    1,
                    0,
                    raw,
                )

    conn.executemany(
        "INSERT INTO frames (session_id, seq, ts, mono_ns, direction, channel, kind, method,"
        " msg_id, error_code, size, complete, partial_parse, raw)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows(),
    )
    conn.commit()
    conn.close()
    return sid


def run(args: list[str]) -> tuple[float, int, int, float]:
    """Wall seconds, stdout bytes, the command's own peak RSS (KiB) and its CPU seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CHILD_ENV
    )
    assert proc.stdout is not None and proc.stderr is not None
    total = 0
    while chunk := proc.stdout.read(1 << 20):
        total += len(chunk)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (peak RSS)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 5):
        raise SystemExit(
            f"mcptape {' '.join(args)} failed ({proc.returncode}): {err.decode()[-500:]}"
        )
    return wall, total, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def _small(wall: float, rss_kib: int) -> bool:
    return wall <= 3 and rss_kib * 1024 <= 200e6


def direct(db: Path, sid: str) -> float:
    """CPU seconds of sqlite3 alone reading the session's frames as the viewers do (the floor)."""
    from mcp_proxy.store.columns import FRAME_COLUMNS

    conn = sqlite3.connect(db)
    t0 = time.process_time()
    cur = conn.execute(
        f"SELECT {', '.join(FRAME_COLUMNS)} FROM frames WHERE session_id = ? ORDER BY seq", (sid,)
    )
    while cur.fetchmany(5000):
        pass
    cpu = time.process_time() - t0
    conn.close()
    return cpu


def direct_stored(db: Path, sid: str) -> float:
    """CPU seconds of sqlite3 alone reading what ``show`` reads on SQLite: ``frame_rows`` as
    stored, direction/channel/kind/method as one shape integer (``shaped_batches``)."""
    from mcp_proxy.render import SHAPED_COLUMNS
    from mcp_proxy.store.stream import shaped_batches

    t0 = time.process_time()
    _shapes, batches = shaped_batches(str(db), sid, SHAPED_COLUMNS)
    for _rows in batches:
        pass
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--db", help="reuse this database (generated when missing)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(opts.db) if opts.db else Path(tmp) / "viewers.db"
        t = time.perf_counter()
        if db.exists():
            sid = sqlite3.connect(db).execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        else:
            sid = generate(db, opts.frames)
            print(f"generated {opts.frames:,} frames in {time.perf_counter() - t:.1f} s")
        n = (
            sqlite3.connect(db)
            .execute("SELECT count(*) FROM frames WHERE session_id = ?", (sid,))
            .fetchone()[0]
        )
        print(f"session {sid[:12]}: {n:,} frames  ({os.cpu_count()} CPUs)")
        floor = min(direct(db, sid) for _ in range(3))
        print(f"direct: sqlite3 select of the frame columns: {floor:.2f} s CPU, {n / floor:,.0f}/s")
        stored = min(direct_stored(db, sid) for _ in range(3))
        print(
            f"direct: frame_rows as stored (show's read): {stored:.2f} s CPU, {n / stored:,.0f}/s"
        )
        print(
            f"{'command':32} {'wall s':>7} {'CPU s':>6} {'frames/CPU s':>12} {'×direct':>7}"
            f" {'MiB out':>8} {'RSS MiB':>8} {'target':>17}  met(wall) met(CPU)"
        )
        # check first: it stores the findings that show (text) prints at the end, as a user's
        # second look at a session finds them.
        cases = [
            (["check", sid, "--fail-on", "never"], "≤ 4 s, ≤ 150 MB",
             lambda w, r: w <= 4 and r * 1024 <= 150e6),
            (["stats", sid], "≤ 2 s, ≤ 200 MB", lambda w, r: w <= 2 and _small(w, r)),
            (["show", sid, "--format", "json"], "≥ 250,000/s", lambda w, r: n / w >= 250_000),
            (["show", sid], "≥ 150,000/s", lambda w, r: n / w >= 150_000),
            (["show", sid, "--no-findings"], "≥ 150,000/s", lambda w, r: n / w >= 150_000),
            (["export", sid, "-o", "-", "--format", "jsonl"], "≥ 200,000/s",
             lambda w, r: n / w >= 200_000),
        ]  # fmt: skip
        run(["--help"])  # compiles and caches the modules' bytecode once (CHILD_ENV)
        for args, target, ok in cases:
            wall, out, rss, cpu = run([*args, "--db", str(db)])
            label = " ".join(a if a != sid else "BIG" for a in args)
            print(
                f"{label:32} {wall:7.2f} {cpu:6.2f} {n / cpu:12,.0f} {cpu / floor:7.1f}"
                f" {out / 2**20:8.1f} {rss / 1024:8.0f} {target:>17}"
                f"  {'yes' if ok(wall, rss) else 'NO':9} {'yes' if ok(cpu, rss) else 'NO'}"
            )


if __name__ == "__main__":
    main()
