"""The recorder: an in-memory queue drained by one writer thread in batched transactions.

Transports call :meth:`Recorder.put` (and friends) *after* they forwarded the bytes; those calls
append to a deque and return at once — the relay never waits on the database. A single writer
thread wakes every ``flush_interval`` seconds, classifies what was queued (off the relay's path),
and writes it in one transaction, so that after a ``kill -9`` everything relayed more than about
``flush_interval`` earlier is already on disk.

No silent loss: if the database refuses a batch (locked past the busy timeout, disk full, …) the
writer retries; what it finally cannot write — or what is refused at the door because the queue
grew past ``max_queued_bytes`` — is counted per session, reported on stderr once, and recorded
as a ``recorder.gap`` finding on the session as soon as the database accepts writes again.
:meth:`close` drains everything still queued before it returns.

The writer uses a sync SQLAlchemy engine in its own thread rather than the async engine:
batched ``executemany`` in a thread keeps the event loop (HTTP relay) and the relay threads
(stdio) free of per-row database work.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy import __version__
from mcp_proxy.frames import Channel, Classified, Direction, Frame, Kind, classify
from mcp_proxy.framing import LineFramer
from mcp_proxy.handshake import HandshakeTracker

GAP_CODE = "recorder.gap"
_HANDSHAKE_KINDS = frozenset((Kind.REQUEST, Kind.RESPONSE, Kind.ERROR))


@dataclass
class RecorderStats:
    frames_queued: int = 0
    frames_written: int = 0
    frames_lost: int = 0
    batches: int = 0
    write_errors: int = 0
    max_queue: int = 0
    last_error: str | None = None
    lost_by_session: dict[str, int] = field(default_factory=dict)


@dataclass
class _SessionState:
    id: str
    next_seq: int = 1
    frame_count: int = 0
    tracker: HandshakeTracker = field(default_factory=HandshakeTracker)
    lost: int = 0  # frames lost, not yet recorded as a finding
    lost_reason: str = ""
    lost_seqs: list[int] = field(default_factory=list)
    gap_total: int = 0
    #: Metadata the transport gave the session (grouping rule, redaction…); merged with what the
    #: handshake tracker learns so that neither overwrites the other in ``sessions.meta``.
    base_meta: dict[str, Any] = field(default_factory=dict)
    #: When the session row says it started; moved back if a frame is older (a transport that
    #: opens its session after the first exchange, e.g. HTTP grouping).
    started_at: float | None = None


class Recorder:
    """Owns the queue, the writer thread and the bookkeeping of what reached the disk."""

    def __init__(
        self,
        url: str,
        *,
        flush_interval: float = 0.05,
        max_batch: int = 2000,
        max_queued_bytes: int = 1 << 30,
        warn: Any = None,
        redact: Callable[[Frame], Frame] | None = None,
    ) -> None:
        self.url = url
        if redact is None:
            # A recorder worker process learns the relay's policy from its environment.
            from mcp_proxy.redact import redactor_from_env

            policy = redactor_from_env()
            if policy is not None:
                redact = policy.frame
        #: Applied to every frame in the writer thread before it is classified and written
        #: (see :mod:`mcp_proxy.redact`): secrets never reach the disk, and the relay path
        #: never pays for the JSON work.
        self.redact = redact
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self.max_queued_bytes = max_queued_bytes
        self.stats = RecorderStats()
        self._q: deque[tuple[Any, ...]] = deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()  # guards _queued_bytes and the refused-frame counters
        self._refused: dict[str, int] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._sessions: dict[str, _SessionState] = {}
        self._exchange_ids: dict[int, int] = {}  # local exchange id → database id
        self._framers: dict[tuple[str, Direction, Channel], LineFramer] = {}
        self._carry: writes_ops | None = None  # metadata of a failed batch, retried next time
        self._local_ids = itertools.count(1)
        self._warned = False
        self._warn = warn or (lambda msg: print(f"mcptape: {msg}", file=sys.stderr, flush=True))
        self.ready = threading.Event()  # set once the schema is known good (or known bad)
        self.store_error: str | None = None

    # ----------------------------------------------------------------- producer side (relay)
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mcptape-writer", daemon=True)
        self._thread.start()

    def new_session(self, *, transport: str, session_id: str | None = None, **fields: Any) -> str:
        """Queue a new session row; returns its id at once."""
        sid = session_id or uuid.uuid4().hex
        row = {
            "id": sid,
            "transport": transport,
            "status": "live",
            "started_at": time.time(),
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "recorder_version": __version__,
            **fields,
        }
        self._q.append(("session", row))
        return sid

    def put(self, session_id: str, frame: Frame) -> None:
        """Queue one frame. Never blocks, never raises; refuses (and counts) only past the cap."""
        size = len(frame.raw)
        if self._queued_bytes + size > self.max_queued_bytes:
            with self._lock:
                self._refused[session_id] = self._refused.get(session_id, 0) + 1
            return
        with self._lock:
            self._queued_bytes += size
        self._q.append(("frame", session_id, frame))

    def put_chunk(
        self,
        session_id: str,
        direction: Direction,
        channel: Channel,
        data: bytes,
        mono_ns: int | None = None,
        wall: float | None = None,
    ) -> None:
        """Queue bytes read from a stream (stdio); the writer cuts them into line frames.

        One deque append per read, however many lines it holds: the relay thread does no
        per-frame work at all. Each frame gets the time of the read that completed it.
        """
        size = len(data)
        if self._queued_bytes + size > self.max_queued_bytes:
            with self._lock:
                self._refused[session_id] = self._refused.get(session_id, 0) + data.count(b"\n")
            return
        with self._lock:
            self._queued_bytes += size
        self._q.append(
            (
                "chunk",
                session_id,
                direction,
                channel,
                data,
                mono_ns if mono_ns is not None else time.monotonic_ns(),
                wall if wall is not None else time.time(),
            )
        )

    def end_stream(self, session_id: str, direction: Direction, channel: Channel) -> None:
        """The stream ended: what is left of an unterminated last line becomes a frame."""
        self._q.append(("eos", session_id, direction, channel, time.monotonic_ns(), time.time()))

    def new_exchange(self, session_id: str, *, local_id: int | None = None, **fields: Any) -> int:
        """Queue an HTTP exchange row; returns a local id that frames and updates refer to."""
        local = local_id if local_id is not None else next(self._local_ids)
        self._q.append(("exchange", session_id, local, fields))
        return local

    def update_exchange(self, local_id: int, **fields: Any) -> None:
        self._q.append(("exchange_update", local_id, fields))

    def record_exchange(
        self, session_id: str, *, frames: list[Frame], local_id: int | None = None, **fields: Any
    ) -> int:
        """A finished HTTP exchange and its frames in one call (one pipe record from a relay).

        The HTTP relay hands a quick exchange over once, complete, instead of an insert, two
        puts and an update: a quarter of the pickling and pipe writes on its event loop.
        """
        local_id = self.new_exchange(session_id, local_id=local_id, **fields)
        for frame in frames:
            frame.http_exchange = local_id
            self.put(session_id, frame)
        return local_id

    def update_session(self, session_id: str, **fields: Any) -> None:
        self._q.append(("session_update", session_id, fields))

    def end_session(self, session_id: str, *, status: str = "ended", **fields: Any) -> None:
        fields.setdefault("ended_at", time.time())
        self._q.append(("session_update", session_id, {"status": status, **fields}))

    def add_finding(self, session_id: str, **fields: Any) -> None:
        self._q.append(("finding", session_id, fields))

    def close(self, timeout: float | None = 30.0) -> RecorderStats:
        """Drain everything queued, then stop the writer. Safe to call twice."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                left = len(self._q)
                self._warn(f"recording did not finish in {timeout}s; {left} items not written")
        return self.stats

    # ----------------------------------------------------------------- writer thread
    def open_engine(self) -> Any:
        """Open (and migrate) the database; on failure warn once and return None."""
        from mcp_proxy.store import writes

        engine = None
        try:
            engine = writes.open_for_writing(self.url)
        except Exception as exc:  # any failure here must not stop the relay
            self.store_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._warn(f"cannot record to the database ({self.store_error}); relaying anyway")
        finally:
            self.ready.set()
        return engine

    def write_pending(self, engine: Any) -> None:
        """Write everything queued so far, batch by batch (used by the worker process)."""
        while self._q:
            self._write_batch(engine, drain=True)
        if self._carry is not None:
            self._write_batch(engine, drain=True)  # one more try for carried session rows

    def finish(self, engine: Any) -> RecorderStats:
        """Record counted gaps and release the engine (after the last batch)."""
        if engine is not None:
            if self._carry is not None:
                self._write_batch(engine, drain=True)
            self._record_refused(engine)
            engine.dispose()
        return self.stats

    def _run(self) -> None:
        engine = self.open_engine()
        while True:
            stopping = self._stop.is_set()
            if not self._q and stopping:
                break
            if not self._q:
                self._wake.wait(self.flush_interval)
                self._wake.clear()
                if not self._q and not self._refused:
                    continue
            self._write_batch(engine, drain=stopping)
            if not stopping and len(self._q) < self.max_batch:
                # Let frames accumulate so each transaction carries many of them.
                self._wake.wait(self.flush_interval)
                self._wake.clear()
        self.finish(engine)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def _take_batch(self) -> list[tuple[Any, ...]]:
        batch: list[tuple[Any, ...]] = []
        q = self._q
        nbytes = 0
        while q and len(batch) < self.max_batch:
            item = q.popleft()
            tag = item[0]
            if tag == "chunk" or tag == "frame":
                n = len(item[4]) if tag == "chunk" else len(item[2].raw)
                nbytes += n
                batch.append(item)
                if nbytes > 256 << 10:  # bounded transactions keep memory (and lock time) small
                    break
            else:
                batch.append(item)
        with self._lock:
            self._queued_bytes -= nbytes
        if len(q) > self.stats.max_queue:
            self.stats.max_queue = len(q)
        return batch

    def _session(self, sid: str) -> _SessionState:
        st = self._sessions.get(sid)
        if st is None:
            st = self._sessions[sid] = _SessionState(sid)
        return st

    def _write_batch(self, engine: Any, *, drain: bool) -> None:
        from mcp_proxy.store import writes

        batch = self._take_batch()
        if not batch and self._carry is None:
            self._record_refused(engine)
            return
        ops = self._prepare(batch)
        if engine is None:
            self._count_lost(ops, self.store_error or "no database")
            return
        delay = 0.05
        for attempt in range(4):
            try:
                writes.apply_batch(engine, ops, self._exchange_ids)
                self.stats.frames_written += len(ops.frames)
                self.stats.batches += 1
                break
            except Exception as exc:
                self.stats.write_errors += 1
                self.stats.last_error = str(exc).splitlines()[0] if str(exc) else repr(exc)
                if attempt == 3:
                    # Frames are counted as lost; the session and exchange rows, updates and
                    # findings are carried into the next batch so a gap never loses a session.
                    self._count_lost(ops, self.stats.last_error)
                    self._carry = ops.without_frames()
                    return
                time.sleep(delay)
                delay *= 4
        self._record_refused(engine)

    def _prepare(self, batch: list[tuple[Any, ...]]) -> writes_ops:
        ops = self._carry or writes_ops()
        self._carry = None
        for item in _causal_order(batch):
            tag = item[0]
            if tag == "chunk":
                _, sid, direction, channel, data, mono, wall = item
                framer = self._framers.get((sid, direction, channel))
                if framer is None:
                    framer = self._framers[(sid, direction, channel)] = LineFramer()
                for line in framer.feed(data):
                    self._add_frame(ops, sid, Frame(direction, channel, line, mono, wall))
            elif tag == "eos":
                _, sid, direction, channel, mono, wall = item
                framer = self._framers.pop((sid, direction, channel), None)
                rest = framer.flush() if framer is not None else None
                if rest:
                    self._add_frame(
                        ops, sid, Frame(direction, channel, rest, mono, wall, complete=False)
                    )
            elif tag == "frame":
                self._add_frame(ops, item[1], item[2])
            elif tag == "session":
                st = self._session(item[1]["id"])
                st.started_at = item[1].get("started_at")
                if isinstance(item[1].get("meta"), dict):
                    st.base_meta = dict(item[1]["meta"])
                ops.sessions.append(item[1])
            elif tag == "session_update":
                fields = item[2]
                if isinstance(fields.get("meta"), dict):
                    st = self._session(item[1])
                    st.base_meta.update(fields["meta"])
                    fields = {**fields, "meta": {**st.base_meta, **st.tracker.meta}}
                ops.session_updates.setdefault(item[1], {}).update(fields)
            elif tag == "exchange":
                _, sid, local, fields = item
                ops.exchanges.append((local, {"session_id": sid, **fields}))
            elif tag == "exchange_update":
                ops.exchange_updates.append((item[1], item[2]))
            elif tag == "finding":
                ops.findings.append(
                    {
                        "session_id": item[1],
                        "source": "recorder",
                        "created_at": time.time(),
                        **item[2],
                    }
                )
        return ops

    def _add_frame(self, ops: writes_ops, sid: str, frame: Frame) -> None:
        """Classify one frame, number it, and queue its row (a tuple in FRAME_COLS order)."""
        st = self._session(sid)
        if self.redact is not None:
            frame = self.redact(frame)
        raw = frame.raw
        c: Classified = classify(raw, frame.channel)
        seq = st.next_seq
        st.next_seq += 1
        st.frame_count += 1
        method = c.method
        msg_id = c.msg_id
        ops.frames.append(
            (
                sid,
                seq,
                frame.wall,
                frame.mono_ns,
                frame.direction.value,
                frame.channel.value,
                c.kind.value,
                method[:200] if method else None,
                msg_id[:300] if msg_id else None,
                c.error_code,
                len(raw),
                frame.complete,
                c.partial,
                raw,
                frame.http_exchange,
                frame.sse_id,
                frame.sse_event,
                True if frame.extra and frame.extra.get("redacted") else None,
            )
        )
        if c.message is not None and c.kind in _HANDSHAKE_KINDS:
            changes = st.tracker.observe(frame.direction, c)
            if changes and "meta" in changes and st.base_meta:
                changes["meta"] = {**st.base_meta, **changes["meta"]}
            if changes:
                ops.session_updates.setdefault(sid, {}).update(changes)
        if st.started_at is not None and frame.wall < st.started_at:
            st.started_at = frame.wall
            ops.session_updates.setdefault(sid, {})["started_at"] = frame.wall
        counts = ops.session_counts.get(sid)
        if counts is None:
            counts = ops.session_counts[sid] = [0, 0.0]
        counts[0] = st.frame_count
        counts[1] = frame.wall

    def _count_lost(self, ops: writes_ops, reason: str) -> None:
        for row in ops.frames:
            st = self._session(row[0])
            st.frame_count -= 1  # frame_count counts what is in the database
            st.lost += 1
            st.lost_reason = reason
            st.lost_seqs.append(row[1])
            self.stats.frames_lost += 1
            self.stats.lost_by_session[st.id] = self.stats.lost_by_session.get(st.id, 0) + 1
        if not self._warned:
            self._warned = True
            self._warn(f"recording gap: frames could not be written ({reason}); still relaying")

    def _record_refused(self, engine: Any) -> None:
        """Turn counted losses into ``recorder.gap`` findings once the database takes writes."""
        from mcp_proxy.store import writes

        with self._lock:
            refused, self._refused = self._refused, {}
        for sid, n in refused.items():
            st = self._session(sid)
            st.lost += n
            st.lost_reason = st.lost_reason or "recording fell behind (queue over its memory cap)"
            self.stats.frames_lost += n
            self.stats.lost_by_session[sid] = self.stats.lost_by_session.get(sid, 0) + n
            if not self._warned:
                self._warned = True
                self._warn("recording gap: the recorder fell behind; frames were not recorded")
        if engine is None:
            return
        for st in self._sessions.values():
            if not st.lost:
                continue
            seqs = st.lost_seqs[:1000]
            finding = {
                "session_id": st.id,
                "code": GAP_CODE,
                "severity": "error",
                "title": f"{st.lost} frame(s) were relayed but not recorded",
                "detail": f"Recording gap: {st.lost_reason}. The traffic itself was relayed; "
                "these frames are missing from the recording.",
                "frame_seqs": seqs,
                "source": "recorder",
                "created_at": time.time(),
            }
            try:
                writes.record_gap(engine, st.id, finding, st.lost)
            except Exception:
                return
            st.gap_total += st.lost
            st.lost = 0
            st.lost_seqs = []


