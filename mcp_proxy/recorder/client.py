"""The recorder in its own process: the relay never shares a GIL with the database writer.

A relay thread that has just read from a pipe must take the GIL back before it can write the
bytes on; when a writer thread in the same process is busy classifying and inserting a batch,
that costs the relay up to a switch interval on every hop (measured: p99 added latency above
1 ms). So ``mcptape record`` runs the recorder as a child process
(:mod:`mcp_proxy.recorder.worker`) and hands it what it relayed through a pipe
(:mod:`mcp_proxy.recorder.wire`):

- :class:`RecorderClient` is a :class:`~mcp_proxy.recorder.contract.Producer`: each call is one
  record written with one non-blocking ``writev``; when the pipe is full the record goes to an
  in-memory backlog that a feeder thread writes out, so a relay thread never blocks on the
  recorder (and records stay in order).
- The worker runs in its own session: a host that kills our process group (the SDK client does
  on shutdown) does not kill it. When the relay exits — even by ``kill -9`` — the worker reads
  EOF, writes everything it was given, and exits. :meth:`RecorderClient.close` waits for that,
  so when ``mcptape record`` exits its recording is complete.
- If the worker dies anyway, the client notices at once (a write fails with a closed pipe, or
  the thread waiting on the child sees it exit), says so on stderr once, and starts a new worker
  that takes over the sessions (:class:`~mcp_proxy.recorder.contract.Resume`): it counts what
  the dead one had not written as a gap, from the number of frames handed over.
- After ``MAX_RESTARTS`` replacements died too, nothing is handed over any more, but every frame
  relayed is still counted; :meth:`RecorderClient.close` then starts a last worker that records
  that loss and the sessions' end (its last line on stderr gives the session's whole loss).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.limits import MAX_RESTARTS, PIPE_SIZE
from mcp_proxy.recorder.backlog import Backlog
from mcp_proxy.recorder.contract import (
    Chunk,
    FrameItem,
    HttpExchange,
    Item,
    LostFrames,
    Producer,
    Resume,
    SessionStart,
    SessionUpdate,
)
from mcp_proxy.recorder.wire import (
    CHAN_CODE,
    CHUNK_META,
    DIR_CODE,
    HEADER,
    T_CHUNK,
    T_HTTP,
    T_ITEM,
    WORKER_MODULE,
    Bye,
    Watch,
)

if TYPE_CHECKING:
    from mcp_proxy.recorder.httpraw import RawHttp

F_SETPIPE_SZ = 1031  # Linux fcntl: grow the pipe so bursts rarely touch the backlog


def _say(msg: str) -> None:
    print(f"mcptape: {msg}", file=sys.stderr, flush=True)


def describe_exit(status: int | None) -> str:
    """``exit status 3`` / ``killed by signal 9 (SIGKILL)`` for a child's return code."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "?"
        return f"killed by signal {-status} ({name})"
    return f"exit status {status}"


def _grow_pipe(fd: int) -> None:
    try:
        import fcntl  # POSIX only: imported where it is used so Windows can import this module
    except ImportError:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)


