"""The recorder in its own process: the relay never shares a GIL with the database writer.

A relay thread that has just read from a pipe must take the GIL back before it can write the
bytes on; when the writer thread of an in-process :class:`~mcp_proxy.recorder.Recorder` is busy
classifying and inserting a batch, that costs the relay up to a switch interval on every hop
(measured: p99 added latency above 1 ms). So ``mcptape record`` runs the writer as a child
process and hands it what it relayed through a pipe:

- :class:`RecorderClient` has the producer API of :class:`~mcp_proxy.recorder.Recorder`
  (``new_session``, ``put_chunk``, ``put``, ``end_stream``, ``new_exchange`` …). Each call is one
  length-prefixed record written with one non-blocking ``writev``; when the pipe is full the
  record goes to an in-memory backlog that a feeder thread writes out, so a relay thread never
  blocks on the recorder (and records stay in order).
- The worker (``python -m mcp_proxy.recorder_proc URL``) reads records and feeds an in-process
  ``Recorder``, whose writer thread batches them into transactions.
- The worker runs in its own session: a host that kills our process group (the SDK client does
  on shutdown) does not kill it. When the relay exits — even by ``kill -9`` — the worker reads
  EOF, writes everything it was given, and exits. :meth:`RecorderClient.close` waits for that,
  so when ``mcptape record`` exits its recording is complete.

Record layout: ``<B type><I length>`` then the payload. ``CHUNK``: ``<32s sid><B dir><B chan>
<q mono_ns><d wall>`` + bytes. ``CALL``: a pickled ``(method, args, kwargs)`` — pickle is only
ever read from our own relay through an anonymous pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from typing import Any

from mcp_proxy.frames import Channel, Direction, Frame

HEADER = struct.Struct("<BI")
CHUNK_META = struct.Struct("<32sBBqd")
T_CHUNK = 1
T_CALL = 2
DIRECTIONS = (Direction.C2S, Direction.S2C)
CHANNELS = (Channel.STDIO, Channel.STDERR, Channel.HTTP, Channel.SSE)
_DIR_CODE = {d: i for i, d in enumerate(DIRECTIONS)}
_CHAN_CODE = {c: i for i, c in enumerate(CHANNELS)}
F_SETPIPE_SZ = 1031  # Linux fcntl: grow the pipe so bursts rarely touch the backlog
PIPE_SIZE = 1 << 20


class RecorderClient:
    """The relay's side of an out-of-process recorder (same producer API as ``Recorder``)."""

    def __init__(self, url: str, *, python: str | None = None) -> None:
        self.url = url
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._lock = threading.Lock()
        self._backlog: deque[bytes] = deque()
        self._backlog_bytes = 0
        self._wake = threading.Condition(self._lock)
        self._feeder: threading.Thread | None = None
        self._closing = False
        self._dead = False
        self._lost_records = 0
        self._local_ids = itertools.count(1)
        self.max_backlog_bytes = 1 << 30

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [self.python, "-m", "mcp_proxy.recorder_proc", self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=None,  # the worker's warnings go where ours go (the host's log)
            start_new_session=True,
            close_fds=True,
            env=env,
        )
        assert self.proc.stdin is not None
        self._fd = os.dup(self.proc.stdin.fileno())
        self.proc.stdin.close()
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._fd, F_SETPIPE_SZ, PIPE_SIZE)
        os.set_blocking(self._fd, False)
        self._feeder = threading.Thread(target=self._feed, name="mcptape-feeder", daemon=True)
        self._feeder.start()

    def close(self, timeout: float | None = 60.0) -> None:
        """Hand over everything, close the pipe, and wait until the worker has written it."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._feeder is not None:
            self._feeder.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(
                    "mcptape: the recorder is still writing; it finishes in the background",
                    file=sys.stderr,
                )
        if self._lost_records:
            print(
                f"mcptape: recording gap: {self._lost_records} record(s) could not be handed to"
                " the recorder process",
                file=sys.stderr,
            )

    # ------------------------------------------------------------------ sending
    def _send(self, parts: list[bytes]) -> None:
        """Write one record without ever blocking the caller; keep order via the backlog."""
        with self._lock:
            if self._dead:
                self._lost_records += 1
                return
            if not self._backlog:
                total = sum(len(p) for p in parts)
                try:
                    n = os.writev(self._fd, parts)
                except BlockingIOError:
                    n = 0
                except OSError:
                    self._dead = True
                    self._lost_records += 1
                    return
                if n == total:
                    return
                rest = b"".join(parts)[n:]
            else:
                rest = b"".join(parts)
            if self._backlog_bytes + len(rest) > self.max_backlog_bytes:
                self._lost_records += 1  # counted and reported; memory stays bounded
                return
            self._backlog.append(rest)
            self._backlog_bytes += len(rest)
            self._wake.notify()

    def _feed(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        while True:
            with self._lock:
                while not self._backlog and not self._closing:
                    self._wake.wait()
                if not self._backlog and self._closing:
                    return
                if self._dead:
                    self._backlog.clear()
                    return
                data = self._backlog[0]
                try:
                    n = os.write(self._fd, data)
                except BlockingIOError:
                    n = 0
                except OSError:
                    self._dead = True
                    self._lost_records += len(self._backlog)
                    self._backlog.clear()
                    return
                if n:
                    self._backlog_bytes -= n
                    if n == len(data):
                        self._backlog.popleft()
                    else:
                        self._backlog[0] = data[n:]
                    continue
            poller.poll(100)  # wait (without the lock) until the pipe has room

    def _call(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        # Positional-only: the calls' own keyword arguments include ``method`` (an HTTP
        # exchange's column), which must not collide with the name of the call.
        payload = pickle.dumps((name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        self._send([HEADER.pack(T_CALL, len(payload)), payload])

    # ------------------------------------------------------------------ producer API
    def put_chunk(
        self,
        session_id: str,
        direction: Direction,
        channel: Channel,
        data: bytes,
        mono_ns: int | None = None,
        wall: float | None = None,
    ) -> None:
        meta = CHUNK_META.pack(
            session_id.encode("ascii"),
            _DIR_CODE[direction],
            _CHAN_CODE[channel],
            mono_ns if mono_ns is not None else time.monotonic_ns(),
            wall if wall is not None else time.time(),
        )
        self._send([HEADER.pack(T_CHUNK, len(meta) + len(data)), meta, data])

    def new_session(self, *, transport: str, **fields: Any) -> str:
        sid = uuid.uuid4().hex
        fields.setdefault("pid", os.getpid())
        fields.setdefault("started_at", time.time())  # the relay's clock, not the worker's
        self._call("new_session", transport=transport, session_id=sid, **fields)
        return sid

    def put(self, session_id: str, frame: Frame) -> None:
        self._call("put", session_id, frame)

    def end_stream(self, session_id: str, direction: Direction, channel: Channel) -> None:
        self._call("end_stream", session_id, direction, channel)

    def new_exchange(self, session_id: str, **fields: Any) -> int:
        local = next(self._local_ids)
        self._call("new_exchange", session_id, local_id=local, **fields)
        return local

    def update_exchange(self, local_id: int, **fields: Any) -> None:
        self._call("update_exchange", local_id, **fields)

    def record_exchange(self, session_id: str, *, frames: list[Frame], **fields: Any) -> int:
        """A finished exchange with its frames as one record (see Recorder.record_exchange)."""
        local = next(self._local_ids)
        self._call("record_exchange", session_id, local_id=local, frames=frames, **fields)
        return local

    def update_session(self, session_id: str, **fields: Any) -> None:
        self._call("update_session", session_id, **fields)

    def end_session(self, session_id: str, **fields: Any) -> None:
        fields.setdefault("ended_at", time.time())
        self._call("end_session", session_id, **fields)

    def add_finding(self, session_id: str, **fields: Any) -> None:
        self._call("add_finding", session_id, **fields)


_ALLOWED_CALLS = frozenset(
    {
        "new_session",
        "put",
        "end_stream",
        "new_exchange",
        "update_exchange",
        "record_exchange",
        "update_session",
        "end_session",
        "add_finding",
    }
)


def serve(url: str, fd: int, *, flush_interval: float = 0.05) -> int:
    """The worker loop: read records until EOF, write them in batches, drain, exit.

    Single-threaded on purpose: reading the pipe and writing batches take turns, so the two
    never compete for the GIL, and while a batch is written the pipe (then the relay's backlog)
    holds what arrives — compact chunks rather than parsed rows.
    """
    from mcp_proxy.recorder import Recorder

    recorder = Recorder(url, flush_interval=flush_interval)
    engine = recorder.open_engine()
    buf = bytearray()
    hsize = HEADER.size
    msize = CHUNK_META.size
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    os.set_blocking(fd, False)
    eof = False
    busy = False
    try:
        while not eof:
            if not busy:
                # Idle: block until something arrives, then let a batch gather for one flush
                # interval instead of waking for every record (a wake-up per frame costs the
                # host and server CPU time on a small machine).
                poller.poll()
                time.sleep(flush_interval)
            got = 0
            while got < (8 << 20):
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                if not data:
                    eof = True
                    break
                got += len(data)
                buf += data
                pos = 0
                n = len(buf)
                while n - pos >= hsize:
                    rtype, length = HEADER.unpack_from(buf, pos)
                    end = pos + hsize + length
                    if end > n:
                        break
                    start = pos + hsize
                    if rtype == T_CHUNK:
                        sid, d, c, mono, wall = CHUNK_META.unpack_from(buf, start)
                        recorder.put_chunk(
                            sid.decode("ascii"),
                            DIRECTIONS[d],
                            CHANNELS[c],
                            bytes(buf[start + msize : end]),
                            mono,
                            wall,
                        )
                    elif rtype == T_CALL:
                        method, args, kwargs = pickle.loads(buf[start:end])
                        if method in _ALLOWED_CALLS:
                            getattr(recorder, method)(*args, **kwargs)
                    pos = end
                del buf[:pos]
                if recorder.queued_bytes > (1 << 20):
                    recorder.write_pending(engine)  # bounded memory while a burst streams in
            recorder.write_pending(engine)
            busy = got >= (256 << 10)
    finally:
        recorder.write_pending(engine)
        stats = recorder.finish(engine)
    if stats.frames_lost:
        print(
            f"mcptape: {stats.frames_lost} frame(s) could not be recorded"
            f" ({stats.last_error or 'recorder fell behind'})",
            file=sys.stderr,
        )
    return 0


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m mcp_proxy.recorder_proc DATABASE_URL", file=sys.stderr)
        return 2
    import signal

    # The relay decides when recording ends (by closing the pipe); signals meant for the
    # server or the relay must not cut the drain short.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return serve(sys.argv[1], sys.stdin.fileno())


if __name__ == "__main__":
    sys.exit(main())
