"""Benchmark of recording files: ``export`` and ``import`` of a 50,000-frame session.

    uv run python benchmarks/bench_recording.py             # 50,000 frames, 3 rounds
    uv run python benchmarks/bench_recording.py 200000 5    # another size, 5 rounds
    uv run python benchmarks/bench_recording.py 50000 2 --pg=postgresql://…   # + db copy to PG

The session is ``bench_analysis.py``'s (2026-07-28 tools/call traffic with progress, logs,
errors and stderr), recorded into a temporary SQLite database through the real Recorder. Then, per round, timed separately:

- export: the session read from the database and written as a JSON Lines file (the library
  path ``mcptape export`` runs, start-up excluded), and ``mcptape export`` as a process;
- import: that file parsed, validated, classified and written as a new session (the library
  path of ``mcptape import``), and ``mcptape import`` as a process;
- direct: the floor on this machine — sqlite3 alone selecting the same rows and writing their
  bytes to a file, and inserting the same rows into the same schema (its five frame indexes
  included) in one transaction.

- db copy (with ``--pg=URL``, a PostgreSQL server the benchmark may create databases on):
  ``mcptape db copy`` of the session from the SQLite file into a fresh PostgreSQL database
  (binary COPY; the client's CPU is printed, the server's is its own).

Target (issue 10/12): export and import ≥ 100,000 frames/s. Not a test: these machines are
noisy; the figures printed are min / median / max over the rounds, in wall time and in CPU time
(``process_time``: on a shared machine the wall clock measures the neighbours too). The import
is timed as ``mcptape import`` runs it: redacted by the default policy (issue 10); the figure
without redaction is printed beside it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analysis import generate

TARGET = 100_000


#: The commands run as an installed mcptape runs: with its modules' bytecode cached. An
#: environment with ``PYTHONDONTWRITEBYTECODE`` set (these machines have it) makes every run
#: compile the project and SQLAlchemy from source first — ~2 s of CPU measured in session 4,
#: more than ``check``'s whole work on stored findings.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _export(db_url: str, sid: str, out: Path) -> int:
    """What ``mcptape export SESSION -o FILE`` runs, start-up excluded: JSON Lines streamed
    straight from the store (``Format.write_db``)."""
    from mcp_proxy.recording.database import resolve_sessions
    from mcp_proxy.recording.model import write_file
    from mcp_proxy.recording.registry import get_format
    from mcp_proxy.store.queries import Store

    async def resolve() -> list[dict[str, object]]:
        store = await Store.open(db_url)
        try:
            return await resolve_sessions(store, [sid])
        finally:
            await store.close()

    ids = [str(r["id"]) for r in asyncio.run(resolve())]
    done = [0]

    def count(n: int) -> None:
        done[0] += n

    write_db = get_format("jsonl").write_db
    assert write_db is not None
    write_file(out, write_db(db_url, ids, count))
    return done[0]


def _import(path: Path, db_url: str, redact: bool = True) -> int:
    """What ``mcptape import FILE`` runs, start-up excluded (redacted unless ``redact`` is
    False, as ``--no-redact``)."""
    from mcp_proxy.recording.database import import_file
    from mcp_proxy.redact import Redactor

    return import_file(path, db_url, redactor=Redactor(enabled=redact))[1].frames


def _timed(fn: object, *args: object) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn(*args)``."""
    w, c = time.perf_counter(), time.process_time()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - w, time.process_time() - c


def _direct(db: Path, sid: str, out: Path, into_url: str) -> tuple[float, float, int, float, float]:
    """sqlite3 alone: the same frames selected and written out, then inserted into the same
    schema (its indexes included) of a fresh database, in one transaction."""
    from mcp_proxy.store.recordings import RecordingStore

    RecordingStore(into_url, write=True).close()  # the migrated schema, not timed
    cols = (
        "session_id, seq, ts, mono_ns, direction, channel, kind, method, msg_id, error_code,"
        " size, complete, partial_parse, raw, http_exchange_id, sse_id, sse_event"
    )
    con = sqlite3.connect(db)
    c0 = time.process_time()
    t0 = time.perf_counter()
    rows = con.execute(
        f"SELECT {cols} FROM frames WHERE session_id = ? ORDER BY seq", (sid,)
    ).fetchall()
    with open(out, "wb") as fh:
        for r in rows:
            fh.write(r[13])
            fh.write(b"\n")
    t1 = time.perf_counter()
    c1 = time.process_time()
    con.close()
    target = sqlite3.connect(into_url.removeprefix("sqlite:///"))
    target.execute("PRAGMA journal_mode=WAL")
    target.execute("PRAGMA synchronous=NORMAL")
    with target:
        target.execute(
            "INSERT INTO sessions (id, transport, status, started_at, frame_count, gap_count)"
            " VALUES (?, 'stdio', 'ended', 0, 0, 0)",
            (sid,),
        )
    t2 = time.perf_counter()
    c2 = time.process_time()
    with target:
        target.executemany(f"INSERT INTO frames ({cols}) VALUES ({', '.join('?' * 17)})", rows)
    t3 = time.perf_counter()
    c3 = time.process_time()
    target.close()
    return t1 - t0, t3 - t2, len(rows), c1 - c0, c3 - c2


