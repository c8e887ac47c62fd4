"""One way to run an mcptape child that announces its address on stderr, and to stop it.

``replay --upstream`` runs ``mcptape record --upstream URL --port 0`` and the pytest plugin runs
``mcptape mock --port 0``; both must read the announced URL off stderr (the port is chosen by the
OS), keep draining stderr so the child never blocks on a full pipe, and stop the child by its
pid — SIGINT first, because the relay drains its recording on it, then terminate, then kill.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from mcp_proxy.errors import UserError


class AnnouncedChild:
    """A child process whose first stderr line matching ``find`` carries what the caller needs."""

    def __init__(self, argv: Sequence[str], find: Callable[[str], str | None], what: str) -> None:
        self.argv = list(argv)
        self.find = find
        self.what = what
        self.proc: subprocess.Popen[bytes] | None = None
        #: The child's environment (None: this process's).
        self.env: dict[str, str] | None = None
        self.lines: list[str] = []
        self.found: str | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float) -> str:
        """Start the child; what ``find`` read off its stderr (a UserError if it never came)."""
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=self.env,
            )
        except OSError as exc:
            raise UserError(f"{self.what} could not start: {exc}") from exc
        self._thread = threading.Thread(target=self._drain, name="mcptape-child", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if time.monotonic() > deadline or (
                self.proc.poll() is not None and not self._thread.is_alive()
            ):
                break
        if self.found is None:
            self.stop()
            tail = next((ln for ln in reversed(self.lines) if ln.strip()), "no output")
            raise UserError(f"{self.what} did not start: {tail}")
        return self.found

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.lines.append(line)
            if self.found is None:
                self.found = self.find(line)
                if self.found is not None:
                    self._ready.set()
        self._ready.set()

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGINT, then terminate, then kill — by pid; the child's exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        if self._thread is not None:
            self._thread.join(5)
        if proc.stderr is not None:
            proc.stderr.close()
        return proc.returncode


__all__ = ["AnnouncedChild"]