class RecorderClient(Producer):
    """The relay's side of an out-of-process recorder (the producer API of the contract)."""

    def __init__(
        self,
        url: str,
        *,
        python: str | None = None,
        env: dict[str, str] | None = None,
        backlog_memory: int = 16 << 20,
        backlog_disk: int = 1 << 30,
    ) -> None:
        super().__init__()
        self.url = url
        self.python = python or sys.executable
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._gen = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._backlog = Backlog(memory_limit=backlog_memory, disk_limit=backlog_disk)
        #: Frames refused because the backlog was full, by session: told to the recorder as a
        #: gap (a :class:`LostFrames` item) as soon as there is room again.
        self._refused: dict[str, int] = {}
        self._feeder: threading.Thread | None = None
        self._closing = False
        self._dead = False
        self._lost_records = 0
        #: Frames in those records (handed to no worker: counted in ``_sent`` all the same, so
        #: the last recorder process records them as a gap).
        self._lost_frames = 0
        #: Recorder processes that died while the relay ran (or while finishing).
        self.deaths = 0
        #: Frames handed over per session, and the sessions' first rows: what a new worker
        #: needs to take over after a crash.
        self._sent: dict[str, int] = {}
        self._rows: dict[str, dict[str, Any]] = {}
        self._ends: dict[str, dict[str, Any]] = {}
        self._watch: int | None = None
        self.restarts = 0
        #: How the last worker that died ended (None while none did).
        self.worker_death: str | None = None

    @classmethod
    def for_db(cls, db: str | None, **options: Any) -> RecorderClient:
        """A client recording into ``db`` — a path, a URL, or None for ``MCPTAPE_DB`` / the
        default location — resolved as every command resolves ``--db``. Producers that take the
        user's setting themselves (the mitmproxy addon's ``mcptape_db`` option) use this, so
        where recordings go stays the store's rule, not a copy of it."""
        from mcp_proxy.store.engine import resolve_url

        return cls(resolve_url(db), **options)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._lock:
            self._spawn_locked()
        self._feeder = threading.Thread(target=self._feed, name="mcptape-feeder", daemon=True)
        self._feeder.start()

    def _spawn_locked(self) -> None:
        env = dict(os.environ) if self.env is None else {**os.environ, **self.env}
        proc = subprocess.Popen(
            [self.python, "-m", WORKER_MODULE, self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=None,  # the worker's warnings go where ours go (the host's log)
            start_new_session=True,
            close_fds=True,
            env=env,
        )
        assert proc.stdin is not None
        fd = os.dup(proc.stdin.fileno())
        proc.stdin.close()
        _grow_pipe(fd)
        os.set_blocking(fd, False)
        self.proc, self._fd = proc, fd
        self._gen += 1
        watcher = threading.Thread(
            target=self._watch_worker, args=(proc, self._gen), name="mcptape-watch", daemon=True
        )
        watcher.start()

    def _watch_worker(self, proc: subprocess.Popen[bytes], gen: int) -> None:
        """Notice a worker that exits while the relay still runs (not after :meth:`close`)."""
        status = proc.wait()
        with self._lock:
            if self._closing or gen != self._gen or self._dead:
                return
            self._worker_died_locked(describe_exit(status))

    def _worker_died_locked(self, how: str) -> None:
        """Say so once, drop what was bound for the dead worker, start a new one."""
        self.worker_death = how
        self.deaths += 1
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        self._backlog.clear()  # partial records; their frames are counted in _sent
        if self._closing or self.restarts >= MAX_RESTARTS:
            self._dead = True
            if not self._closing:
                _say(
                    f"the recorder process died ({how}), {self.deaths} times; recording stopped,"
                    " traffic is still relayed (what is not recorded is counted, and recorded"
                    " as a gap when the relay ends)"
                )
            self._wake.notify()
            return
        if self.restarts == 0:
            _say(
                f"the recorder process died ({how}); a new one continues the recording and"
                " counts what was lost as a recording gap"
            )
        self.restarts += 1
        try:
            self._spawn_locked()
        except OSError as exc:
            self._dead = True
            _say(f"cannot restart the recorder ({exc}); recording stopped")
            return
        first = [self._pack(self._resume(how))]
        if self._watch is not None:
            first.append(self._pack(Watch(self._watch)))
        for record in first:
            self._backlog.append(record, force=True)
        self._wake.notify()

    def _resume(self, how: str) -> Resume:
        """What a new worker needs to take over: each session's row, count and end, if any."""
        if self.deaths > 1:
            reason = f"the recorder process died {self.deaths} times, the last {how}"
        else:
            reason = f"the recorder process died ({how})"
        return Resume(
            {
                sid: {"row": row, "sent": self._sent.get(sid, 0), "end": self._ends.get(sid)}
                for sid, row in self._rows.items()
            },
            reason=reason,
        )

    def close(self, timeout: float | None = 60.0) -> None:
        """Hand over everything, close the pipe, and wait until the worker has written it."""
        if self.proc is None:  # never started: nothing to hand over
            return
        if not self._dead:
            self.submit(Bye())  # type: ignore[arg-type]
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._feeder is not None:
            self._feeder.join(timeout)
        with self._lock:
            with contextlib.suppress(OSError):
                if self._fd >= 0:
                    os.close(self._fd)
            self._fd = -1
            proc = self.proc
        recovered = False
        if proc is not None:
            try:
                status = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _say("the recorder is still writing; it finishes in the background")
            else:
                if self._dead:
                    # Recording stopped (every replacement died, or one died while finishing):
                    # a last recorder process records what was not recorded, and the end.
                    _say(
                        f"recording stopped after the recorder process died {self.deaths}"
                        " time(s); a last one records what was not recorded as a recording gap"
                    )
                    recovered = self._recover(self.worker_death or describe_exit(status), timeout)
                elif status != 0:
                    self.deaths += 1
                    _say(
                        f"the recorder process died ({describe_exit(status)}) while finishing;"
                        " a new one records what was lost as a recording gap"
                    )
                    recovered = self._recover(describe_exit(status), timeout)
        if self._lost_records and not recovered:
            # (When a last recorder process recorded the loss, its line — the last — says it.)
            _say(
                f"recording gap: {self._lost_records} record(s) ({self._lost_frames} frame(s))"
                " could not be handed to the recorder process"
            )

    def _recover(self, how: str, timeout: float | None) -> bool:
        """A new worker records the loss and the sessions' end; True when it did."""
        try:
            with self._lock:
                self._spawn_locked()
                fd = self._fd
            os.set_blocking(fd, True)
            data = self._pack(self._resume(how)) + self._pack(Bye())
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.close(fd)
            assert self.proc is not None
            status = self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _say(f"cannot record the loss ({exc}); the session may stay 'live'")
            return False
        if status != 0:
            _say(f"cannot record the loss (the last recorder process: {describe_exit(status)})")
            return False
        return True

    # ------------------------------------------------------------------ sending
    @staticmethod
    def _pack(item: Any) -> bytes:
        payload = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        return HEADER.pack(T_ITEM, len(payload)) + payload

    def _send(self, parts: list[bytes], sid: str | None = None, frames: int = 0) -> None:
        """Write one record without ever blocking the caller; keep order via the backlog."""
        with self._lock:
            if sid is not None and frames:
                self._sent[sid] = self._sent.get(sid, 0) + frames
            if self._dead or self._fd < 0:  # stopped, or handed over after close()
                self._lost_records += 1
                self._lost_frames += frames
                return
            if not self._backlog and not self._refused:
                total = sum(map(len, parts))
                try:
                    n = os.writev(self._fd, parts)
                except BlockingIOError:
                    n = 0
                except OSError:
                    # The worker is gone (EPIPE): this record went down with it (counted above).
                    self._worker_died_locked("its pipe closed")
                    return
                if n == total:
                    return
                # A view, not a slice: a slice would copy a 64 MiB frame once more.
                rest: bytes | memoryview = memoryview(b"".join(parts))[n:]
            else:
                rest = b"".join(parts)
            self._queue_locked(rest, sid, frames)

    def _queue_locked(self, record: bytes | memoryview, sid: str | None, frames: int) -> None:
        """Into the backlog (memory, then a spill file); past its disk limit, count the loss."""
        if self._refused:
            self._backlog.append(self._pack(self._lost_item()), force=True)
            self._refused = {}
        if not self._backlog.append(record, force=sid is None):
            self._lost_records += 1  # counted, reported; memory and disk stay bounded
            if sid is not None and frames:
                self._refused[sid] = self._refused.get(sid, 0) + frames
            return
        self._wake.notify()

    def _lost_item(self) -> LostFrames:
        return LostFrames(
            dict(self._refused), "the relay's backlog for the recorder was full (disk limit)"
        )

    def _feed(self) -> None:
        """The feeder thread: write the backlog out as the pipe drains."""
        while True:
            with self._lock:
                while not self._backlog and not self._closing and not self._dead:
                    self._wake.wait()
                if self._dead or (not self._backlog and self._closing):
                    self._backlog.clear()
                    return
                fd = self._fd
                data = self._backlog.peek()
                try:
                    n = os.write(fd, data)
                except BlockingIOError:
                    n = 0
                except OSError:
                    self._worker_died_locked("its pipe closed")
                    continue
                if n:
                    self._backlog.consume(n)
                    continue
            _wait_writable(fd)

    # ------------------------------------------------------------------ producer API
    def submit(self, item: Item) -> None:
        sid: str | None = None
        frames = 0
        kind = type(item)
        if kind is SessionStart:
            row = item.row  # type: ignore[union-attr]
            self._rows[row["id"]] = row
        elif kind is FrameItem:
            sid, frames = item.session_id, 1  # type: ignore[union-attr]
        elif kind is HttpExchange:
            sid, frames = item.session_id, len(item.frames)  # type: ignore[union-attr]
        elif kind is Chunk:
            sid, frames = item.session_id, item.data.count(b"\n")  # type: ignore[union-attr]
        elif kind is SessionUpdate and "status" in item.fields:  # type: ignore[union-attr]
            self._ends[item.session_id] = item.fields  # type: ignore[union-attr]
        self._send([self._pack(item)], sid, frames)

    def put_chunk(
        self,
        session_id: str,
        direction: Direction,
        channel: Channel,
        data: bytes,
        mono_ns: int | None = None,
        wall: float | None = None,
    ) -> None:
        """The stdio hot path: a hand-packed record, no pickling."""
        meta = CHUNK_META.pack(
            session_id.encode("ascii"),
            DIR_CODE[direction],
            CHAN_CODE[channel],
            mono_ns if mono_ns is not None else time.monotonic_ns(),
            wall if wall is not None else time.time(),
        )
        self._send(
            [HEADER.pack(T_CHUNK, len(meta) + len(data)), meta, data],
            session_id,
            data.count(b"\n"),
        )

    def record_http(
        self,
        session_id: str,
        *,
        frames: list[Frame],
        raw: RawHttp,
        fields: dict[str, Any],
        meta: dict[str, Any],
    ) -> int:
        """A finished HTTP exchange whose heads the recorder process describes (see
        :mod:`~mcp_proxy.recorder.httpraw`): one record, packed without calling into Python."""
        local = next(self._local_ids)
        payload = _pack_http(session_id, local, fields, meta, raw, frames)
        self._send([HEADER.pack(T_HTTP, len(payload)), payload], session_id, len(frames))
        return local

    def watch_process(self, pgid: int) -> None:
        """The server's process group: the worker ends it if this relay dies without closing."""
        self._watch = pgid
        self._send([self._pack(Watch(pgid))])

    @property
    def stopped(self) -> bool:
        """True once recording has stopped for good (every replacement worker died too)."""
        return self._dead

    @property
    def lost_records(self) -> int:
        """Records that never reached any worker (all workers dead, or the backlog full)."""
        return self._lost_records


def _first_pack_http(*args: Any) -> bytes:
    """:func:`mcp_proxy.recorder.httpraw.pack`, imported on first use (only HTTP relays load
    the module); the first call rebinds :data:`_pack_http` to it, so that later exchanges skip
    an import statement each."""
    global _pack_http
    from mcp_proxy.recorder.httpraw import pack

    _pack_http = pack
    return pack(*args)


_pack_http: Callable[..., bytes] = _first_pack_http


def _wait_writable(fd: int, timeout_ms: int = 100) -> None:
    """Wait (without the lock) until the pipe has room, or a little while."""
    poll = getattr(select, "poll", None)
    if poll is None or fd < 0:  # Windows has no poll() on pipes
        time.sleep(timeout_ms / 1000)
        return
    poller = poll()
    poller.register(fd, select.POLLOUT)
    with contextlib.suppress(OSError, ValueError):
        poller.poll(timeout_ms)
