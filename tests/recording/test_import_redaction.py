"""``mcptape import`` records like ``mcptape record``: redacted by default (issue 10).

A recording file someone sends you is traffic recorded elsewhere; importing it into your
database must not write its secrets in clear just because they arrived as a file. Through the
real CLI into a real SQLite file: the secret is gone and the frame is marked ``redacted``, the
other frames go in byte for byte, and ``MCPTAPE_REDACT=off`` opts out loudly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.recording.conftest import RECORDINGS, db_frames, jsonl_with_frames, run_cli

SECRET = "hunter2-do-not-store"
CALL = {
    "jsonrpc": "2.0",
    "id": 901,
    "method": "tools/call",
    "params": {"name": "login", "arguments": {"user": "ada", "password": SECRET}},
}


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.mcptape.jsonl"
    path.write_bytes(
        jsonl_with_frames(
            RECORDINGS / "basic-legacy.mcptape.jsonl",
            [{"dir": "c2s", "text": json.dumps(CALL) + "\n"}],
        )
    )
    return path


def _file_frames(path: Path) -> list[bytes]:
    recs = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [r["text"].encode() for r in recs if r.get("type") == "frame"]


def test_import_redacts_by_default(tmp_path: Path) -> None:
    src = _file(tmp_path)
    db = tmp_path / "rec.db"
    env = {k: v for k, v in os.environ.items() if k != "MCPTAPE_REDACT"}
    done = run_cli("import", str(src), "--db", str(db), env=env)
    assert done.returncode == 0, done.stderr
    rows = db_frames(db)
    assert all(SECRET.encode() not in bytes(r["raw"]) for r in rows)
    secret_row = next(r for r in rows if b'"login"' in bytes(r["raw"]))
    assert secret_row["redacted"] == 1
    assert json.loads(bytes(secret_row["raw"]))["params"]["arguments"]["user"] == "ada"
    assert secret_row["size"] == len(bytes(secret_row["raw"]))
    # Everything without a secret goes in exactly as in the file, and is not marked.
    others = [r for r in rows if r["seq"] != secret_row["seq"]]
    assert [bytes(r["raw"]) for r in others] == _file_frames(src)[:-1]
    assert all(not r["redacted"] for r in others)
    assert "redaction is OFF" not in done.stderr


def test_import_opt_out_by_environment_is_loud(tmp_path: Path) -> None:
    src = _file(tmp_path)
    db = tmp_path / "rec.db"
    done = run_cli("import", str(src), "--db", str(db), env={**os.environ, "MCPTAPE_REDACT": "off"})
    assert done.returncode == 0, done.stderr
    assert "redaction is OFF" in done.stderr
    assert any(SECRET.encode() in bytes(r["raw"]) for r in db_frames(db))
