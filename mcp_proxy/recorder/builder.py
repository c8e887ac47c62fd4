"""The batch builder: recorder items in, database rows out. Pure — no I/O, no threads, no clock
beyond the one it is given — so every rule of the recording is tested without sockets or a DB.

What it decides, item by item (see :mod:`mcp_proxy.recorder.contract`):

- stream chunks are cut into line frames (:class:`~mcp_proxy.framing.LineFramer`), each with the
  time of the read that completed it; runs of chunks are put back in read order first;
- each frame is redacted (the recording's policy), classified, numbered per session and turned
  into a :class:`~mcp_proxy.store.rows.FrameRow` whose derived columns the database can hold
  (an undecodable frame keeps its bytes; a value no column can hold is escaped or cleared, and
  either case leaves a finding);
- the handshake tracker turns handshake frames into session columns;
- losses counted by the runner become gaps, written with the next batch that goes in.

It never raises on any input: a failure while handling one item is counted (its frames as lost)
and reported through ``warn``, and the builder goes on with the next item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orjson import loads as _loads

from mcp_proxy.frames import (
    FULL_PARSE_LIMIT,
    Channel,
    Classified,
    Direction,
    Frame,
    Kind,
    classify,
    classify_message,
    column_id,
    has_long_number,
)
from mcp_proxy.framing import LineFramer
from mcp_proxy.handshake import HandshakeTracker
from mcp_proxy.recorder.contract import (
    Chunk,
    EndOfStream,
    ExchangeStart,
    ExchangeUpdate,
    FindingItem,
    FrameItem,
    HttpExchange,
    Item,
    LostFrames,
    SessionStart,
    SessionUpdate,
)
from mcp_proxy.redact import Redactor, redact_argv
from mcp_proxy.store.rows import Batch, FrameRow, Gap, storable

UNDECODABLE_CODE = "recorder.undecodable"
ESCAPED_CODE = "recorder.value_escaped"
INTERNAL_CODE = "recorder.internal_error"
_HANDSHAKE_KINDS = frozenset((Kind.REQUEST, Kind.RESPONSE, Kind.ERROR))
_MAX_METHOD = 200
#: Field types an exchange row takes as they are (see ``_new_exchange``).
_AS_IS = frozenset({float, type(None), list, dict, bool})
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: ``kind.value`` without the enum descriptor (a dict lookup by the member's str hash).
_KIND_VALUE = {k: k.value for k in Kind}
_UNDECODABLE = Kind.UNDECODABLE
_REQUEST = Kind.REQUEST
_S2C = Direction.S2C
_new_row = tuple.__new__  # FrameRow(...) without its generated Python ``__new__``
# A row's ``complete`` and ``partial_parse`` are made ``1``/``0``, not ``True``/``False``: what the
# column stores either way, and sqlite3 binds an exact ``int`` at once where it first looks for
# an adapter of a ``bool`` (measured: ~0.9k instructions per value, two per frame).


@dataclass
class SessionState:
    """What the builder knows of one session across batches."""

    id: str
    next_seq: int = 1
    #: Frames of this session in the database (or in a batch not yet refused).
    frame_count: int = 0
    tracker: HandshakeTracker = field(default_factory=HandshakeTracker)
    #: Losses not yet written as a ``recorder.gap`` finding.
    gap: Gap = field(default_factory=Gap)
    #: Metadata the transport gave the session (grouping rule, redaction…); merged with what the
    #: handshake tracker learns so that neither overwrites the other in ``sessions.meta``.
    base_meta: dict[str, Any] = field(default_factory=dict)
    #: When the session row says it started; moved back if a frame is older (a transport that
    #: opens its session after the first exchange, e.g. HTTP grouping).
    started_at: float | None = None


@dataclass(slots=True)
class _Note:
    """Frames of one batch that share a recorder finding (one finding per code and session)."""

    seqs: list[int] = field(default_factory=list)
    why: set[str] = field(default_factory=set)


class BatchBuilder:
    """Turns items into :class:`Batch` objects; holds framing and numbering state."""

    def __init__(
        self,
        *,
        redact: Callable[[Frame], Frame] | Redactor | None = None,
        warn: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: Given a :class:`Redactor` (not just its ``frame`` method), the builder can ask it
        #: once per stream read whether any line of the read may hold a secret: most reads
        #: hold none, and their lines skip redaction entirely (see :meth:`_on_chunk`).
        self._prefilter: Callable[[bytes | bytearray], bool] | None = None
        if isinstance(redact, Redactor):
            self._prefilter = redact.needs_look if redact.enabled else None
            redact = redact.frame if redact.enabled else None
        self.redact = redact
        self._warn = warn or (lambda _msg: None)
        self._clock = clock
        self.sessions: dict[str, SessionState] = {}
        self._framers: dict[tuple[str, Direction, Channel], LineFramer] = {}
        self._run: list[Chunk] = []
        self._batch = Batch()
        self._carry: Batch | None = None
        self._notes: dict[tuple[str, str], _Note] = {}
        self._warned_internal = False
        #: Bytes of frames built and chunks held since the last :meth:`take`.
        self.pending_bytes = 0
        self.frames_built = 0
        #: Frames counted as lost (every one of them ends up in a gap), in total and by session.
        self.frames_lost = 0
        self.lost_by_session: dict[str, int] = {}
        self.first_loss_reason: str | None = None
        self.internal_errors = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            SessionStart: self._on_session,
            EndOfStream: self._on_eos,
            FrameItem: self._on_frame,
            ExchangeStart: self._on_exchange,
            ExchangeUpdate: self._on_exchange_update,
            HttpExchange: self._on_http_exchange,
            SessionUpdate: self._on_session_update,
            FindingItem: self._on_finding,
            LostFrames: self._on_lost,
        }

    # ------------------------------------------------------------------ input
    def feed(self, item: Item) -> None:
        """Take one item. Never raises."""
        if type(item) is Chunk:
            # Chunks wait for the next other item (or take()) so a run can be put in read order.
            self._run.append(item)
            self.pending_bytes += len(item.data)
            return
        if self._run:
            self._drain_run()
        handler = self._handlers.get(type(item))
        if handler is None:
            self._internal(item, TypeError(f"not a recorder item: {type(item).__name__}"))
            return
        try:
            handler(item)
        except Exception as exc:
            self._internal(item, exc)

    @property
    def pending_frames(self) -> int:
        return len(self._batch.frames) + len(self._run)

    @property
    def carrying(self) -> bool:
        """Rows of a batch the database refused are held for the next one."""
        return self._carry is not None

    def build(self) -> None:
        """Turn the chunks held so far into rows now (:meth:`take` would do it anyway): the
        recorder does this while the batch before is still being written."""
        if self._run:
            self._drain_run()

    def take(self) -> Batch:
        """Everything built since the last call (after anything carried), as one batch."""
        if self._run:
            self._drain_run()
        batch, self._batch = self._batch, Batch()
        self.pending_bytes = 0
        sessions = self.sessions
        # The counts as of now, not as of each session's last frame: an earlier batch still
        # being written when these frames were built may have lost rows since (``count_lost``).
        batch.session_counts = {
            sid: (sessions[sid].frame_count, last)
            for sid, (_count, last) in batch.session_counts.items()
        }
        for (sid, code), note in self._notes.items():
            batch.findings.append(self._note_finding(sid, code, note))
        self._notes = {}
        for st in self.sessions.values():
            if st.gap.lost:
                batch.gaps[st.id] = st.gap
                st.gap = Gap()
        if self._carry is not None:
            batch = batch.merge_after(self._carry)
            self._carry = None
        return batch

    # ------------------------------------------------------------------ what the runner reports
    def refused(self, batch: Batch, reason: str) -> None:
        """The database refused ``batch``: count its frames lost, keep everything else."""
        self.count_lost(batch.frames, reason)
        rest = batch.without_frames()
        for sid, gap in rest.gaps.items():
            st = self.session(sid)
            st.gap = Gap(
                gap.lost + st.gap.lost, st.gap.reason or gap.reason, gap.seqs + st.gap.seqs
            )
        rest.gaps = {}
        self._carry = rest if self._carry is None else self._carry.merge_after(rest)

    def count_lost(self, rows: list[FrameRow], reason: str) -> None:
        """Frame rows that will never be in the database: they become a gap of their session."""
        for row in rows:
            st = self.session(row.session_id)
            st.frame_count -= 1
            self._add_gap(st, 1, reason, row.seq)

    def count_gap(self, session_id: str, lost: int, reason: str) -> None:
        """``lost`` frames of a session that never reached the builder (refused, died in a pipe)."""
        if lost > 0:
            self._add_gap(self.session(session_id), lost, reason, None)

    def adopt(self, session_id: str, *, last_seq: int, frame_count: int) -> None:
        """Continue a session another recorder began: numbering goes on after ``last_seq``."""
        st = self.session(session_id)
        st.next_seq = max(st.next_seq, last_seq + 1)
        st.frame_count = max(st.frame_count, frame_count)

    def session(self, sid: str) -> SessionState:
        st = self.sessions.get(sid)
        if st is None:
            st = self.sessions[sid] = SessionState(sid)
        return st

    def _add_gap(self, st: SessionState, n: int, reason: str, seq: int | None) -> None:
        self.frames_lost += n
        self.first_loss_reason = self.first_loss_reason or reason
        self.lost_by_session[st.id] = self.lost_by_session.get(st.id, 0) + n
        st.gap.lost += n
        st.gap.reason = st.gap.reason or reason
        if seq is not None and len(st.gap.seqs) < 1000:
            st.gap.seqs.append(seq)

    # ------------------------------------------------------------------ handlers
    def _drain_run(self) -> None:
        """Cut a run of chunks into frames, in the order they were read.

        Relay threads hand chunks over *after* forwarding them, so a thread preempted between
        its write and its hand-over can queue a request after the response it caused. Sorting
        the run (stably) by read time restores the causal order; one stream's chunks come from
        one thread and are already in order.
        """
        run, self._run = self._run, []
        run.sort(key=_read_time)
        for chunk in run:
            try:
                self._on_chunk(chunk)
            except Exception as exc:
                self._internal(chunk, exc)

    def _on_chunk(self, c: Chunk) -> None:
        key = (c.session_id, c.direction, c.channel)
        framer = self._framers.get(key)
        if framer is None:
            framer = self._framers[key] = LineFramer()
        joined = framer.pending > 0  # the first line begins with bytes of an earlier read
        lines = framer.feed(c.data)
        if not lines:
            return
        if self.redact is not None and (self._prefilter is None or self._prefilter(c.data)):
            # This read may hold a secret: every line takes the whole way (redaction decides).
            for line in lines:
                self._add_frame(
                    c.session_id, Frame(c.direction, c.channel, line, c.mono_ns, c.wall)
                )
            return
        if joined:
            # Its head was read earlier: what is known of this read does not cover it.
            first = lines.pop(0)
            self._add_frame(c.session_id, Frame(c.direction, c.channel, first, c.mono_ns, c.wall))
        if lines:
            self._add_lines(c, lines, checked=not has_long_number(c.data))

    def _inline_row(
        self,
        st: Any,
        direction: Direction,
        msg: dict[str, Any],
        line: bytes | bytearray,
        at: tuple[str, int, float, int, str, str],
    ) -> FrameRow | None:
        """The row of the two commonest messages without a :class:`Classified`, or None.

        A notification whose method needs no care, and a response to an integer id (no digit
        run past 18: it fits the column as it is) — ``classify_message``'s rows for them. ``at``
        is (session id, seq, wall, mono, channel value, direction value) of the line.
        """
        sid, seq, wall, mono, cval, dval = at
        if "id" not in msg:
            method = msg.get("method")
            if type(method) is not str or len(method) > _MAX_METHOD or not method.isascii():
                return None
            return _new_row(  # type: ignore[no-any-return]
                FrameRow,
                (sid, seq, wall, mono, dval, cval, "notification", method, None, None,
                 len(line), 1, 0, line, None, None, None, None),
            )  # fmt: skip
        rid = msg["id"]
        if (
            type(rid) is not int
            or "result" not in msg
            or "error" in msg
            or msg.get("method") is not None
        ):
            return None
        mid = str(rid)
        row = _new_row(
            FrameRow,
            (sid, seq, wall, mono, dval, cval, "response", None, mid, None, len(line), 1,
             0, line, None, None, None, None),
        )  # fmt: skip
        if direction is _S2C and st.tracker.response_matters(mid, msg):
            self._observe_handshake(st, direction, Classified(Kind.RESPONSE, None, mid, msg))
        return row  # type: ignore[no-any-return]

    def _add_lines(self, c: Chunk, lines: list[bytes | bytearray], *, checked: bool) -> None:
        """The hot path: lines of one read that need no redaction, straight to rows.

        ``lines`` are cut from ``c.data`` alone (a line that began in an earlier read takes
        :meth:`_add_frame`).

        Same rows as :meth:`_add_frame` gives them (tests compare the two on hostile input),
        with what is the same for every line of a read — session, direction, channel, times,
        the digit-run check of :func:`~mcp_proxy.frames.classify` — done once, no
        :class:`Frame` per line, and the commonest line of all (an object that orjson parses)
        classified inline: a notification without a :class:`Classified`, any other message by
        :func:`~mcp_proxy.frames.classify_message` directly. Whatever the inline path does not
        cover (not an object, orjson refuses it, a huge line, stderr) takes
        :func:`~mcp_proxy.frames.classify`, which decides exactly as before.
        """
        sid, wall, mono = c.session_id, c.wall, c.mono_ns
        st = self.session(sid)
        direction, channel = c.direction, c.channel
        dval, cval = direction.value, channel.value
        frames = self._batch.frames
        append = frames.append
        kind_value = _KIND_VALUE
        # Inline parsing only where classify() would take the orjson path for every line that
        # starts with "{": the lines are slices of this read (never longer than it), and a read
        # without a NUL has no line whose head holds one.
        data = c.data
        inline = (
            checked
            and channel is not Channel.STDERR
            and len(data) <= FULL_PARSE_LIMIT
            and b"\x00" not in data
        )
        seq = st.next_seq
        size = 0
        cl: Classified
        for line in lines:
            n = len(line)
            size += n
            if inline and line[0] == 123:  # b"{"
                try:
                    msg = _loads(line)
                except ValueError:
                    cl = classify(line, channel, checked=True)
                else:
                    rpc = type(msg) is dict and msg.get("jsonrpc") == "2.0"
                    method = msg.get("method") if rpc and "id" not in msg else None
                    if type(method) is str and len(method) <= _MAX_METHOD and method.isascii():
                        # The commonest frame of all, a notification, decided here: no call,
                        # no Classified (``_inline_row`` says the same in full).
                        append(
                            _new_row(
                                FrameRow,
                                (sid, seq, wall, mono, dval, cval, "notification", method,
                                 None, None, n, True, False, line, None, None, None, None),
                            )
                        )  # fmt: skip
                        seq += 1
                        continue
                    if rpc:
                        fast = self._inline_row(
                            st, direction, msg, line, (sid, seq, wall, mono, cval, dval)
                        )
                        if fast is not None:
                            append(fast)
                            seq += 1
                            continue
                    try:
                        cl = classify_message(msg)
                    except Exception:  # classify() decides (it never raises)
                        cl = classify(line, channel, checked=True)
            else:
                cl = classify(line, channel, checked=checked)
            kind = cl.kind
            method = cl.method
            if method is not None and len(method) > _MAX_METHOD:
                method = method[:_MAX_METHOD]
            msg_id = column_id(cl.msg_id)
            code = cl.error_code
            row: FrameRow = _new_row(
                FrameRow,
                (sid, seq, wall, mono, dval, cval, kind_value[kind], method, msg_id, code, n,
                 True, cl.partial, line, None, None, None, None),
            )  # fmt: skip
            if kind is _UNDECODABLE:
                self._note(sid, UNDECODABLE_CODE, seq, cl.problem or "undecodable")
            if not (
                (method is None or method.isascii())
                and (msg_id is None or msg_id.isascii())
                and (code is None or _INT64_MIN <= code <= _INT64_MAX)
            ):
                row = self._storable_row(row)
            append(row)
            seq += 1
            if cl.message is not None and kind in _HANDSHAKE_KINDS:
                self._handshake(st, direction, cl)
        count = seq - st.next_seq
        st.next_seq = seq
        st.frame_count += count
        self.frames_built += count
        self.pending_bytes += size
        if st.started_at is not None and wall < st.started_at:
            st.started_at = wall
            self._batch.session_updates.setdefault(sid, {})["started_at"] = wall
        self._batch.session_counts[sid] = (st.frame_count, wall)

    def _on_eos(self, e: EndOfStream) -> None:
        framer = self._framers.pop((e.session_id, e.direction, e.channel), None)
        rest = framer.flush() if framer is not None else None
        if rest:
            frame = Frame(e.direction, e.channel, rest, e.mono_ns, e.wall, complete=False)
            self._add_frame(e.session_id, frame)

    def _on_frame(self, item: FrameItem) -> None:
        self._add_frame(item.session_id, item.frame)

    def _on_session(self, item: SessionStart) -> None:
        row = {k: storable(v) for k, v in item.row.items()}
        command = row.get("command")
        if self.redact is not None and isinstance(command, list):
            row["command"] = redact_argv([str(a) for a in command])
        st = self.session(row["id"])
        st.started_at = row.get("started_at")
        if isinstance(row.get("meta"), dict):
            st.base_meta = dict(row["meta"])
        self._batch.sessions.append(row)

    def _on_session_update(self, item: SessionUpdate) -> None:
        fields = {k: storable(v) for k, v in item.fields.items()}
        if isinstance(fields.get("meta"), dict):
            st = self.session(item.session_id)
            st.base_meta.update(fields["meta"])
            fields["meta"] = {**st.base_meta, **st.tracker.meta}
        self._batch.session_updates.setdefault(item.session_id, {}).update(fields)

    def _on_exchange(self, item: ExchangeStart) -> None:
        self._new_exchange(item.session_id, item.local_id, item.fields)

    def _new_exchange(self, sid: str, local_id: int, fields: dict[str, Any]) -> None:
        row = {"session_id": sid}
        for k, v in fields.items():
            # Only text and integers can need storable(): floats, None, lists and dicts (JSON
            # columns) go as they are — most of an exchange's fields — and so do ASCII text
            # and 64-bit integers, the rest of them.
            t = type(v)
            if (
                t in _AS_IS
                or (t is str and v.isascii())
                or (t is int and _INT64_MIN <= v <= _INT64_MAX)
            ):
                row[k] = v
            else:
                row[k] = storable(v)
        self._batch.exchanges.append((local_id, row))

    def _on_exchange_update(self, item: ExchangeUpdate) -> None:
        fields = {k: storable(v) for k, v in item.fields.items()}
        self._batch.exchange_updates.append((item.local_id, fields))

    def _on_http_exchange(self, item: HttpExchange) -> None:
        self._new_exchange(item.session_id, item.local_id, item.fields)
        for frame in item.frames:
            frame.http_exchange = item.local_id
            self._add_frame(item.session_id, frame)

    def _on_finding(self, item: FindingItem) -> None:
        fields = dict(item.fields)
        for key in ("title", "detail"):  # text columns: a structured value is kept as JSON text
            if fields.get(key) is not None and not isinstance(fields[key], str):
                fields[key] = json.dumps(fields[key], ensure_ascii=False, default=str)
        self._batch.findings.append(
            {
                "session_id": item.session_id,
                "source": "recorder",
                "created_at": self._clock(),
                **{k: storable(v) for k, v in fields.items()},
            }
        )

    def _on_lost(self, item: LostFrames) -> None:
        for sid, n in item.counts.items():
            self.count_gap(sid, int(n), item.reason)

    # ------------------------------------------------------------------ frames
    def _add_frame(self, sid: str, frame: Frame) -> None:
        """Redact, classify and number one frame; queue its row and what it tells."""
        st = self.session(sid)
        if self.redact is not None:
            frame = self.redact(frame)
        raw = frame.raw
        c: Classified = classify(raw, frame.channel)
        kind = c.kind
        seq = st.next_seq
        st.next_seq += 1
        st.frame_count += 1
        self.frames_built += 1
        self.pending_bytes += len(raw)
        direction, wall, extra = frame.direction, frame.wall, frame.extra
        row: FrameRow = _new_row(
            FrameRow,
            (
                sid,
                seq,
                wall,
                frame.mono_ns,
                direction._value_,  # the plain attribute: ``.value`` is a property
                frame.channel._value_,
                _KIND_VALUE[kind],
                c.method[:_MAX_METHOD] if c.method else None,
                column_id(c.msg_id),
                c.error_code,
                len(raw),
                1 if frame.complete else 0,
                1 if c.partial else 0,
                raw,
                frame.http_exchange,
                frame.sse_id,
                frame.sse_event,
                True if extra and extra.get("redacted") else None,
            ),
        )
        if kind is _UNDECODABLE:
            self._note(sid, UNDECODABLE_CODE, seq, c.problem or "undecodable")
        self._batch.frames.append(self._storable_row(row))
        if c.message is not None and kind in _HANDSHAKE_KINDS:
            self._handshake(st, direction, c)
        if st.started_at is not None and wall < st.started_at:
            st.started_at = wall
            self._batch.session_updates.setdefault(sid, {})["started_at"] = wall
        self._batch.session_counts[sid] = (st.frame_count, wall)

    def _storable_row(self, row: FrameRow) -> FrameRow:
        """Derived columns the database could not hold are escaped (text) or cleared (ints)."""
        m, i, e = row.method, row.msg_id, row.error_code
        if (
            (m is None or m.isascii())
            and (i is None or i.isascii())
            and (e is None or _INT64_MIN <= e <= _INT64_MAX)
            and row.sse_id is None
            and row.sse_event is None
        ):
            return row  # the common case, decided in a few hundred nanoseconds
        changed: dict[str, Any] = {}
        for name in ("method", "msg_id", "error_code", "sse_id", "sse_event"):
            value = getattr(row, name)
            if value is None:
                continue
            fixed = storable(value)
            if fixed != value:
                if name == "method" and fixed is not None:
                    fixed = fixed[:_MAX_METHOD]
                changed[name] = fixed
        if not changed:
            return row
        for name in changed:
            how = "cleared (out of range)" if changed[name] is None else "escaped"
            self._note(row.session_id, ESCAPED_CODE, row.seq, f"{name} {how}")
        return row._replace(**changed)

    def _handshake(self, st: SessionState, direction: Direction, c: Classified) -> None:
        """Hand a message to the session's handshake tracker when it could learn from it: most
        requests and nearly every answer teach it nothing and skip it."""
        msg, tracker = c.message, st.tracker
        if direction is not _S2C or c.kind is _REQUEST:
            if tracker.request_matters(c.method, msg):
                self._observe_handshake(st, direction, c)
        elif isinstance(msg, dict) and tracker.response_matters(c.msg_id, msg):
            self._observe_handshake(st, direction, c)

    def _observe_handshake(self, st: SessionState, direction: Direction, c: Classified) -> None:
        try:
            changes = st.tracker.observe(direction, c)
        except Exception:  # session facts are a bonus; the frame itself is already queued
            return
        if not changes:
            return
        changes = {k: storable(v) for k, v in changes.items()}
        if "meta" in changes and st.base_meta:
            changes["meta"] = {**st.base_meta, **changes["meta"]}
        self._batch.session_updates.setdefault(st.id, {}).update(changes)

    # ------------------------------------------------------------------ findings of its own
    def _note(self, sid: str, code: str, seq: int, why: str) -> None:
        note = self._notes.get((sid, code))
        if note is None:
            note = self._notes[(sid, code)] = _Note()
        if len(note.seqs) < 1000:
            note.seqs.append(seq)
        note.why.add(why)

    def _note_finding(self, sid: str, code: str, note: _Note) -> dict[str, Any]:
        why = "; ".join(sorted(note.why))
        n = len(note.seqs)
        if code == UNDECODABLE_CODE:
            title = f"{n} frame(s) recorded as bytes only: they could not be decoded"
            detail = (
                f"The recorder could not decode these frames ({why}). Their exact bytes are in "
                "the recording; kind, method and id were not derived from them."
            )
            severity = "warning"
        elif code == ESCAPED_CODE:
            title = f"{n} frame(s) had a value no database column can hold"
            detail = (
                f"Derived columns were made storable ({why}): lone surrogates are stored as "
                "their \\u escape, integers beyond 64 bits as null. The raw bytes are exact."
            )
            severity = "info"
        else:
            title = f"{n} item(s) the recorder failed to handle"
            detail = why
            severity = "error"
        return {
            "session_id": sid,
            "code": code,
            "severity": severity,
            "title": title,
            "detail": detail,
            "frame_seqs": note.seqs,
            "source": "recorder",
            "created_at": self._clock(),
        }

    def _internal(self, item: Any, exc: BaseException) -> None:
        """An item the builder failed on: count its frames lost, say so once, go on."""
        self.internal_errors += 1
        sid = getattr(item, "session_id", None)
        reason = f"recorder error {type(exc).__name__}: {str(exc)[:200]}"
        if isinstance(sid, str):
            lost = item.data.count(b"\n") if isinstance(item, Chunk) else 1
            if isinstance(item, HttpExchange):
                lost = len(item.frames)
            if isinstance(item, (Chunk, FrameItem, HttpExchange)):
                self.count_gap(sid, lost, reason)
        if not self._warned_internal:
            self._warned_internal = True
            self._warn(f"recorder error ({reason}); recording goes on")


def _read_time(chunk: Chunk) -> int:
    return chunk.mono_ns
