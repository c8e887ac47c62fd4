"""Read a child's stream in a thread, so a test can wait for what it says (instead of sleeping
for as long as saying it usually takes)."""

from __future__ import annotations

import threading
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