def _causal_order(batch: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Order each run of stream chunks by the time they were read.

    Relay threads hand chunks over *after* forwarding them, so a thread preempted between its
    write and its hand-over can queue a request after the response it caused. Sorting runs of
    consecutive chunks (stably) by their read timestamp restores the causal order; chunks of one
    stream come from one thread and are already in order, so per-stream order is kept.
    """
    out: list[tuple[Any, ...]] = []
    run: list[tuple[Any, ...]] = []
    for item in batch:
        if item[0] == "chunk":
            run.append(item)
            continue
        if run:
            run.sort(key=_read_time)
            out += run
            run = []
        out.append(item)
    if run:
        run.sort(key=_read_time)
        out += run
    return out


def _read_time(item: tuple[Any, ...]) -> int:
    return int(item[5])


@dataclass
class writes_ops:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    session_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_counts: dict[str, list[Any]] = field(default_factory=dict)
    exchanges: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    exchange_updates: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    frames: list[tuple[Any, ...]] = field(default_factory=list)  # in writes.FRAME_COLS order
    findings: list[dict[str, Any]] = field(default_factory=list)

    def without_frames(self) -> writes_ops:
        """What must still be written after the frames of a failed batch were counted lost."""
        return writes_ops(
            sessions=self.sessions,
            session_updates=self.session_updates,
            session_counts={},
            exchanges=self.exchanges,
            exchange_updates=self.exchange_updates,
            frames=[],
            findings=self.findings,
        )
