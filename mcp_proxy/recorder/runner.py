"""What runs the batch builder: a :class:`BatchRunner` (builder + store + retries + loss
accounting, single-threaded) and :class:`Recorder`, the in-process sink that drives one from a
writer thread.

No silent loss: a batch the database refuses for a transient reason (locked past the busy
timeout, disk full) is retried; what finally cannot be written — or is refused at the door
because the queue grew past ``max_queued_bytes`` — is counted per session, said on stderr once,
and recorded as a ``recorder.gap`` finding (and in ``sessions.gap_count``) with the first batch
the database accepts again. Session rows, updates and findings of a refused batch are carried
into the next one, so a gap never loses a session or its end.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.recorder.builder import BatchBuilder
from mcp_proxy.recorder.contract import (
    Chunk,
    FrameItem,
    Item,
    Producer,
    Resume,
    SessionStart,
    SessionUpdate,
)

if TYPE_CHECKING:
    from mcp_proxy.redact import Redactor
    from mcp_proxy.store.rows import Batch, FrameRow
    from mcp_proxy.store.writer import BatchWriter

_RETRY_DELAYS = (0.05, 0.2, 0.8)
#: Frames a batch needs before the insert thread takes it: a smaller one (a few calls' worth,
#: the usual batch of a session that is not bursting) is written at once on the recorder's own
#: thread, which is cheaper than handing it over and back (~60 µs of CPU per batch).
PIPELINE_MIN_FRAMES = 256
#: Seconds between attempts to open a database that could not be opened (a PostgreSQL not up
#: yet when recording starts): the first retry soon, then less and less often.
_OPEN_DELAYS = (0.5, 1.0, 2.0, 5.0)


@dataclass
class RecorderStats:
    frames_queued: int = 0
    frames_written: int = 0
    frames_lost: int = 0
    batches: int = 0
    write_errors: int = 0
    max_queue: int = 0
    last_error: str | None = None
    #: Why frames were lost, for the last line on stderr (first cause wins).
    loss_reason: str | None = None
    lost_by_session: dict[str, int] = field(default_factory=dict)


def _stderr(msg: str) -> None:
    print(f"mcptape: {msg}", file=sys.stderr, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


class BatchRunner:
    """Feeds a :class:`BatchBuilder` and writes what it builds; single-threaded."""

    def __init__(
        self,
        url: str,
        *,
        redact: Callable[[Frame], Frame] | Redactor | None = None,
        warn: Callable[[str], None] | None = None,
        retry_delays: tuple[float, ...] = _RETRY_DELAYS,
        pipelined: bool = False,
    ) -> None:
        self.url = url
        #: Write each batch on a thread of its own while the next one is built (the recorder
        #: process): see :class:`_InsertThread`.
        self.pipelined = pipelined
        self._pipe: _InsertThread | None = None
        #: where a warning goes (one line; stderr unless the caller says otherwise)
        self.warn = warn or _stderr
        self.builder = BatchBuilder(redact=redact, warn=self.warn)
        self.writer: BatchWriter | None = None
        self.store_error: str | None = None
        self.stats = RecorderStats()
        self.retry_delays = retry_delays
        self.warned_gap = False
        self.warned_forgot = False
        self._open_failures = 0
        self._next_open = 0.0
        #: Frames the sessions taken over (:class:`Resume`) already had counted as lost when
        #: this recorder took over: the last line on stderr tells the session's whole loss.
        self.prior_gaps = 0
        #: Shown every batch built, before it is written (the live OpenTelemetry export,
        #: ``mcp_proxy/otel/live.py``); must not block.
        self.observe: Callable[[Batch], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> bool:
        """Open (and migrate) the database; on failure warn once and try again later.

        A database that cannot be opened yet (PostgreSQL still starting, a server restarting)
        is tried again from :meth:`flush`, less and less often (:data:`_OPEN_DELAYS`); what is
        relayed meanwhile is counted as lost and recorded as a ``recorder.gap`` finding, with
        the session row, once the database answers.
        """
        try:
            from mcp_proxy.store.writer import BatchWriter

            self.writer = BatchWriter.open(self.url)
        except Exception as exc:  # any failure here must not stop the relay
            self.store_error = _first_line(exc)
            if not self._open_failures:
                self.warn(
                    f"cannot record to the database ({self.store_error}); relaying anyway,"
                    " and trying again"
                )
            delay = _OPEN_DELAYS[min(self._open_failures, len(_OPEN_DELAYS) - 1)]
            self._open_failures += 1
            self._next_open = time.monotonic() + delay
            return False
        if self._open_failures:
            lost = self.builder.frames_lost
            self.warn(
                f"the database answers now; recording resumed ({lost} frame(s) before it did"
                " are recorded as a gap)"
            )
        return True

    def finish(self, *, patience: float = 5.0) -> RecorderStats:
        """Write the rest; while the database still refuses, keep trying for ``patience`` s.

        A database that was never opened gets one more attempt, not ``patience``: a wrong URL
        must not hold up the end of every recording.
        """
        self._settle()
        if self._pipe is not None:  # the rest is written here, in turn, as it comes
            self._pipe.close()
            self._pipe = None
        self.pipelined = False
        if self.writer is None:
            self._next_open = 0.0
        self.flush()
        deadline = time.monotonic() + patience
        if self.writer is not None and self._carrying() and patience > 0:
            self.warn(
                f"recorder: the database still refuses what the recording owes it"
                f" ({self.stats.last_error}); trying again for up to {patience:.0f} s"
            )
        while self.writer is not None and self._carrying() and time.monotonic() < deadline:
            time.sleep(0.5)
            self.flush()
        if self.writer is not None:
            self.writer.close()
        self._sync_stats()
        return self.stats

    def _carrying(self) -> bool:
        b = self.builder
        return b.carrying or any(st.gap.lost for st in b.sessions.values())

    def owes(self) -> bool:
        """True while rows wait for the database (being written, refused, or it could not be
        opened yet)."""
        return (self._pipe is not None and self._pipe.busy) or self._carrying()

    # ------------------------------------------------------------------ input
    def feed(self, item: Item) -> None:
        if type(item) is Resume:
            self._resume(item)
        else:
            self.builder.feed(item)

    def _resume(self, item: Resume) -> None:
        """Take over sessions a recorder process that died had begun, and count what it lost."""
        self._settle()  # the database is read below: nothing of ours may be half-written
        for sid, info in item.sessions.items():
            exists, last, count, gaps = False, 0, 0, 0
            if self.writer is not None:
                try:
                    exists, last, count, gaps = self.writer.session_progress(sid)
                except Exception as exc:
                    self.warn(f"cannot read where session {sid[:8]} stopped ({exc})")
            if not exists and isinstance(info.get("row"), dict):
                self.builder.feed(SessionStart(dict(info["row"])))
            self.builder.adopt(sid, last_seq=last, frame_count=count)
            self.prior_gaps += gaps
            if gaps and self.stats.loss_reason is None:
                self.stats.loss_reason = item.reason or "the recorder process died"
            lost = int(info.get("sent", 0)) - count - gaps
            self.builder.count_gap(sid, lost, item.reason or "the recorder process died")
            if isinstance(info.get("end"), dict):
                self.builder.feed(SessionUpdate(sid, dict(info["end"])))

    # ------------------------------------------------------------------ output
    def flush(self) -> None:
        """Write everything built so far as one batch (retrying transient refusals).

        Pipelined, the batch is handed to the insert thread and this returns at once, after the
        batch before it is settled (written or counted): one batch is written while the next
        is built, never more, so memory stays at two batches and the order of writes is the
        order of batches. The rows of the chunks held so far are built *before* waiting for
        the batch on the thread — that is the overlap — but taken only after it is settled, so
        that what it left to carry (sessions, a gap) goes first and the counts are current.
        """
        if self._pipe is not None and self._pipe.busy:
            self.builder.build()
        self._settle()
        batch = self.builder.take()
        if batch.empty():
            return
        if self.observe is not None:
            self.observe(batch)
        if self.writer is None and time.monotonic() >= self._next_open:
            self.open()
        if self.writer is None:
            # Frames are counted lost; sessions, updates, findings and the gap wait for the
            # database (bounded: a few rows per session, not the traffic).
            reason = f"the database could not be opened ({self.store_error})"
            self.builder.refused(batch, reason)
            self._gap_warning(reason)
            return
        if self.pipelined and len(batch.frames) >= PIPELINE_MIN_FRAMES:
            if self._pipe is None:
                self._pipe = _InsertThread(self._write)
            self._pipe.submit(batch)
            return
        self._settled(batch, self._write(batch))

    def _settle(self) -> None:
        """Wait for the batch on the insert thread, if any, and account for how it went."""
        if self._pipe is not None and self._pipe.busy:
            self._settled(*self._pipe.wait())

    def _write(self, batch: Batch) -> _Outcome:
        """Write ``batch`` with retries; touches only the writer and the stats' error fields
        (it runs on the insert thread when pipelined: what it means for the builder is
        :meth:`_settled`'s, on the recorder's own thread)."""
        from mcp_proxy.store.writer import TransientWriteError

        assert self.writer is not None
        for delay in (*self.retry_delays, None):
            try:
                return _Outcome(lost=self.writer.write(batch))
            except TransientWriteError as exc:
                self.stats.write_errors += 1
                self.stats.last_error = str(exc)
                if delay is None:
                    return _Outcome(refused=str(exc))
                time.sleep(delay)
            except Exception as exc:  # a bug in the write path must not stop the recording
                reason = f"recorder error {type(exc).__name__}: {_first_line(exc)}"
                self.stats.last_error = reason
                return _Outcome(failed=reason)
        raise AssertionError("unreachable")  # pragma: no cover

    def _settled(self, batch: Batch, outcome: _Outcome) -> None:
        """What a written (or refused) batch means for the builder's counts and carried rows."""
        if outcome.refused is not None:
            self.builder.refused(batch, outcome.refused)
            self._gap_warning(outcome.refused)
            return
        if outcome.failed is not None:
            self.builder.count_lost(batch.frames, outcome.failed)
            self._gap_warning(outcome.failed)
            return
        self.stats.batches += 1
        self.stats.frames_written += len(batch.frames) - len(outcome.lost)
        if batch.exchanges and not self.warned_forgot and self.writer is not None:
            forgot = self.writer.exchange_ids.forgotten
            if forgot:
                self.warned_forgot = True
                self.warn(
                    f"recorder: more than {self.writer.exchange_ids.open_limit} HTTP exchanges"
                    " open at once; the oldest are forgotten (what still comes for them is"
                    " recorded without its exchange link)"
                )
        if outcome.lost:
            reason = "the database refused these rows"
            self.builder.count_lost(outcome.lost, reason)
            self._gap_warning(reason)

    def _gap_warning(self, reason: str) -> None:
        if self.stats.loss_reason is None:
            self.stats.loss_reason = reason
        if not self.warned_gap:
            self.warned_gap = True
            self.warn(f"recording gap: frames could not be written ({reason}); still relaying")

    def _sync_stats(self) -> None:
        b = self.builder
        self.stats.frames_lost = b.frames_lost
        self.stats.lost_by_session = dict(b.lost_by_session)
        if b.frames_lost and self.stats.loss_reason is None:
            self.stats.loss_reason = b.first_loss_reason

    def summary(self) -> str | None:
        """The last line to print when something was lost (None when the recording is whole)."""
        self._sync_stats()
        lost = self.stats.frames_lost + self.prior_gaps
        if not lost:
            return None
        why = self.stats.loss_reason or self.stats.last_error or "unknown cause"
        return f"recording incomplete: {lost} frame(s) were relayed but not recorded ({why})"


