"""The recorder process: ``python -m mcp_proxy.recorder.worker DATABASE``, fed on stdin.

``DATABASE`` is what ``--db`` takes — a URL, a path, or empty for ``MCPTAPE_DB`` / the default
location — resolved here (:func:`~mcp_proxy.store.engine.resolve_url`, in the relay's directory
and environment), so that the relay itself never imports the store.

This thread reads the pipe and builds rows (:class:`~mcp_proxy.recorder.builder.BatchBuilder`,
records go straight into it, no queue in between). On PostgreSQL an insert thread writes the
batch before (``BatchRunner(pipelined=True)``): psycopg lets go of the GIL for the whole round
trip of a ``COPY``, so building batch N+1 runs beside inserting batch N (100k burst: 53–55k →
57–59k frames/s, two alternated pairs). On SQLite the batch is inserted on this thread: there
sqlite3 takes the GIL back for every row it binds, the two threads hand it to each other
thousands of times per batch, and the pipelined worker was slower (8 alternated pairs of
``bench_stdio.py burst``: 75–95k frames/s at 9.6–12.3 µs of CPU per frame pipelined, 79–113k
at 7.6–11.3 µs not). Never more than one batch waits to be written: while it is, the pipe
(then the relay's backlog) holds what arrives — compact chunks rather than parsed rows — and
everything a failed batch means (counted frames, carried sessions) is decided on this thread,
in order.

It survives any input: every record is handled under a guard (a failure costs that record's
frames, counted as a gap, never the process). When the relay vanishes without saying goodbye
(``kill -9``), the worker ends the server's process group the relay told it about, then writes
what it was given and exits. Its last line on stderr, if any, says what was not recorded and why.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mcp_proxy.limits import (
    BATCH_BYTES,
    FINISH_PATIENCE,
    GROUP_GRACE,
    READ_BYTES,
    SETTLE_QUEUE,
)
from mcp_proxy.recorder.contract import ITEM_TYPES, Chunk, SessionUpdate
from mcp_proxy.recorder.httpraw import unpack
from mcp_proxy.recorder.runner import BatchRunner
from mcp_proxy.recorder.settle import Settler
from mcp_proxy.recorder.wire import (
    CHANNELS,
    CHUNK_META,
    DIRECTIONS,
    HEADER,
    T_CHUNK,
    T_HTTP,
    T_ITEM,
    Bye,
    Watch,
)

if TYPE_CHECKING:
    from mcp_proxy.otel.live import LiveExporter

#: Milliseconds an idle worker sleeps at most while the database owes it rows.
OWING_WAKE_MS = 500
#: Seconds a thread waiting for the GIL waits before asking for it (Python's default: 0.005).
SWITCH_INTERVAL = 0.0005


class RecordStream:
    """One worker's loop state: the runner, what the relay said about itself, the read buffer."""

    def __init__(self, runner: BatchRunner) -> None:
        self.runner = runner
        self.buf = bytearray()
        self.watch: int | None = None
        self.bye = False
        self._warned = False
        #: sessions that ended since the last hand-over to the settler (ids, in order; at most
        #: SETTLE_QUEUE: it grows only while the database owes rows)
        self.ended: list[str] = []
        #: sessions that ended while :attr:`ended` was full: not analysed by this process (their
        #: first ``check`` analyses them), counted in the last line
        self.unqueued = 0

    def consume(self) -> None:
        """Handle every complete record in the buffer."""
        buf = self.buf
        hsize, msize = HEADER.size, CHUNK_META.size
        pos, n = 0, len(buf)
        while n - pos >= hsize:
            rtype, length = HEADER.unpack_from(buf, pos)
            end = pos + hsize + length
            if end > n:
                break
            start = pos + hsize
            try:
                if rtype == T_CHUNK:
                    sid, d, c, mono, wall = CHUNK_META.unpack_from(buf, start)
                    data = bytes(buf[start + msize : end])
                    self.runner.feed(
                        Chunk(sid.decode("ascii"), DIRECTIONS[d], CHANNELS[c], data, mono, wall)
                    )
                elif rtype == T_ITEM:
                    self._item(pickle.loads(buf[start:end]))
                elif rtype == T_HTTP:  # an HTTP exchange, described here (recorder/httpraw.py)
                    self.runner.feed(unpack(buf[start:end]))
            except Exception as exc:
                self._bad_record(exc)
            pos = end
        del buf[:pos]

    def _item(self, obj: object) -> None:
        kind = type(obj)
        if kind in ITEM_TYPES:
            self.runner.feed(obj)  # type: ignore[arg-type]
            if kind is SessionUpdate:
                status = obj.fields.get("status")  # type: ignore[attr-defined]
                if status is not None and status != "live":
                    if len(self.ended) < SETTLE_QUEUE:
                        self.ended.append(obj.session_id)  # type: ignore[attr-defined]
                    else:
                        self.unqueued += 1
        elif kind is Watch:
            self.watch = obj.pgid  # type: ignore[attr-defined]
        elif kind is Bye:
            self.bye = True

    def _bad_record(self, exc: BaseException) -> None:
        self.runner.builder.internal_errors += 1
        if not self._warned:
            self._warned = True
            self.runner.warn(f"recorder: a record could not be read ({type(exc).__name__})")


