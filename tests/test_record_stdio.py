"""``mcptape record`` over stdio, end to end: a real subprocess between a host and a server."""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.db import wait_until
from tests.helpers.watch import StreamWatch

pytestmark = pytest.mark.both_dialects

PY = sys.executable


def _script(tmp_path: Path, **spec: object) -> tuple[list[str], Path]:
    capture = tmp_path / "server-received.bin"
    spec = {"capture": str(capture), **spec}
    for key in ("write", "after_eof", "stderr"):
        if key in spec:
            spec[key] = [base64.b64encode(c).decode() for c in spec[key]]  # type: ignore[union-attr]
    path = tmp_path / "script.json"
    path.write_text(json.dumps(spec))
    return [PY, "-m", "tests.helpers.wire", str(path)], capture


def _record(db: Path, argv: list[str], name: str = "t", **kw: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", str(db), "--name", name, "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kw,  # type: ignore[arg-type]
    )


def _only_session(db: Path) -> dict:
    s = rdb.sessions(db)
    assert len(s) == 1, s
    return s[0]


HOST_BYTES = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"raw-host","version":"0.1"}}}\n'
    b"not json from the host\n"
    b'{"jsonrpc":"2.0","id":"1","method":"tools/list"}\r\n'
    b"\xff\xfe\xfd invalid utf-8\n"
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"1"}}\n'
    b"a partial last line with no newline"
)
SERVER_BYTES = [
    b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},'
    b'"serverInfo":{"name":"raw-server","version":"9"}}}\n',
    b"stray print() output\n",
    b'{"jsonrpc":"2.0","id":"1","result":{"tools":[]}}\n{"jsonrpc":"2.0","method":"notifications/message"',
    b',"params":{"level":"info","data":"split across writes"}}\n',
    b'{"jsonrpc":"2.0","id":1,"method":"roots/list"}\n',
    b"\x80\x81 server junk\n",
]


@pytest.mark.smoke  # the stdio relay's end-to-end recording on PostgreSQL in the default run
def test_bytes_pass_unchanged_both_ways_and_recording_reproduces_the_streams(
    tmp_path: Path, db_path: Path
) -> None:
    argv, capture = _script(
        tmp_path,
        write=SERVER_BYTES,
        after_eof=[b'{"jsonrpc":"2.0","id":99,"result":{}}\n', b"tail without newline"],
        stderr=[b"server starting\n", b"second line, no newline"],
        exit=0,
    )
    proc = _record(db_path, argv)
    out, err = proc.communicate(HOST_BYTES, timeout=30)
    assert proc.returncode == 0, err
    expected_s2c = (
        b"".join(SERVER_BYTES) + b'{"jsonrpc":"2.0","id":99,"result":{}}\ntail without newline'
    )
    assert out == expected_s2c
    assert capture.read_bytes() == HOST_BYTES
    assert b"server starting\nsecond line, no newline" in err

    s = _only_session(db_path)
    assert rdb.stream(db_path, s["id"], "c2s") == HOST_BYTES
    assert rdb.stream(db_path, s["id"], "s2c") == expected_s2c
    assert (
        rdb.stream(db_path, s["id"], "s2c", "stderr") == b"server starting\nsecond line, no newline"
    )

    frames = rdb.frames(db_path, s["id"])
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    c2s = [
        (f["kind"], f["method"], f["msg_id"], f["complete"])
        for f in frames
        if f["direction"] == "c2s"
    ]
    assert c2s == [
        ("request", "initialize", "1", 1),
        ("noise", None, None, 1),
        ("request", "tools/list", '"1"', 1),
        ("noise", None, None, 1),
        ("notification", "notifications/cancelled", None, 1),
        ("noise", None, None, 0),
    ]
    s2c = [
        (f["kind"], f["method"], f["msg_id"])
        for f in frames
        if f["direction"] == "s2c" and f["channel"] == "stdio"
    ]
    assert s2c == [
        ("response", None, "1"),
        ("noise", None, None),
        ("response", None, '"1"'),
        ("notification", "notifications/message", None),
        ("request", "roots/list", "1"),  # server→client ids live in their own space
        ("noise", None, None),
        ("response", None, "99"),
        ("noise", None, None),
    ]
    stderr_frames = [f for f in frames if f["channel"] == "stderr"]
    assert [f["kind"] for f in stderr_frames] == ["stderr", "stderr"]
    assert all(f["ts"] > 0 and f["mono_ns"] > 0 for f in frames)
    assert s["status"] == "ended" and s["exit_code"] == 0
    assert (s["era"], s["protocol_version"], s["client_name"], s["server_name"]) == (
        "initialize",
        "2025-06-18",
        "raw-host",
        "raw-server",
    )
    assert json.loads(s["command"]) == argv
    assert s["frame_count"] == len(frames)


