"""What the relay holds for the recorder process while the pipe is full: bounded, in order.

Up to ``memory_limit`` bytes stay in memory; past that, records spill to an anonymous temporary
file (deleted when closed), and past ``disk_limit`` they are refused — the caller counts their
frames as lost and tells the recorder, so a burst the recorder cannot follow never grows the
relay's memory without bound, and never disappears silently. Order is kept: once records spill,
every later one goes to the file until the file is drained.

Not thread-safe: the client calls it under its own lock.
"""

from __future__ import annotations

from collections import deque
from typing import IO

from mcp_proxy.limits import BACKLOG_READ as READ_SIZE


class Backlog:
    def __init__(self, *, memory_limit: int = 16 << 20, disk_limit: int = 1 << 30) -> None:
        self.memory_limit = memory_limit
        self.disk_limit = disk_limit
        self._mem: deque[bytes | memoryview] = deque()
        self._mem_bytes = 0
        self._file: IO[bytes] | None = None
        self._read = 0  # next byte of the spill file to hand out
        self._written = 0  # end of the spill file
        self.spilled_total = 0

    def __bool__(self) -> bool:
        return bool(self._mem) or self._read < self._written

    @property
    def nbytes(self) -> int:
        return self._mem_bytes + (self._written - self._read)

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    def append(self, data: bytes | memoryview, *, force: bool = False) -> bool:
        """Queue ``data`` after everything queued; False (nothing queued) past the disk limit.

        ``force`` queues it anyway: for the small records that carry no frames (a session's
        end, a count of lost frames), which must not be lost to a burst of traffic.
        """
        if self._file is None and self._mem_bytes + len(data) <= self.memory_limit:
            self._mem.append(data)
            self._mem_bytes += len(data)
            return True
        if not force and self._written - self._read + len(data) > self.disk_limit:
            return False
        if self._file is None:
            import tempfile  # only a burst the recorder cannot follow gets here

            self._file = tempfile.TemporaryFile(prefix="mcptape-backlog-")
            self._read = self._written = 0
        self._file.seek(self._written)
        self._file.write(data)
        self._written += len(data)
        self.spilled_total += len(data)
        return True

    def peek(self) -> bytes | memoryview:
        """The next bytes to write (memory first, then the file); empty when nothing is queued."""
        if self._mem:
            return self._mem[0]
        if self._file is None or self._read >= self._written:
            return b""
        self._file.seek(self._read)
        return self._file.read(min(READ_SIZE, self._written - self._read))

    def consume(self, n: int) -> None:
        """``n`` bytes of what :meth:`peek` returned went out."""
        if self._mem:
            head = self._mem[0]
            self._mem_bytes -= n
            if n >= len(head):
                self._mem.popleft()
            else:
                self._mem[0] = head[n:]
            return
        self._read += n
        if self._read >= self._written and self._file is not None:
            self._file.close()  # drained: back to memory for what comes next
            self._file = None
            self._read = self._written = 0

    def clear(self) -> None:
        self._mem.clear()
        self._mem_bytes = 0
        if self._file is not None:
            self._file.close()
            self._file = None
        self._read = self._written = 0
