"""Helpers for the recording tests: build recording files from the committed ones.

Tests that import into or export from a database take ``any_db`` (tests/conftest.py): they run
once on a SQLite file and once on a PostgreSQL database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import db as rdb
from tests.travel.conftest import GOLDEN, RECORDINGS, run_cli

__all__ = ["GOLDEN", "RECORDINGS", "db_frames", "jsonl_with_frames", "run_cli"]


def jsonl_with_frames(source: Path, extra: list[dict[str, Any]]) -> bytes:
    """``source`` with frames appended to its (only) session, counts kept consistent.

    Each extra frame is ``{"dir": …, "text": …}`` (or ``base64``); seq, ts and the session id
    are filled in after the file's last frame. No ``kind``: like a hand-made record, the frame
    is classified from its bytes on import.
    """
    recs = [json.loads(line) for line in source.read_bytes().splitlines() if line.strip()]
    frames = [r for r in recs if r.get("type") == "frame"]
    last = frames[-1]
    at = recs.index(last) + 1
    new = []
    for i, f in enumerate(extra, start=1):
        new.append(
            {
                "type": "frame",
                "session": last["session"],
                "seq": last["seq"] + i,
                "ts": last["ts"] + i / 1000,
                "mono_ns": last["mono_ns"] + i,
                "dir": f.get("dir", "c2s"),
                "channel": f.get("channel", "stdio"),
                **{k: v for k, v in f.items() if k in ("text", "base64")},
            }
        )
    recs[at:at] = new
    recs[-1]["frames"] += len(new)
    return b"".join(
        json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for r in recs
    )


def db_frames(db: Path | str) -> list[dict[str, Any]]:
    """Every frame in ``db`` (a SQLite file or a database URL), as the database holds it."""
    return rdb.frames(db)