def end_group(pgid: int, grace: float = GROUP_GRACE) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after ``grace`` s."""
    killpg = getattr(os, "killpg", None)
    if killpg is None:
        return
    try:
        killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        killpg(pgid, signal.SIGKILL)


def serve(
    url: str,
    fd: int,
    *,
    flush_interval: float = 0.05,
    max_batch: int = 2000,
    on_ended: Callable[[str, str], object] | None = None,
) -> int:
    """Read records until EOF, write them in batches, drain, exit.

    ``on_ended(url, session_id)`` is called for each session that ended, on a thread of its
    own (:class:`~mcp_proxy.recorder.settle.Settler`), once the session's rows are written:
    while the traffic lets the database catch up, and for the rest after the last batch; the
    process then waits for it (bounded) before it exits."""
    import select

    from mcp_proxy.redact import policy_from_env

    policy = policy_from_env()
    pipelined = not url.startswith("sqlite")  # see the module's docstring: measured per dialect
    runner = BatchRunner(url, redact=policy if policy.enabled else None, pipelined=pipelined)
    live = _live_exporter()
    runner.observe = live.observe if live is not None else None
    # When pipelined, the insert thread gives the GIL back while SQLite works and needs it again to go on; by
    # default it would wait up to 5 ms for the builder to let go (one statement's work is
    # ~1 ms). A shorter interval keeps both cores busy during a burst.
    sys.setswitchinterval(SWITCH_INTERVAL)
    runner.open()
    state = RecordStream(runner)
    builder = runner.builder
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    os.set_blocking(fd, False)
    eof = False
    busy = False
    settler = Settler(url, on_ended) if on_ended is not None else None
    try:
        while not eof:
            if not busy:
                # Idle: block until something arrives, then let a batch gather for one flush
                # interval instead of waking for every record (a wake-up per frame costs the
                # host and server CPU time on a small machine). While the database still owes
                # rows (it could not be opened, or refused a batch), wake now and then to try
                # again without waiting for traffic.
                poller.poll(OWING_WAKE_MS if runner.owes() else None)
                time.sleep(flush_interval)
            got = 0
            while got < (8 << 20):
                try:
                    data = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    break
                if not data:
                    eof = True
                    break
                got += len(data)
                state.buf += data
                state.consume()
                if builder.pending_bytes > BATCH_BYTES or builder.pending_frames >= max_batch:
                    runner.flush()  # bounded memory while a burst streams in
            runner.flush()
            busy = got >= (256 << 10)
            if settler is not None and state.ended and not runner.owes():
                settler.hand(state.ended)  # their rows are written: analyse them now
                state.ended = []
    finally:
        if not state.bye and state.watch is not None:
            end_group(state.watch)  # the relay vanished: its server must not outlive it
        runner.finish(patience=FINISH_PATIENCE)
        if live is not None:
            live.close()
    if settler is not None:
        if state.ended and not runner.owes():
            settler.hand(state.ended)
        late = settler.finish() + state.unqueued
        if late:
            print(
                f"mcptape: {late} ended session(s) not analysed yet; their first `check`"
                " analyses them",
                file=sys.stderr,
                flush=True,
            )
    line = runner.summary()  # the last line: what was recorded, or not
    if line:
        print(f"mcptape: {line}", file=sys.stderr, flush=True)
    return 0


def _live_exporter() -> LiveExporter | None:
    """Spans sent as exchanges finish, when ``--otlp-endpoint`` or ``OTEL_*`` asks for it."""
    from mcp_proxy.otel.live import LiveExporter, live_config

    config = live_config(os.environ)
    return LiveExporter(config) if config is not None else None


def main(on_ended: Callable[[str, str], object] | None = None) -> int:
    """The recorder process's entry (``on_ended``: see :func:`serve`)."""
    if len(sys.argv) != 2:
        print("usage: python -m mcp_proxy.recorder.worker DATABASE", file=sys.stderr)
        return 2
    # The relay decides when recording ends (by closing the pipe); signals meant for the
    # server or the relay must not cut the drain short.
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    from mcp_proxy.store.engine import resolve_url

    return serve(resolve_url(sys.argv[1] or None), sys.stdin.fileno(), on_ended=on_ended)


if __name__ == "__main__":
    sys.exit(main())
