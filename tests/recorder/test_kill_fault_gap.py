"""``mcptape record --fault 'disconnect mode=kill …'`` (the docs/faults.md recipe) through the
real CLI: stderr and the database agree on what was not recorded (issue 22, defect 8).

Before: the host saw the server's stdout end and closed its stdin while the relay was closing
the recorder; the host→server stream's end, handed over after that, was reported on stderr as
"recording gap: 1 record(s) could not be handed to the recorder process" — while nothing was
lost (it carried no frame) and the session rightly had ``gap_count`` 0. The relay now ends the
host's stream itself before the session's end. The moment is made certain here: the recorder
process is stopped (SIGSTOP) so that the relay waits for it with its pipe already closed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers import db as rdb
from tests.recorder.util import ECHO, alive, record, session, wait_for, worker_pid

pytestmark = pytest.mark.timeout(90)

RULE = "disconnect mode=kill signal=KILL direction=request method=tools/call name=deploy"


def _fds(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_killed_server_leaves_no_gap_on_stderr_that_the_database_lacks(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    proc = record(db, ECHO, name="kill", options=("--fault", RULE))
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    proc.stdin.write(ping)
    proc.stdin.flush()
    assert proc.stdout.readline() == ping
    wait_for(lambda: rdb.sessions(db), what="the session row")
    worker = worker_pid(proc.pid)
    pipe = os.readlink(f"/proc/{worker}/fd/0")  # the relay → recorder pipe
    os.kill(worker, signal.SIGSTOP)
    try:
        call = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy"}}\n'
        proc.stdin.write(call)
        proc.stdin.flush()
        assert proc.stdout.read() == b""  # the server was killed: the host's stdout ends
        # The relay has handed everything over and closed its end of the pipe; it now waits
        # for the (stopped) recorder. Only then does this host close its stdin.
        wait_for(lambda: pipe not in _fds(proc.pid), what="the relay to close the recorder pipe")
        threads = _threads(proc.pid)
        proc.stdin.close()
        # the host→server pump sees EOF, does what it does at EOF, and ends
        wait_for(lambda: _threads(proc.pid) < threads, what="the host pump to end")
    finally:
        os.kill(worker, signal.SIGCONT)
    assert proc.wait(timeout=60) == 128 + signal.SIGKILL
    err = proc.stderr.read().decode()
    s = session(db, "kill")
    gaps = rdb.rows(db, "SELECT * FROM findings WHERE code = 'recorder.gap'")
    assert (s["status"], s["gap_count"], gaps) == ("ended", 0, [])
    assert "recording gap" not in err and "not recorded" not in err, err
    assert [f["method"] for f in rdb.frames(db, s["id"])] == ["ping", "ping", "tools/call"]
    assert not alive(worker)
