"""``mcptape import`` streams: its memory does not grow with the file (issue #22, defect 6).

The import once read the whole file, then every frame as a row tuple, then wrote: a 1M-frame
file peaked at 1.3 GiB. Now it reads a block at a time and writes a page at a time, in one
transaction. The test runs the real CLI twice as a child process — on a 1,000-frame and a
100,000-frame file — and compares the children's peak resident sets (``wait4``'s
``ru_maxrss``): the start-up (Python, SQLAlchemy, the CLI) is the same in both, so the
difference is what the 99,000 more frames cost. It was ~120 MB before the fix (the file, its
row tuples), ~20 MB after (the SQLite page cache of the import's connection filling up).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb

#: What 99,000 more frames may add to the import's peak memory. Before the fix: ~120 MB.
GROWTH_BOUND = 60 * 1024 * 1024


def write_recording(path: Path, frames: int) -> None:
    """A recording of one stdio session of ``frames`` frames, streamed to disk in blocks."""
    sid = "a" * 32
    head = {"format": "mcptape-recording", "version": 2, "generator": "hand-made"}
    session = {"type": "session", "id": sid, "transport": "stdio", "started_at": 1.75e9}
    prefix = '{"type":"frame","session":"' + sid + '","seq":'
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(head) + "\n" + json.dumps(session) + "\n")
        block: list[str] = []
        for seq in range(1, frames + 1):
            if seq % 2:
                body = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"n":%d}}\n'
            else:
                body = '{"jsonrpc":"2.0","id":%d,"result":{"content":[],"n":%d}}\n'
            text = json.dumps(body % (seq // 2, seq))
            block.append(
                f'{prefix}{seq},"ts":{1.75e9 + seq / 1e4!r},"mono_ns":{seq * 1000},'
                f'"dir":"{"c2s" if seq % 2 else "s2c"}","channel":"stdio","text":{text}}}\n'
            )
            if len(block) >= 10_000:
                out.write("".join(block))
                block.clear()
        out.write("".join(block))
        out.write(json.dumps({"type": "end", "sessions": 1, "frames": frames}) + "\n")


def peak_rss_of_import(path: Path, db: Path) -> int:
    """``mcptape import PATH`` as a child process: its peak resident set, in bytes."""
    child = subprocess.Popen(
        [*mcptape_cmd(), "import", str(path), "--db", rdb.db_arg(db)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _pid, status, usage = os.wait4(child.pid, 0)
    assert child.stderr is not None
    err = child.stderr.read().decode()
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, err
    return usage.ru_maxrss * 1024


def test_import_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    write_recording(small, 1_000)
    write_recording(big, 100_000)
    base = peak_rss_of_import(small, tmp_path / "small.db")
    peak = peak_rss_of_import(big, tmp_path / "big.db")
    assert rdb.rows(tmp_path / "big.db", "SELECT frame_count FROM sessions") == [
        {"frame_count": 100_000}
    ]
    growth = peak - base
    assert growth < GROWTH_BOUND, (
        f"100,000 frames took {growth / 2**20:.0f} MiB more than 1,000"
        f" (peak {peak / 2**20:.0f} MiB)"
    )
