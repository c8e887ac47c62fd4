"""The shared OS and address helpers (mcp_proxy.osutil, mcp_proxy.netutil)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mcp_proxy.netutil import is_loopback
from mcp_proxy.osutil import stop_process, write_all


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        (" 127.0.0.1 ", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


def test_write_all_writes_everything_through_a_small_pipe() -> None:
    """A 1 MiB write through a pipe (64 KiB buffer) arrives whole: partial writes are resumed."""
    r, w = os.pipe()
    data = os.urandom(1 << 20)
    got = bytearray()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
        stdin=r,
        stdout=subprocess.PIPE,
    )
    os.close(r)
    assert write_all(w, data) is True
    os.close(w)
    assert child.stdout is not None
    got += child.stdout.read()
    child.wait(10)
    assert bytes(got) == data


def test_write_all_to_a_closed_reader() -> None:
    r, w = os.pipe()
    os.close(r)
    try:
        assert write_all(w, b"x" * 10, quiet_on_epipe=True) is False
        with pytest.raises(BrokenPipeError):
            write_all(w, b"x")
    finally:
        os.close(w)


def test_stop_process_escalates_to_sigkill() -> None:
    """A child that ignores SIGTERM is killed after the timeout, and reaped."""
    # lives until killed: blocks on a signal, and SIGTERM is ignored
    code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); signal.pause()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    start = time.monotonic()
    assert stop_process(proc, timeout=0.5) == -9
    assert time.monotonic() - start < 5


def test_stop_process_group_stops_grandchildren() -> None:
    code = (
        "import signal, subprocess, sys; "
        # both live until killed: each blocks until a signal ends it
        "c = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()']); "
        "print(c.pid, flush=True); signal.pause()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    stop_process(proc, timeout=2, group=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        # a zombie still answers kill(0): it is reaped by init; check its state
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the grandchild outlived its group's stop")
