"""``mcptape dashboard`` as a user runs it: the printed URL works, mistakes are one line."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mcp_proxy.commands.dashboard import _is_loopback
from tests.conftest import mcptape_cmd
from tests.dashboard.browser import dashboard_process
from tests.dashboard.conftest import FIRST_DIALECT_ONLY, Recordings

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
