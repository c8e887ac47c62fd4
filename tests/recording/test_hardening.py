"""Hostile and mistaken input to ``export``/``import``, through the real CLI (issue 10).

Tests that store what they import run on both dialects (``any_db``). Each test failed on the
code before the recording package: a HAR given to ``import`` was
"line 1: not valid JSON"; a frame nested 1,500 deep (recordable) crashed ``import`` and ``diff``
with a RecursionError traceback; a lone surrogate or a 65-bit error code in a frame lost it.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

from tests.conftest import mcptape_cmd
from tests.recording.conftest import GOLDEN, RECORDINGS, db_frames, jsonl_with_frames, run_cli

DEPTH = 1500
DEEP = (
    '{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"x":'
    + "[" * DEPTH
    + "]" * DEPTH
    + "}}"
)


def test_import_of_a_har_file_works_and_a_har_without_mcp_is_one_clear_line(
    tmp_path: Path, any_db: Path | str
) -> None:
    db = str(any_db)
    imported = run_cli("import", str(GOLDEN / "v2-http.jsonl"), "--db", db)
    assert imported.returncode == 0, imported.stderr
    new_id = imported.stdout.split()[0]
    har = tmp_path / "golden.har"
    out = run_cli("export", new_id, "-o", str(har), "--db", db)
    assert out.returncode == 0, out.stderr
    assert json.loads(har.read_bytes())["log"]["version"] == "1.2"  # -o x.har → HAR
    back = run_cli("import", str(har), "--db", db)
    assert back.returncode == 0, back.stderr
    assert "not valid JSON" not in back.stderr and "imported 1 session(s)" in back.stderr
    same = run_cli("diff", new_id, back.stdout.split()[0], "--db", db)
    assert same.returncode == 0, same.stdout + same.stderr

    empty = tmp_path / "page.har"
    empty.write_text(
        json.dumps(
            {
                "log": {
                    "version": "1.2",
                    "creator": {"name": "WebInspector", "version": "537.36"},
                    "entries": [
                        {
                            "startedDateTime": "2026-01-01T00:00:00.000Z",
                            "time": 1,
                            "request": {"method": "GET", "url": "http://x/", "headers": []},
                            "response": {"status": 200, "headers": [], "content": {}},
                            "timings": {"send": 0, "wait": 1, "receive": 0},
                        }
                    ],
                }
            },
            indent=2,
        )
    )
    proc = run_cli("import", str(empty), "--db", db)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "holds no MCP traffic" in proc.stderr and "not valid JSON" not in proc.stderr
    forced = run_cli("import", str(har), "--format", "jsonl", "--db", db)
    assert forced.returncode == 2
    assert "is a HAR file" in forced.stderr and "--format har" in forced.stderr


def test_a_deeply_nested_frame_imports_and_diffs_byte_exact(
    tmp_path: Path, any_db: Path | str
) -> None:
    src = tmp_path / "deep.jsonl"
    src.write_bytes(
        jsonl_with_frames(RECORDINGS / "basic-legacy.mcptape.jsonl", [{"text": DEEP + "\n"}])
    )
    db = any_db
    proc = run_cli("import", str(src), "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    rows = db_frames(db)
    assert rows[-1]["raw"] == (DEEP + "\n").encode()
    assert rows[-1]["kind"] == "undecodable"
    diff = run_cli("diff", str(src), proc.stdout.split()[0], "--db", str(db))
    assert diff.returncode == 0, diff.stdout + diff.stderr[-2000:]
    back = tmp_path / "back.jsonl"
    assert (
        run_cli("export", proc.stdout.split()[0], "-o", str(back), "--db", str(db)).returncode == 0
    )
    assert DEEP.encode() in back.read_bytes().replace(b'\\"', b'"')


def test_a_record_line_nested_too_deep_is_one_clear_line(tmp_path: Path) -> None:
    lines = (RECORDINGS / "basic-legacy.mcptape.jsonl").read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(lines[0] + b'{"type":"session","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    proc = run_cli("import", str(bad), "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2
    assert "line 2: nested too deeply" in proc.stderr and "Traceback" not in proc.stderr


BIG = 2**70


def test_values_the_database_cannot_hold_do_not_cost_the_frame(
    tmp_path: Path, any_db: Path | str
) -> None:
    hostile = [
        {"text": '{"jsonrpc":"2.0","id":"\\ud800","method":"x\\udfff"}\n'},
        {
            "dir": "s2c",
            "text": f'{{"jsonrpc":"2.0","id":1,"error":{{"code":{BIG},"message":"m"}}}}\n',
        },
        {"text": '{"jsonrpc":"2.0","id":"%s","method":"long"}\n' % ("i" * 400)},
        {"base64": "//4gbm90IHV0Zi04Cg=="},
    ]
    src = tmp_path / "hostile.jsonl"
    src.write_bytes(jsonl_with_frames(RECORDINGS / "basic-legacy.mcptape.jsonl", hostile))
    db = any_db
    proc = run_cli("import", str(src), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    rows = db_frames(db)
    assert len(rows) == 34 + len(hostile)
    tail = rows[-len(hostile) :]
    assert tail[0]["raw"] == hostile[0]["text"].encode()
    assert tail[0]["msg_id"] == '"\\ud800"' and tail[0]["method"] == "x\\udfff"  # escaped
    assert tail[1]["error_code"] is None and str(BIG).encode() in tail[1]["raw"]
    assert tail[2]["method"] == "long" and len(tail[2]["msg_id"]) <= 300
    assert json.loads(tail[2]["msg_id"]).startswith("i" * 50)  # a valid stand-in, not cut JSON
    assert tail[3]["raw"] == b"\xff\xfe not utf-8\n"
    back = tmp_path / "back.jsonl"
    sid = proc.stdout.split()[0]
    assert run_cli("export", sid, "-o", str(back), "--db", str(db)).returncode == 0
    assert run_cli("diff", str(src), str(back)).returncode == 0


def _run_on_tty(args: list[str], timeout: float = 60) -> tuple[int, bytes]:
    """Run mcptape with stderr on a pseudo-terminal; returns its exit code and what it drew."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*mcptape_cmd(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=10), bytes(out)


def test_progress_is_drawn_on_a_terminal_and_never_in_a_pipe(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    src = str(RECORDINGS / "basic-2026.mcptape.jsonl")
    code, drawn = _run_on_tty(["import", src, "--db", db])
    assert code == 0, drawn.decode(errors="replace")
    assert b"importing" in drawn and b"frames" in drawn and b"\x1b[" in drawn
    piped = run_cli("import", src, "--db", db)
    assert piped.returncode == 0
    assert "\x1b[" not in piped.stderr and "importing" not in piped.stderr
    sid = piped.stdout.split()[0]
    code, drawn = _run_on_tty(["export", sid, "-o", str(tmp_path / "o.jsonl"), "--db", db])
    assert code == 0 and b"writing jsonl" in drawn
