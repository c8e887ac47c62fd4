"""Small operating-system helpers that several rooms need: one home each.

Stdlib only and importing nothing of the project, so the relays (which may import only the core)
and the test harness can use them without pulling anything else in.
"""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["stop_process", "write_all"]


def write_all(
    fd: int, data: bytes | bytearray | memoryview, *, quiet_on_epipe: bool = False
) -> bool:
    """Write every byte of ``data`` to the blocking descriptor ``fd``.

    ``os.write`` may write less than asked (pipes, signals); a relay must never drop the rest.
    With ``quiet_on_epipe`` a reader that went away ends the write early and ``False`` is
    returned instead of raising (the caller decides what a closed peer means); otherwise
    ``BrokenPipeError`` propagates.
    """
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            if quiet_on_epipe:
                return False
            raise
        view = view[n:]
    return True


def stop_process(
    proc: subprocess.Popen[bytes], timeout: float = 5.0, *, group: bool = False
) -> int | None:
    """Stop ``proc`` by its pid — SIGTERM, then SIGKILL after ``timeout`` — and reap it.

    With ``group`` the signals go to the process group ``proc`` leads (a child started with
    ``start_new_session=True``), so its own children are stopped too. Returns the exit status.
    """
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, getattr(signal, "SIGKILL", signal.SIGTERM), group)
            proc.wait(timeout)
    return proc.returncode


def _signal(proc: subprocess.Popen[bytes], sig: int, group: bool) -> None:
    try:
        if group and hasattr(os, "killpg"):
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        pass  # it ended between poll() and the signal