@dataclass(slots=True)
class _Outcome:
    """How writing one batch went: rows the database refused one by one (``lost``), or the
    whole batch refused after its retries (``refused``) or failed by a bug (``failed``)."""

    lost: list[FrameRow] = field(default_factory=list)
    refused: str | None = None
    failed: str | None = None


class _InsertThread:
    """One batch at a time written on a thread of its own, while the recorder builds the next.

    Why a thread helps in one Python process: ``sqlite3`` lets go of the GIL while SQLite steps
    a statement (and psycopg while PostgreSQL works on a COPY), which is most of an insert's
    time; on two cores, building batch N+1 (pure Python) then runs beside writing batch N. A
    depth of one keeps the order of writes, bounds memory to two batches, and leaves every
    decision about a batch that failed (counting its frames, carrying its sessions into the
    next one) to the recorder's own thread, in order (:meth:`BatchRunner._settled`).
    """

    def __init__(self, work: Callable[[Batch], _Outcome]) -> None:
        self._work = work
        self._cv = threading.Condition()
        self._job: Batch | None = None
        self._done: tuple[Batch, _Outcome] | None = None
        self._stop = False
        #: A batch was submitted and its outcome not yet taken by :meth:`wait`.
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="mcptape-insert", daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        with self._cv:
            assert not self.busy, "one batch at a time"
            self.busy = True
            self._job = batch
            self._cv.notify_all()

    def wait(self) -> tuple[Batch, _Outcome]:
        """The batch submitted last and how it went, once it is written."""
        with self._cv:
            while self._done is None:
                self._cv.wait()
            done, self._done = self._done, None
            self.busy = False
            return done

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._stop:
                    self._cv.wait()
                if self._job is None:
                    return
                job, self._job = self._job, None
            try:
                outcome = self._work(job)
            except BaseException as exc:  # never leave the recorder waiting for nothing
                outcome = _Outcome(failed=f"recorder error {type(exc).__name__}: {exc}")
            with self._cv:
                self._done = (job, outcome)
                self._cv.notify_all()