def _copy_to_pg(db_url: str, pg_url: str, name: str) -> tuple[int, float, float]:
    """``mcptape db copy`` SQLite → PostgreSQL into a fresh database ``name`` on ``pg_url``'s
    server (created and migrated first, not timed): (frames, wall s, client CPU s)."""
    import psycopg
    import sqlalchemy as sa

    from mcp_proxy.store import engine as engine_mod
    from mcp_proxy.store.copy import copy_store

    url = sa.engine.make_url(pg_url)
    with psycopg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    target = url.set(database=name).render_as_string(hide_password=False)
    engine_mod.ensure_schema(target)
    w, c = time.perf_counter(), time.process_time()
    frames = copy_store(db_url, target).frames
    return frames, time.perf_counter() - w, time.process_time() - c


def _cli(*args: str) -> float:
    exe = Path(sys.executable).parent / "mcptape"
    t0 = time.perf_counter()
    subprocess.run([str(exe), *args], check=True, capture_output=True, env=CHILD_ENV)
    return time.perf_counter() - t0


def _line(
    label: str, rates: list[float], unit: str = "frames/s", target: float | None = None
) -> str:
    lo, med, hi = min(rates), statistics.median(rates), max(rates)
    verdict = ""
    if target is not None:
        verdict = f"   target ≥ {target:,.0f}: {'met' if med >= target else 'MISSED'}"
    return f"{label:<34} {lo:>10,.0f} {med:>10,.0f} {hi:>10,.0f} {unit}{verdict}"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--pg=")]
    pg = next((a.removeprefix("--pg=") for a in sys.argv[1:] if a.startswith("--pg=")), None)
    if len(args) > 2 or not all(a.isdigit() for a in args):
        sys.exit("usage: bench_recording.py [FRAMES [ROUNDS]] [--pg=POSTGRESQL_URL]")
    n = int(args[0]) if args else 50_000
    rounds = int(args[1]) if len(args) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        db_url = "sqlite:///" + str(db)
        t = time.perf_counter()
        sid = generate(db_url, n)
        print(f"generated and recorded a {n:,}-frame session in {time.perf_counter() - t:.1f} s")
        out = Path(tmp) / "bench.mcptape.jsonl"
        size = 0
        exp, imp, exp_cli, imp_cli, d_out, d_in = [], [], [], [], [], []
        exp_cpu, imp_cpu, imp_clear_cpu, d_out_cpu, d_in_cpu = [], [], [], [], []
        copy_wall, copy_cpu = [], []
        frames = _export(db_url, sid, out)  # warm up: imports and the schema check, not timed
        for i in range(rounds):
            wall, cpu = _timed(_export, db_url, sid, out)
            exp.append(frames / wall)
            exp_cpu.append(frames / cpu)
            size = out.stat().st_size
            target_url = "sqlite:///" + str(Path(tmp) / f"imp{i}.db")
            _import(out, target_url)  # schema created; the timed import is the second one
            wall, cpu = _timed(_import, out, target_url)
            imp.append(frames / wall)
            imp_cpu.append(frames / cpu)
            imp_clear_cpu.append(frames / _timed(_import, out, target_url, False)[1])
            cli_out = Path(tmp) / "cli.jsonl"
            exp_cli.append(frames / _cli("export", sid, "-o", str(cli_out), "--db", str(db)))
            imp_cli.append(frames / _cli("import", str(cli_out), "--db", target_url))
            direct_url = "sqlite:///" + str(Path(tmp) / f"direct{i}.db")
            sel, ins, rows, sel_cpu, ins_cpu = _direct(
                db, sid, Path(tmp) / "direct.bin", direct_url
            )
            d_out.append(rows / sel)
            d_in.append(rows / ins)
            d_out_cpu.append(rows / sel_cpu)
            d_in_cpu.append(rows / ins_cpu)
            os.unlink(cli_out)
            if pg:
                copied, wall, cpu = _copy_to_pg(db_url, pg, f"bench_copy_{i}")
                copy_wall.append(copied / wall)
                copy_cpu.append(copied / cpu)
        print(f"{frames:,} frames, file {size / 1e6:.1f} MB; {rounds} rounds: min / median / max")
        print(_line("export (library)", exp, target=TARGET))
        print(_line("import (library)", imp, target=TARGET))
        print(_line("mcptape export (process, wall)", exp_cli))
        print(_line("mcptape import (process, wall)", imp_cli))
        print(_line("direct: sqlite3 select + write", d_out))
        print(_line("direct: sqlite3 insert, same schema", d_in))
        if copy_wall:
            print(_line("db copy SQLite → PostgreSQL", copy_wall))
        print("CPU time (process_time): min / median / max")
        print(_line("export (library), CPU", exp_cpu, "frames/CPU s", target=TARGET))
        print(_line("import (library, redacted), CPU", imp_cpu, "frames/CPU s", target=TARGET))
        print(_line("import (library, --no-redact), CPU", imp_clear_cpu, "frames/CPU s"))
        print(_line("direct: select + write, CPU", d_out_cpu, "frames/CPU s"))
        print(_line("direct: insert, CPU", d_in_cpu, "frames/CPU s"))
        if copy_cpu:
            print(_line("db copy → PostgreSQL, client CPU", copy_cpu, "frames/CPU s"))
        med = statistics.median
        print(
            f"ratio to direct (wall) export {med(exp) / med(d_out):.2f},"
            f" import {med(imp) / med(d_in):.2f}; (CPU) export {med(exp_cpu) / med(d_out_cpu):.2f},"
            f" import {med(imp_cpu) / med(d_in_cpu):.2f}"
            f" (without redaction {med(imp_clear_cpu) / med(d_in_cpu):.2f})"
        )


if __name__ == "__main__":
    main()
