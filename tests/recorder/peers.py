"""Raw stdio peers for the recorder's fault tests (stdlib only; run with ``python -m``).

``echo``: writes back every line it reads, byte for byte, until stdin ends (no parsing, so
hostile lines cannot hurt it). ``stubborn``: ignores SIGTERM, SIGHUP, SIGINT and stdin EOF,
prints its pid (and, with ``--child``, the pid of a grandchild just as stubborn), then sleeps.
``crash``: echoes lines until it reads ``crash``, then exits with status 3 at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading


def echo() -> int:
    for line in iter(sys.stdin.buffer.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return 0


def crash() -> int:
    for line in iter(sys.stdin.buffer.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
        if b"crash" in line:
            os._exit(3)
    return 0


def stubborn(child: bool) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    pids = [os.getpid()]
    if child:
        grandchild = subprocess.Popen(
            [sys.executable, "-m", "tests.recorder.peers", "stubborn"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert grandchild.stdout is not None
        pids.append(int(grandchild.stdout.readline()))
    sys.stdout.write(" ".join(map(str, pids)) + "\n")
    sys.stdout.flush()
    threading.Event().wait()  # stdin EOF changes nothing; only SIGKILL ends it


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "echo":
        sys.exit(echo())
    if mode == "crash":
        sys.exit(crash())
    sys.exit(stubborn("--child" in sys.argv))
