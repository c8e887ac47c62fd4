"""Read a child's stream in a thread, so a test can wait for what it says (instead of sleeping
for as long as saying it usually takes)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import IO

from tests.helpers.db import wait_until


class StreamWatch:
    """Everything ``stream`` (a child's binary pipe) says, collected by a daemon thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                self._chunks.append(line)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        """Wait until ``needle`` was said; fail with what was said instead if it never is."""
        assert wait_until(lambda: needle in self.text(), timeout), (needle, self.text())
        return self.text()

    def rest(self, timeout: float = 10.0) -> str:
        """All the stream said, once it closed (the child exited)."""
        self._thread.join(timeout)
        return self.text()


#: Seconds a *negative* check gives the system before it looks (nothing was said, nothing was
#: recorded, a process is still alive): what would have happened has by now. The one sleep the
#: suite keeps for that, short, named, in one place.
QUIET = 0.3


async def until(predicate: Callable[[], bool], within: float = 30.0) -> bool:
    """:func:`tests.helpers.db.wait_until` for a test that runs on the event loop it waits for:
    polls without blocking the loop."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True
