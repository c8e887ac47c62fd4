"""Start a relay subprocess and wait for its ``mcptape: relaying URL`` line (one way, shared).

Used by ``tests/relay/conftest.py`` (``mcptape record --upstream``) and the fault rig
(``tests/faults/http_rig.py``, the relay with a rules file): both read the relay's stderr on a
thread (kept for the test's assertions), take the local URL from the start line, and stop the
relay with SIGINT (it drains its recording) at the end, killing it only if it hangs.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

__all__ = ["relay_process"]


@contextlib.contextmanager
def relay_process(
    argv: list[str], *, timeout: float = 30.0, stop_timeout: float = 30.0
) -> Iterator[tuple[subprocess.Popen[bytes], str, list[str]]]:
    """``(process, local URL, stderr lines so far)`` of a relay started from ``argv``."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    lines: list[str] = []
    found: list[str] = []
    event = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if not event.is_set() and line.startswith("mcptape: relaying "):
                found.append(line.split()[2])
                event.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while not event.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            raise RuntimeError("relay did not start:\n" + "\n".join(lines))
    try:
        yield proc, found[0], lines
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        t.join(5)
