"""The sessions that ended, handed to a thread of the recorder process one at a time.

What is done with an ended session (its findings analysed and stored) is not the recorder's:
the recorder process's entry (:mod:`mcp_proxy.recorder_process`) passes it in as a callable, so
this room imports neither the analysis nor anything above the store. The work runs on a thread
of its own, so the loop that reads the relay's pipe is never held up by it; one session at a
time, at most :data:`~mcp_proxy.limits.SETTLE_QUEUE` waiting, and at the end the process waits
at most :data:`~mcp_proxy.limits.SETTLE_PATIENCE` for it. A failure costs that session only
(its first ``check`` analyses it instead), never the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from mcp_proxy.limits import SETTLE_PATIENCE, SETTLE_QUEUE

log = logging.getLogger(__name__)

__all__ = ["Settler"]


class Settler:
    """A queue of ended session ids and the daemon thread that settles them in order."""

    def __init__(self, url: str, work: Callable[[str, str], object]) -> None:
        self.url = url
        self.work = work
        self.queue: deque[str] = deque()
        self.dropped = 0
        self.failed = 0
        self.done = 0
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread: threading.Thread | None = None

    def hand(self, session_ids: Iterable[str]) -> None:
        """Queue these sessions (each once; past :data:`SETTLE_QUEUE` they are left out)."""
        with self._cond:
            for sid in session_ids:
                if sid in self.queue:
                    continue
                if len(self.queue) >= SETTLE_QUEUE:
                    self.dropped += 1
                    continue
                self.queue.append(sid)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="mcptape-settle", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def finish(self, patience: float = SETTLE_PATIENCE) -> int:
        """Wait for the queue to drain (at most ``patience`` s); how many were not settled."""
        deadline = time.monotonic() + patience
        with self._cond:
            self._closing = True
            self._cond.notify()
            while self.queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return len(self.queue) + (1 if self._busy else 0) + self.dropped

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self.queue and not self._closing:
                    self._cond.wait()
                if not self.queue:
                    return
                sid = self.queue.popleft()
                self._busy = True
            try:
                self.work(self.url, sid)
                self.done += 1
            except Exception as exc:  # a session's analysis must never cost the recording
                self.failed += 1
                log.warning("could not store the findings of %s: %s", sid, exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