class Recorder(Producer):
    """The in-process sink: producers append to a deque, a writer thread runs the batches.

    Producer calls return at once — the relay never waits on the database. The writer wakes
    every ``flush_interval`` seconds and writes what was queued in one transaction, so after a
    ``kill -9`` everything handed over more than about ``flush_interval`` earlier is on disk.
    :meth:`close` drains everything still queued before it returns.
    """

    def __init__(
        self,
        url: str,
        *,
        flush_interval: float = 0.05,
        max_batch: int = 2000,
        max_queued_bytes: int = 1 << 30,
        warn: Callable[[str], None] | None = None,
        redact: Callable[[Frame], Frame] | Redactor | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        if redact is None:
            # In-process users (import, replay, tests) follow MCPTAPE_REDACT when it is set.
            from mcp_proxy.redact import redactor_from_env

            policy = redactor_from_env()
            if policy is not None and policy.enabled:
                redact = policy
        self.redact = redact
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self.max_queued_bytes = max_queued_bytes
        self.runner = BatchRunner(url, redact=redact, warn=warn)
        self.stats = self.runner.stats
        self._q: deque[Item] = deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()  # guards _queued_bytes and the refused-frame counters
        self._refused: dict[str, int] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # set once the database is known good (or known bad)

    @property
    def store_error(self) -> str | None:
        return self.runner.store_error

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    # ------------------------------------------------------------------ producer side
    def submit(self, item: Item) -> None:
        self._q.append(item)

    def _admit(self, session_id: str, size: int, frames: int) -> bool:
        """Count ``size`` bytes in, or refuse them (and count their frames) past the cap."""
        with self._lock:
            if self._queued_bytes + size > self.max_queued_bytes:
                self._refused[session_id] = self._refused.get(session_id, 0) + frames
                return False
            self._queued_bytes += size
        return True

    def put(self, session_id: str, frame: Frame) -> None:
        """Queue one frame. Never blocks, never raises; refuses (and counts) only past the cap."""
        if self._admit(session_id, len(frame.raw), 1):
            self._q.append(FrameItem(session_id, frame))

    def put_chunk(
        self,
        session_id: str,
        direction: Direction,
        channel: Channel,
        data: bytes,
        mono_ns: int | None = None,
        wall: float | None = None,
    ) -> None:
        """Queue bytes read from a stream: one deque append per read, however many lines."""
        if self._admit(session_id, len(data), data.count(b"\n")):
            self._q.append(
                Chunk(
                    session_id,
                    direction,
                    channel,
                    data,
                    mono_ns if mono_ns is not None else time.monotonic_ns(),
                    wall if wall is not None else time.time(),
                )
            )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mcptape-writer", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = 30.0) -> RecorderStats:
        """Drain everything queued, then stop the writer. Safe to call twice."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                left = len(self._q)
                self.runner.warn(
                    f"recording did not finish in {timeout}s; {left} items not written"
                )
        return self.stats

    def _run(self) -> None:
        try:
            self.runner.open()
        finally:
            self.ready.set()
        while True:
            stopping = self._stop.is_set()
            if not self._q and stopping:
                break
            if not self._q:
                self._wake.wait(self.flush_interval)
                self._wake.clear()
                if not self._q and not self._refused:
                    continue
            self._write_some()
            if not stopping and len(self._q) < self.max_batch:
                # Let frames accumulate so each transaction carries many of them.
                self._wake.wait(self.flush_interval)
                self._wake.clear()
        self._take_refused()
        self.runner.finish()

    def _write_some(self) -> None:
        """Move up to one batch of items into the builder, then write it."""
        q = self._q
        builder = self.runner.builder
        taken = 0
        if len(q) > self.stats.max_queue:
            self.stats.max_queue = len(q)
        while q and builder.pending_frames < self.max_batch and builder.pending_bytes < (256 << 10):
            item = q.popleft()
            taken += _item_bytes(item)
            self.runner.feed(item)
        with self._lock:
            self._queued_bytes -= taken
        self._take_refused()
        self.runner.flush()

    def _take_refused(self) -> None:
        with self._lock:
            refused, self._refused = self._refused, {}
        for sid, n in refused.items():
            reason = "recording fell behind (queue over its memory cap)"
            self.runner.builder.count_gap(sid, n, reason)
            self.runner._gap_warning(reason)


def _item_bytes(item: Any) -> int:
    if type(item) is Chunk:
        return len(item.data)
    if type(item) is FrameItem:
        return len(item.frame.raw)
    return 0
