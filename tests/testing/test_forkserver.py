"""The suite's fork server for test servers (``tests/helpers/forkserver.py``) stands in for a
server's process: the bytes on its pipes, its exit status, the signals a relay sends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_proxy.testing.process import SERVER_PYTHON_ENV
from tests.helpers.db import wait_until
from tests.helpers.forkserver import write_launcher

SCRIPT = """\
import os, signal, sys
mode = sys.argv[1]
if mode == "echo":
    for line in sys.stdin:
        sys.stdout.write(line.upper())
        sys.stdout.flush()
    sys.stderr.write(f"cwd={os.getcwd()} env={os.environ.get('FORK_TEST', '-')}\\n")
elif mode == "exit":
    sys.exit(int(sys.argv[2]))
elif mode == "kill":
    os.kill(os.getpid(), signal.SIGABRT)
elif mode == "wait":
    open(sys.argv[2], "w").write(str(os.getpid()))
    sys.stdin.read()  # until the test's end of the pipe closes
"""


@pytest.fixture
def launcher() -> str:
    """The launcher this worker's session fixture wrote (its zygote is already started)."""
    path = os.environ.get(SERVER_PYTHON_ENV, "")
    assert path and path != sys.executable, "the session fixture names a launcher"
    sock = Path(path).parent / "zygote.sock"  # tests/conftest.py: beside the launcher
    assert wait_until(sock.exists, timeout=60), "the zygote listens once it imported mcp"
    return path


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def test_bytes_cwd_and_environment_are_the_servers(
    launcher: str, script: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [launcher, str(script), "echo"],
        input=b"one\ntwo\n",
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "FORK_TEST": "yes"},
        timeout=30,
    )
    assert done.returncode == 0
    assert done.stdout == b"ONE\nTWO\n"
    assert done.stderr.decode() == f"cwd={tmp_path} env=yes\n"


def test_the_exit_status_is_the_servers(launcher: str, script: Path) -> None:
    assert subprocess.run([launcher, str(script), "exit", "3"], timeout=30).returncode == 3
    killed = subprocess.run([launcher, str(script), "kill"], timeout=30)
    assert killed.returncode == -signal.SIGABRT


def test_a_signal_to_the_launcher_reaches_the_server(
    launcher: str, script: Path, tmp_path: Path
) -> None:
    proc, child = _waiting(launcher, script, tmp_path)
    assert child != proc.pid  # forked by the zygote, not the launcher itself
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM
    assert wait_until(lambda: not _alive(child), timeout=30)


def test_a_launcher_killed_takes_its_server_with_it(
    launcher: str, script: Path, tmp_path: Path
) -> None:
    proc, child = _waiting(launcher, script, tmp_path)
    proc.kill()
    proc.wait(30)
    assert wait_until(lambda: not _alive(child), timeout=30)


def test_without_a_zygote_the_real_interpreter_runs(script: Path, tmp_path: Path) -> None:
    lone = write_launcher(tmp_path / "python", tmp_path / "nobody-listens.sock")
    done = subprocess.run([str(lone), str(script), "exit", "7"], timeout=30)
    assert done.returncode == 7


def _waiting(launcher: str, script: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A server started through the launcher that waits on its stdin, and the pid it runs as."""
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen([launcher, str(script), "wait", str(pid_file)], stdin=subprocess.PIPE)
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=30)
    return proc, int(pid_file.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by the zygote) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_launcher_gone_before_it_read_its_pid_leaves_the_zygote_serving(
    launcher: str, script: Path, tmp_path: Path
) -> None:
    """A server killed as soon as it started: the zygote's end of that connection is reset,
    which once took the zygote down (every later server then started the slow way)."""
    import array
    import json
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(Path(launcher).parent / "zygote.sock"))
    body = {"argv": [str(script), "exit", "0"], "env": dict(os.environ), "cwd": str(tmp_path)}
    with open(os.devnull, "rb+") as null:
        fds = array.array("i", [null.fileno()] * 3)
        sock.sendmsg(
            [json.dumps(body).encode() + b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
        )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # unread "pid N": a reset, as when a launcher is killed at once
    proc, child = _waiting(launcher, script, tmp_path)
    try:
        assert child != proc.pid  # still forked by the zygote
    finally:
        proc.kill()
        proc.wait(30)


def test_the_zygote_leaves_with_a_worker_killed_outright(tmp_path: Path) -> None:
    """A worker killed (SIGKILL) whose pipe to the zygote lives on in another of its children:
    the zygote once stayed, with its servers, until that child ended."""
    keeper = tmp_path / "keeper.pid"
    zygote_pid = tmp_path / "zygote.pid"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "z = subprocess.Popen([sys.executable, '-m', 'tests.helpers.forkserver', sys.argv[1]],"
            " stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n"
            "k = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'],"
            " pass_fds=(z.stdin.fileno(),))\n"
            "open(sys.argv[2], 'w').write(str(z.pid))\n"
            "open(sys.argv[3], 'w').write(str(k.pid))\n"
            "z.stdin.flush(); sys.stdin.read()\n",
            str(tmp_path / "z.sock"),
            str(zygote_pid),
            str(keeper),
        ],
        stdin=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert wait_until(lambda: keeper.exists() and keeper.read_text() != "", timeout=30)
        assert wait_until((tmp_path / "z.sock").exists, timeout=60), "the zygote listens"
        zygote = int(zygote_pid.read_text())
        worker.kill()
        worker.wait(30)
        assert wait_until(lambda: not _alive(zygote), timeout=30), "the zygote left with its worker"
    finally:
        for pid_file in (keeper, zygote_pid):
            if pid_file.exists() and pid_file.read_text():
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
