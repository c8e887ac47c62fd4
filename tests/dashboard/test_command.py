"""``mcptape dashboard`` as a user runs it: the printed URL works, mistakes are one line."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mcp_proxy.commands.dashboard import _is_loopback
from tests.conftest import mcptape_cmd
from tests.dashboard.browser import dashboard_process
from tests.dashboard.conftest import FIRST_DIALECT_ONLY, Recordings
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(60)


@FIRST_DIALECT_ONLY  # ``mcptape dashboard --db postgresql://…``: tests/dashboard/test_browser.py
def test_printed_url_carries_a_per_run_token(recordings: Recordings):
    tokens = []
    for _ in range(2):
        with dashboard_process(recordings.db) as url:
            base, token = url.split("/?token=")
            assert base.startswith("http://127.0.0.1:") and len(token) >= 24
            tokens.append(token)
            req = urllib.request.Request(
                base + "/sessions.json", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(req) as r:
                assert len(json.loads(r.read())["sessions"]) >= 3
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(base + "/sessions.json")
            assert err.value.code == 401
    assert tokens[0] != tokens[1]


def test_non_loopback_bind_needs_the_flag(tmp_path: Path):
    r = subprocess.run(
        [*mcptape_cmd(), "dashboard", "--db", str(tmp_path / "x.db"), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip().startswith("mcptape: 0.0.0.0 is not a loopback address")
    assert "--allow-remote" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_loopback_rule(host: str, loopback: bool):
    assert _is_loopback(host) is loopback


@FIRST_DIALECT_ONLY
def test_port_in_use_is_one_line(recordings: Recordings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [*mcptape_cmd(), "dashboard", "--db", str(recordings.db), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"mcptape: cannot serve on 127.0.0.1:{port}")
    assert "Traceback" not in r.stderr


def test_bad_database_is_one_line(tmp_path: Path):
    r = subprocess.run(
        [*mcptape_cmd(), "dashboard", "--db", "nosuchdriver://x/y"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("mcptape: database error") and "Traceback" not in r.stderr


class _LiveRecording:
    """A real ``mcptape record`` of a stdio server, kept live: each :meth:`ask` adds frames."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.asked = 0
        self.proc = subprocess.Popen(
            [*mcptape_cmd(), "record", "--db", str(db), "--name", "leaving", "--", *RAWECHO],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def ask(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.asked += 1
        self.proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % self.asked)
        self.proc.stdin.flush()
        assert self.proc.stdout.readline()  # the server's answer came back through the relay
        assert rdb.wait_until(lambda: len(rdb.frames(self.db)) >= 2 * self.asked)

    def close(self) -> None:
        self.proc.communicate(timeout=30)  # closes stdin: the server and the session end


RAWECHO = [sys.executable, "-m", "mcp_proxy.testing.rawecho"]


def _open_stream(base: str, token: str, path: str) -> tuple[socket.socket, bytes]:
    """Open a live stream over a raw socket; return it and the first event (whole)."""
    port = int(base.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    return s, _next_event(s, b"")[0]


def _next_event(s: socket.socket, buf: bytes) -> tuple[bytes, bytes]:
    """The next ``event:`` block of a chunked SSE stream, and what was read after it."""
    while b"event: " not in buf or b"\n\n" not in buf[buf.index(b"event: ") :]:
        chunk = s.recv(65536)
        assert chunk, buf[:500]
        buf += chunk
    at = buf.index(b"event: ")
    end = buf.index(b"\n\n", at) + 2
    return buf[at:end], buf[end:]


def _reset(s: socket.socket) -> None:
    """Close like a browser tab that vanished: an RST, not a polite FIN."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_a_browser_leaving_a_live_page_leaves_no_traceback(tmp_path: Path):
    """Issue 22, item 14: a live page's stream whose browser vanished ends quietly.

    Both live streams (the session list's and a session's timeline) are opened on a session
    that is being recorded, read, and reset; the recording then goes on, so each stream's loop
    has something to write to the connection that is gone. A witness stream (opened after)
    sees every new frame: it polls at the same interval as the abandoned ones, so by the time
    it has seen two more rounds of frames, they have had their turns too.
    """
    db = tmp_path / "live.db"
    rec = _LiveRecording(db)
    try:
        rec.ask()
        (sid,) = [s["id"] for s in rdb.sessions(db)]
        proc = subprocess.Popen(
            [*mcptape_cmd(), "dashboard", "--db", str(db), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("mcptape dashboard: http://127.0.0.1:"), line
            base, token = line.split(": ", 1)[1].strip().split("/?token=")
            for path in (f"/sessions/live?ids={sid}&newest=1", f"/sessions/{sid}/live?after=0"):
                s, first = _open_stream(base, token, path)
                assert first.startswith((b"event: sessions", b"event: frames")), first
                _reset(s)
            witness, _ = _open_stream(base, token, f"/sessions/{sid}/live?after=0")
            buf = b""
            for _ in range(3):
                rec.ask()  # new frames: every abandoned loop now has an event to write
                event, buf = _next_event(witness, buf)
                assert event.startswith(b"event: frames"), event
            _reset(witness)
            req = urllib.request.Request(
                base + "/sessions.json", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(req, timeout=20) as r:  # the dashboard still answers
                assert [s["id"] for s in json.loads(r.read())["sessions"]] == [sid]
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
    finally:
        rec.close()
    assert proc.returncode in (0, -15), err
    assert "Traceback" not in err and "Error handling request" not in err, err
