"""Benchmark of ``mcptape import`` at scale: peak memory and frames/s of a 1,000,000-frame file.

Generates a JSON Lines recording of one stdio session (requests and responses of a few hundred
bytes each, as this mcptape exports them), streamed to disk a block of lines at a time, then
runs ``mcptape import FILE --db sqlite:///…`` as a child process and reads the child's peak
resident set from ``wait4``'s rusage (``ru_maxrss``) and its frames/s from the wall clock of
the run (start-up included).

Targets (issue #22): peak RSS ≤ 150 MB at 1M frames; ≥ 150,000 frames/s. Not a test: these
machines are shared, so the wall clock counts the neighbours too; the CPU time of the child
(user + system) is printed beside it. The import reads the file in a process of its own
(``recording/import_reader.py``), which it waits for: ``wait4``'s figures count it too (the CPU
of both; the peak RSS of the larger).

    uv run python benchmarks/bench_import.py [FRAMES]      # default 1,000,000
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RSS_TARGET_MB = 150
RATE_TARGET = 150_000
#: Lines written per block while generating (the generator's own memory stays a block).
BLOCK = 10_000

#: The environment the child runs in: bytecode cached as an installed mcptape runs.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def write_recording(path: Path, frames: int, generator: str | None = None) -> None:
    """A JSON Lines recording of one session of ``frames`` frames, streamed to ``path``.

    ``generator`` defaults to this mcptape; it is informative only (an import classifies every
    frame from its bytes, whoever wrote the file).
    """
    from mcp_proxy import __version__

    sid = "b" * 32
    header = {
        "format": "mcptape-recording",
        "version": 2,
        "generator": generator or f"mcptape {__version__}",
    }
    session = {
        "type": "session", "id": sid, "name": "bench-import", "transport": "stdio",
        "status": "ended", "started_at": 1_750_000_000.0, "ended_at": None,
        "command": ["server", "--stdio"], "frame_count": frames, "gap_count": 0,
    }  # fmt: skip
    prefix = '{"type":"frame","session":"' + sid + '","seq":'
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header, separators=(",", ":")) + "\n")
        out.write(json.dumps(session, separators=(",", ":")) + "\n")
        block: list[str] = []
        for seq in range(1, frames + 1):
            rid = (seq + 1) // 2
            ts = 1_750_000_000.0 + seq * 0.00005
            if seq % 2:
                body = (
                    f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":'
                    f'{{"name":"get_weather","arguments":{{"city":"Lyon","units":"metric",'
                    f'"n":{seq}}}}}}}\n'
                )
                middle = '"dir":"c2s","channel":"stdio","kind":"request","method":"tools/call"'
            else:
                body = (
                    f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[{{"type":"text",'
                    f'"text":"12 degrees, light rain, wind 14 km/h ({seq})"}}],"isError":false}}}}\n'
                )
                middle = '"dir":"s2c","channel":"stdio","kind":"response"'
            block.append(
                f'{prefix}{seq},"ts":{ts!r},"mono_ns":{seq * 50_000},{middle},'
                f'"id":"{rid}","text":{json.dumps(body)}}}\n'
            )
            if len(block) >= BLOCK:
                out.write("".join(block))
                block.clear()
        out.write("".join(block))
        counts = {"sessions": 1, "http_exchanges": 0, "frames": frames}
        out.write(json.dumps({"type": "end", **counts, "findings": 0, "annotations": 0}) + "\n")


def run_import(path: Path, db: Path, *extra: str) -> tuple[int, float, float, int]:
    """``mcptape import`` as a child: (exit status, wall seconds, CPU seconds, peak RSS bytes)."""
    argv = [sys.executable, "-m", "mcp_proxy", "import", str(path), "--db", f"sqlite:///{db}"]
    start = time.perf_counter()
    child = subprocess.Popen(
        [*argv, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV
    )
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if child.stderr is not None:
        err = child.stderr.read().decode(errors="replace").strip()
        child.stderr.close()
        if status:
            print(err, file=sys.stderr)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    frames = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        path = Path(tmp) / "big.mcptape.jsonl"
        t0 = time.perf_counter()
        write_recording(path, frames)
        size = path.stat().st_size
        print(
            f"file: {frames:,} frames, {size / 1e6:.0f} MB, written in"
            f" {time.perf_counter() - t0:.1f} s"
        )
        code, wall, cpu, rss = run_import(path, Path(tmp) / "import.db")
        if code:
            raise SystemExit(f"mcptape import failed with exit code {code}")
        print(f"peak RSS   {rss / 1e6:8.1f} MB        target ≤ {RSS_TARGET_MB} MB")
        print(f"frames/s   {frames / wall:10,.0f}  (wall {wall:.1f} s)   target ≥ {RATE_TARGET:,}")
        print(f"frames/s   {frames / cpu:10,.0f}  (CPU  {cpu:.1f} s, user + system)")
        print(f"load       {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")


if __name__ == "__main__":
    main()