def test_forwarding_does_not_wait_for_a_whole_line(tmp_path: Path, db_path: Path) -> None:
    """The relay forwards bytes as soon as they are read, even mid-line."""
    argv, _ = _script(tmp_path, write=[b'{"jsonrpc":"2.0","method":"a"'], delay=5)
    proc = _record(db_path, argv)
    assert proc.stdout is not None
    t0 = time.monotonic()
    got = os.read(proc.stdout.fileno(), 100)
    assert got == b'{"jsonrpc":"2.0","method":"a"'
    assert time.monotonic() - t0 < 4
    proc.kill()
    proc.wait()


def test_exit_status_is_propagated(tmp_path: Path, db_path: Path) -> None:
    argv, _ = _script(tmp_path, exit=7)
    proc = _record(db_path, argv)
    proc.communicate(b"", timeout=30)
    assert proc.returncode == 7
    s = _only_session(db_path)
    assert (s["status"], s["exit_code"]) == ("crashed", 7)


def test_signal_death_is_128_plus_n(tmp_path: Path, db_path: Path) -> None:
    proc = _record(db_path, [PY, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGKILL)"])
    proc.communicate(b"", timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL
    s = _only_session(db_path)
    assert s["exit_signal"] == signal.SIGKILL and s["status"] == "crashed"


def test_missing_command_exits_127_with_one_line(db_path: Path) -> None:
    proc = _record(db_path, ["definitely-not-a-command-xyz", "--flag"])
    out, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 127
    assert err.decode().strip() == "mcptape: command not found: definitely-not-a-command-xyz"
    assert out == b""


def test_not_executable_exits_126(tmp_path: Path, db_path: Path) -> None:
    f = tmp_path / "server.sh"
    f.write_text("#!/bin/sh\necho hi\n")
    proc = _record(db_path, [str(f)])
    _, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 126
    assert "not executable" in err.decode() and "Traceback" not in err.decode()


def test_no_command_is_a_usage_error(db_path: Path) -> None:
    # In-process (it fails before anything starts); a record process's usage error is
    # tests/test_cli_flags.py's AS_A_PROCESS case.
    proc = run_mcptape("record", "--db", str(db_path))
    assert proc.returncode == 2
    assert "no server command" in proc.stderr and "Traceback" not in proc.stderr


def test_environment_cwd_and_args_reach_the_server(tmp_path: Path, db_path: Path) -> None:
    code = "import os,sys,json; print(json.dumps([os.getcwd(), os.environ.get('MCPTAPE_T'), sys.argv[1:]]))"
    env = {**os.environ, "MCPTAPE_T": "secret-env-value"}
    proc = subprocess.run(
        [*mcptape_cmd(), "record", "--db", str(db_path), "--", PY, "-c", code, "a b", "--x=1"],
        input=b"",
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [str(tmp_path), "secret-env-value", ["a b", "--x=1"]]
    assert _only_session(db_path)["cwd"] == str(tmp_path)


def test_host_eof_lets_the_server_finish_its_reply(tmp_path: Path, db_path: Path) -> None:
    """Host closes stdin mid-request: the reply still in flight reaches host and recording."""
    late = b'{"jsonrpc":"2.0","id":5,"result":{"content":[]}}\n'
    argv, capture = _script(tmp_path, after_eof=[late], eof_delay=0.5)
    proc = _record(db_path, argv)
    req = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow"}}\n'
    out, _ = proc.communicate(req, timeout=30)
    assert out == late
    assert capture.read_bytes() == req
    s = _only_session(db_path)
    kinds = [(f["direction"], f["kind"]) for f in rdb.frames(db_path, s["id"])]
    assert kinds == [("c2s", "request"), ("s2c", "response")]


def test_sigterm_is_forwarded_once_and_status_reflects_it(tmp_path: Path, db_path: Path) -> None:
    code = (
        "import signal,sys,time,os\n"
        "n=[0]\n"
        "def h(s,f):\n n[0]+=1\n"
        "signal.signal(signal.SIGTERM,h)\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "t=time.time()\n"
        "while n[0]==0 and time.time()-t<20: time.sleep(0.01)\n"
        "time.sleep(0.3)\n"
        "sys.stdout.write('terms=%d\\n' % n[0]); sys.stdout.flush(); sys.exit(0)\n"
    )
    proc = _record(db_path, [PY, "-c", code])
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert out == b"terms=1\n"
    assert proc.returncode == 0
    assert _only_session(db_path)["status"] == "ended"


def test_server_exits_mid_request_everything_seen_is_recorded(
    tmp_path: Path, db_path: Path
) -> None:
    argv, _ = _script(
        tmp_path, write=[b'{"jsonrpc":"2.0","method":"notifications/progress"}\n'], exit=3
    )
    # the server reads until EOF; close stdin to let it exit with 3 while a request is pending
    proc = _record(db_path, argv)
    out, _ = proc.communicate(b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\n', timeout=30)
    assert proc.returncode == 3
    assert out == b'{"jsonrpc":"2.0","method":"notifications/progress"}\n'
    s = _only_session(db_path)
    kinds = sorted((f["direction"], f["kind"]) for f in rdb.frames(db_path, s["id"]))
    assert kinds == [("c2s", "request"), ("s2c", "notification")]


def _wait_for_session(db: Path, timeout: float = 30) -> None:
    """Wait until the recorder process is up and has written the session row."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if rdb.sessions(db):
                return
        except sqlite3.Error:  # the file or its tables may not exist yet
            pass
        time.sleep(0.05)
    raise AssertionError("the recorder never wrote the session row")


def test_kill_9_keeps_everything_relayed_a_second_earlier(db_path: Path) -> None:
    proc = _record(db_path, [PY, "-m", "mcp_proxy.testing.rawecho"])
    assert proc.stdin is not None and proc.stdout is not None
    # Start-up (the recorder process importing SQLAlchemy) is not part of the 1 s window.
    _wait_for_session(db_path)
    n = 200
    for i in range(n):
        proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == i
    # Everything relayed is in the database before the kill (the recorder writes within a
    # second: the condition, not a sleep) …
    assert wait_until(lambda: len(rdb.frames(db_path, _only_session(db_path)["id"])) >= 2 * n)
    proc.kill()  # … and the kill -9 of the relay loses none of it
    proc.wait()
    s = _only_session(db_path)
    frames = rdb.frames(db_path, s["id"])
    assert sum(f["direction"] == "c2s" for f in frames) == n
    assert sum(f["direction"] == "s2c" and f["channel"] == "stdio" for f in frames) == n


@pytest.mark.sqlite_only
def test_recording_gap_is_counted_and_recorded_not_silent(db_path: Path) -> None:
    """The database refuses writes for a while: traffic flows, the gap becomes a finding."""
    import sqlite3

    from mcp_proxy.store.engine import ensure_schema

    ensure_schema("sqlite:///" + str(db_path))
    env_extra = {"MCPTAPE_BUSY_TIMEOUT_MS": "50"}
    env = {**os.environ, **env_extra}
    proc = subprocess.Popen(
        [
            *mcptape_cmd(),
            "record",
            "--db",
            str(db_path),
            "--name",
            "gap",
            "--",
            PY,
            "-m",
            "mcp_proxy.testing.rawecho",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = StreamWatch(proc.stderr)
    _wait_for_session(db_path)
    locker = sqlite3.connect(db_path, timeout=5, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        for i in range(50):
            proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == i  # traffic keeps flowing
        stderr.wait_for("recording gap")  # the writer gave up its retries
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    proc.stdin.close()
    proc.wait(timeout=30)
    err = stderr.rest()
    assert proc.returncode == 0
    assert "recording gap" in err
    s = next(x for x in rdb.sessions(db_path) if x["name"] == "gap")
    # (the recorder's own findings; the analysis's are stored beside them when the session ends)
    findings = rdb.rows(
        db_path, "SELECT * FROM findings WHERE session_id = ? AND source = 'recorder'", s["id"]
    )
    assert [f["code"] for f in findings] == ["recorder.gap"]
    recorded = len(rdb.frames(db_path, s["id"]))
    assert s["gap_count"] > 0
    assert recorded + s["gap_count"] == 100  # every frame is either recorded or counted


def test_many_recorders_share_one_database(tmp_path: Path, db_path: Path) -> None:
    procs = [
        _record(db_path, [PY, "-m", "mcp_proxy.testing.rawecho", "--burst", "2000"], name=f"p{i}")
        for i in range(4)
    ]
    threads = []
    results: dict[int, tuple[bytes, bytes]] = {}

    def drive(i: int, p: subprocess.Popen[bytes]) -> None:
        results[i] = p.communicate(b'{"jsonrpc":"2.0","id":1,"method":"burst"}\n', timeout=60)

    for i, p in enumerate(procs):
        t = threading.Thread(target=drive, args=(i, p))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for i, p in enumerate(procs):
        assert p.returncode == 0, results[i][1]
        assert results[i][0].count(b"\n") == 2001
    counts = rdb.rows(
        db_path,
        "SELECT s.name, COUNT(f.id) AS n, s.gap_count FROM sessions s JOIN frames f ON f.session_id = s.id GROUP BY s.id",
    )
    assert sorted((c["name"], c["n"], c["gap_count"]) for c in counts) == [
        (f"p{i}", 2002, 0) for i in range(4)
    ]


@pytest.mark.timeout(120)
def test_64_mib_message_is_relayed_and_recorded_whole(db_path: Path) -> None:
    proc = _record(db_path, [PY, "-m", "mcp_proxy.testing.rawecho", "--huge-mib", "64"])
    out, err = proc.communicate(b'{"jsonrpc":"2.0","id":1,"method":"huge"}\n', timeout=110)
    assert proc.returncode == 0, err
    assert len(out) > 64 * 1024 * 1024
    s = _only_session(db_path)
    rows = rdb.rows(
        db_path,
        "SELECT kind, msg_id, size, partial_parse, length(raw) AS n FROM frames WHERE session_id=? AND direction='s2c'",
        s["id"],
    )
    assert rows == [
        {"kind": "response", "msg_id": "1", "size": len(out), "partial_parse": 1, "n": len(out)}
    ]
    raw = rdb.rows(
        db_path, "SELECT raw FROM frames WHERE session_id=? AND direction='s2c'", s["id"]
    )[0]["raw"]
    assert raw == out


@pytest.mark.sqlite_only
def test_a_gap_at_the_start_never_loses_the_session_row(db_path: Path) -> None:
    """The database is locked before the recorder writes anything: the session still lands."""
    import sqlite3

    from mcp_proxy.store.engine import ensure_schema

    ensure_schema("sqlite:///" + str(db_path))
    locker = sqlite3.connect(db_path, timeout=5, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    env = {**os.environ, "MCPTAPE_BUSY_TIMEOUT_MS": "50"}
    proc = subprocess.Popen(
        [
            *mcptape_cmd(),
            "record",
            "--db",
            str(db_path),
            "--name",
            "early",
            "--",
            PY,
            "-m",
            "mcp_proxy.testing.rawecho",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = StreamWatch(proc.stderr)
    try:
        for i in range(20):
            proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == i
        stderr.wait_for("recording gap")  # the recorder started, failed its first batches
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    for i in range(20, 25):
        proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == i
    proc.stdin.close()
    proc.wait(timeout=30)
    s = _only_session(db_path)
    assert s["name"] == "early" and s["status"] == "ended"
    recorded = rdb.frames(db_path, s["id"])
    assert s["gap_count"] > 0
    assert len(recorded) + s["gap_count"] == 50
    assert s["frame_count"] == len(recorded)
    findings = rdb.rows(
        db_path, "SELECT code FROM findings WHERE session_id = ? AND source = 'recorder'", s["id"]
    )
    assert [f["code"] for f in findings] == ["recorder.gap"]
