"""Small operating-system and runtime helpers that several rooms need: one home each.

Stdlib only and importing nothing of the project, so the relays (which may import only the core)
and the test harness can use them without pulling anything else in.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import threading
from collections.abc import Iterator

__all__ = ["gc_paused", "stop_process", "write_all"]


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


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building or streaming many objects that make no cycles, and
    restore it exactly once.

    The analysis allocates ~5 objects per frame and frees none of them until it returns, and
    ``show`` streams row tuples: the cyclic GC would walk them again and again (a third of the
    analysis's time at 100k frames, ~3% of ``show``'s) and find nothing. Counted and
    thread-safe, because the dashboard runs analyses in threads at once.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()
