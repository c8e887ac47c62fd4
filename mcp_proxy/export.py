"""Recording files: the portable, versioned JSON Lines export of sessions, its import, and HAR.

A recording file is what travels: committed under ``recordings/``, attached to a bug report,
replayed in CI, served back as a mock. The format is documented in ``docs/recording-format.md``;
this module is its only reader and writer.

Three rules shape the code:

- **Exact bytes.** Frames carry their raw bytes (as text when they are valid UTF-8, base64
  otherwise) so an import reproduces the recording byte for byte. Everything else in a frame
  record (kind, method, id) is informative and recomputed on import by :mod:`mcp_proxy.frames`.
- **Deterministic output.** Exporting the same sessions twice yields identical bytes: no export
  timestamps, a fixed key order, HTTP exchanges renumbered per session in order.
- **Old files keep loading.** The header names a format version; older versions pass through a
  chain of upgrade steps (:data:`UPGRADES`), each a small stream transformer, before validation.

The in-memory model (:class:`Recording`) uses the store's row shapes, so analysis, diff, replay
and mock work the same on a file and on a database session.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from mcp_proxy import __version__
from mcp_proxy.errors import NotFoundError, UserError
from mcp_proxy.frames import Channel, Direction, Frame, classify, parse_json, text_or_none

if TYPE_CHECKING:
    from mcp_proxy.store.queries import Store

FORMAT_NAME = "mcptape-recording"
#: The version this mcptape writes. Readers accept every version from 1 up to this one.
FORMAT_VERSION = 2
#: Suffix conventionally used for recording files.
SUFFIX = ".mcptape.jsonl"

#: Session columns exported, in file order. ``pid`` is left out: it means nothing elsewhere.
SESSION_FIELDS = (
    "id",
    "name",
    "transport",
    "status",
    "started_at",
    "ended_at",
    "updated_at",
    "command",
    "cwd",
    "upstream",
    "hostname",
    "exit_code",
    "exit_signal",
    "era",
    "protocol_version",
    "client_name",
    "client_version",
    "server_name",
    "server_version",
    "meta",
    "frame_count",
    "gap_count",
    "recorder_version",
)
EXCHANGE_FIELDS = (
    "method",
    "url",
    "status",
    "request_headers",
    "response_headers",
    "started_at",
    "first_byte_at",
    "ended_at",
    "outcome",
    "error",
    "request_size",
    "response_size",
    "meta",
)
FINDING_FIELDS = (
    "code",
    "severity",
    "title",
    "detail",
    "frame_seqs",
    "source",
    "analyzer_version",
    "created_at",
)
ANNOTATION_FIELDS = ("frame_seq", "tag", "note", "created_at", "updated_at")


class RecordingFormatError(UserError):
    """A recording file that cannot be read: one line naming the file, the line and the reason."""

    exit_code = 2


# ============================================================================ the model


@dataclass
class SessionRecording:
    """One session with everything recorded about it, in the store's row shapes.

    ``exchanges[i]["id"]`` and ``frames[j]["http_exchange_id"]`` are per-session numbers
    (1, 2, …), not database ids, so that they mean the same in every database and file.
    """

    session: dict[str, Any]
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.session["id"])

    @property
    def label(self) -> str:
        """How messages name the session: its name and a short id."""
        name = self.session.get("name")
        return f"{name} ({self.id[:8]})" if name else self.id[:8]


@dataclass
class Recording:
    """Sessions read from a file or a database, ready to export, diff, replay or mock."""

    sessions: list[SessionRecording]
    #: Where it came from (a file path or ``db:SESSION``), for messages.
    origin: str = ""
    #: The format version the file was written in (``FORMAT_VERSION`` for database loads).
    version: int = FORMAT_VERSION

    def one(self, ref: str | None = None) -> SessionRecording:
        """The session named by ``ref`` (id prefix, name or 1-based index), or the only one."""
        if ref is None:
            if len(self.sessions) == 1:
                return self.sessions[0]
            raise UserError(
                f"{self.origin or 'the recording'} holds {len(self.sessions)} sessions;"
                " pick one with FILE#N (1-based) or FILE#ID-PREFIX or FILE#NAME"
            )
        if ref.isdigit() and 1 <= int(ref) <= len(self.sessions) and len(ref) < 8:
            return self.sessions[int(ref) - 1]
        hits = [s for s in self.sessions if s.id.startswith(ref) or s.session.get("name") == ref]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise NotFoundError(f"no session {ref!r} in {self.origin or 'the recording'}")
        raise NotFoundError(f"session {ref!r} is ambiguous in {self.origin or 'the recording'}")


# ============================================================================ writing JSON Lines


def _dump(record: dict[str, Any]) -> bytes:
    """One record as one line: compact, UTF-8, no NaN (JSON Lines readers everywhere agree)."""
    return (
        json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
            "utf-8"
        )
        + b"\n"
    )


def _pick(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: row.get(name) for name in names}


def raw_fields(raw: bytes) -> dict[str, str]:
    """``{"text": …}`` for UTF-8 bytes (readable in a diff of the file), else ``{"base64": …}``."""
    text = text_or_none(raw)
    if text is not None:
        return {"text": text}
    return {"base64": base64.b64encode(raw).decode("ascii")}


def frame_record(session_id: str, f: dict[str, Any]) -> dict[str, Any]:
    """The file record of one frame row (informative fields only when they say something)."""
    rec: dict[str, Any] = {
        "type": "frame",
        "session": session_id,
        "seq": f["seq"],
        "ts": f["ts"],
        "mono_ns": f["mono_ns"],
        "dir": f["direction"],
        "channel": f["channel"],
        "kind": f.get("kind"),
    }
    if f.get("method") is not None:
        rec["method"] = f["method"]
    if f.get("msg_id") is not None:
        rec["id"] = f["msg_id"]
    if f.get("error_code") is not None:
        rec["error_code"] = f["error_code"]
    if f.get("http_exchange_id") is not None:
        rec["exchange"] = f["http_exchange_id"]
    if f.get("sse_id") is not None:
        rec["sse_id"] = f["sse_id"]
    if f.get("sse_event") is not None:
        rec["sse_event"] = f["sse_event"]
    if not f.get("complete", True):
        rec["complete"] = False
    rec.update(raw_fields(bytes(f["raw"])))
    return rec


def iter_jsonl(recording: Recording) -> Iterator[bytes]:
    """The recording as JSON Lines, one ``bytes`` line at a time (pure, deterministic)."""
    yield _dump(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "generator": f"mcptape {__version__}"}
    )
    counts = {"sessions": 0, "http_exchanges": 0, "frames": 0, "findings": 0, "annotations": 0}
    for s in recording.sessions:
        sid = s.id
        yield _dump({"type": "session", **_pick(s.session, SESSION_FIELDS)})
        counts["sessions"] += 1
        for ex in s.exchanges:
            yield _dump(
                {
                    "type": "http_exchange",
                    "session": sid,
                    "n": ex["id"],
                    **_pick(ex, EXCHANGE_FIELDS),
                }
            )
            counts["http_exchanges"] += 1
        for f in s.frames:
            yield _dump(frame_record(sid, f))
            counts["frames"] += 1
        for fi in s.findings:
            yield _dump({"type": "finding", "session": sid, **_pick(fi, FINDING_FIELDS)})
            counts["findings"] += 1
        for an in s.annotations:
            yield _dump({"type": "annotation", "session": sid, **_pick(an, ANNOTATION_FIELDS)})
            counts["annotations"] += 1
    yield _dump({"type": "end", **counts})


def dumps_jsonl(recording: Recording) -> bytes:
    """The whole file as bytes (what ``export -o`` writes and the dashboard offers to download)."""
    return b"".join(iter_jsonl(recording))


def write_file(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> None:
    """Write atomically (temp file + rename) so an interrupted export never leaves half a file."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from exc


# ============================================================================ reading JSON Lines


def _v1_to_v2(
    records: Iterator[tuple[int, dict[str, Any]]],
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Version 1 (the pre-release draft) → version 2.

    v1 frames said ``direction`` and carried raw bytes always as ``raw_b64``; HTTP exchanges
    carried their database ``id`` and frames pointed at it with ``http_exchange``; there was no
    ``end`` record, so a truncated v1 file cannot be told from a complete one (v2 fixes that).
    """
    renumber: dict[tuple[str, Any], int] = {}
    per_session: dict[str, int] = {}
    counts = {"sessions": 0, "http_exchanges": 0, "frames": 0, "findings": 0, "annotations": 0}
    last = 0
    for lineno, rec in records:
        last = lineno
        kind = rec.get("type")
        if kind == "session":
            counts["sessions"] += 1
        elif kind == "http_exchange":
            sid = str(rec.get("session"))
            n = per_session[sid] = per_session.get(sid, 0) + 1
            renumber[(sid, rec.pop("id", None))] = n
            rec["n"] = n
            counts["http_exchanges"] += 1
        elif kind == "frame":
            rec["dir"] = rec.pop("direction", None)
            b64 = rec.pop("raw_b64", None)
            if isinstance(b64, str):
                try:
                    rec.update(raw_fields(base64.b64decode(b64, validate=True)))
                except ValueError:
                    rec["base64"] = b64  # let validation report it with its line number
            ex = rec.pop("http_exchange", None)
            if ex is not None:
                rec["exchange"] = renumber.get((str(rec.get("session")), ex), ex)
            counts["frames"] += 1
        elif kind == "finding":
            counts["findings"] += 1
        yield lineno, rec
    yield last + 1, {"type": "end", **counts}


#: Upgrade steps: ``UPGRADES[v]`` turns a version-``v`` record stream into version ``v + 1``.
UPGRADES: dict[
    int,
    Callable[[Iterator[tuple[int, dict[str, Any]]]], Iterator[tuple[int, dict[str, Any]]]],
] = {1: _v1_to_v2}


def _lines(data: bytes, origin: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (UnicodeDecodeError, ValueError) as exc:
            where = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not valid JSON"
            raise RecordingFormatError(
                f"{origin} line {lineno}: {where} (truncated or edited by hand?)"
            ) from exc
        if not isinstance(rec, dict):
            raise RecordingFormatError(f"{origin} line {lineno}: a record must be a JSON object")
        yield lineno, rec


def _need(rec: dict[str, Any], name: str, types: type | tuple[type, ...], where: str) -> Any:
    value = rec.get(name)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise RecordingFormatError(f"{where}: field {name!r} is missing or has the wrong type")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _frame_from_record(rec: dict[str, Any], where: str) -> dict[str, Any]:
    seq = _need(rec, "seq", int, where)
    ts = _need(rec, "ts", (int, float), where)
    mono = rec.get("mono_ns", 0)
    if not isinstance(mono, int):
        raise RecordingFormatError(f"{where}: field 'mono_ns' must be an integer")
    direction = rec.get("dir")
    if direction not in (Direction.C2S.value, Direction.S2C.value):
        raise RecordingFormatError(f'{where}: \'dir\' must be "c2s" or "s2c"')
    channel = rec.get("channel")
    if channel not in {c.value for c in Channel}:
        raise RecordingFormatError(f"{where}: unknown channel {channel!r}")
    if "text" in rec:
        raw = _need(rec, "text", str, where).encode("utf-8")
    elif "base64" in rec:
        try:
            raw = base64.b64decode(_need(rec, "base64", str, where), validate=True)
        except ValueError as exc:
            raise RecordingFormatError(f"{where}: 'base64' is not valid base64") from exc
    else:
        raise RecordingFormatError(f"{where}: a frame needs 'text' or 'base64'")
    c = classify(raw, channel)
    exchange = rec.get("exchange")
    if exchange is not None and not isinstance(exchange, int):
        raise RecordingFormatError(f"{where}: 'exchange' must be an integer")
    return {
        "seq": seq,
        "ts": float(ts),
        "mono_ns": mono,
        "direction": direction,
        "channel": channel,
        "kind": c.kind.value,
        "method": c.method,
        "msg_id": c.msg_id,
        "error_code": c.error_code,
        "size": len(raw),
        "complete": bool(rec.get("complete", True)),
        "partial_parse": c.partial,
        "raw": raw,
        "http_exchange_id": exchange,
        "sse_id": rec.get("sse_id"),
        "sse_event": rec.get("sse_event"),
    }


def loads_recording(data: bytes, origin: str = "recording") -> Recording:
    """Parse, upgrade and validate a recording file's bytes (pure).

    Raises :class:`RecordingFormatError` with one line (file, line number, reason) for anything
    that is not a complete, well-formed recording: a truncated file, a hand-edit that broke a
    line or a count, an unknown format version.
    """
    if not data.strip():
        raise RecordingFormatError(f"{origin} is empty")
    stream = _lines(data, origin)
    try:
        lineno, header = next(stream)
    except StopIteration:  # pragma: no cover - data.strip() was non-empty
        raise RecordingFormatError(f"{origin} is empty") from None
    if header.get("format") != FORMAT_NAME:
        hint = ""
        if "log" in header and isinstance(header.get("log"), dict):
            hint = " (this looks like a HAR file; mcptape imports its own JSON Lines recordings)"
        raise RecordingFormatError(
            f"{origin} is not an mcptape recording: its first line has no"
            f' "format": "{FORMAT_NAME}"{hint}'
        )
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordingFormatError(f"{origin}: format version {version!r} is not a version number")
    if version > FORMAT_VERSION:
        raise RecordingFormatError(
            f"{origin} is format version {version}, newer than this mcptape reads"
            f" (up to {FORMAT_VERSION}); upgrade mcptape"
        )
    records: Iterator[tuple[int, dict[str, Any]]] = stream
    for v in range(version, FORMAT_VERSION):
        records = UPGRADES[v](records)

    sessions: dict[str, SessionRecording] = {}
    order: list[SessionRecording] = []
    counts = {"sessions": 0, "http_exchanges": 0, "frames": 0, "findings": 0, "annotations": 0}
    end: dict[str, Any] | None = None
    last_line = lineno
    for lineno, rec in records:
        last_line = lineno
        where = f"{origin} line {lineno}"
        if end is not None:
            raise RecordingFormatError(f"{where}: data after the end record")
        kind = rec.get("type")
        if kind == "end":
            end = rec
            continue
        if kind == "session":
            sid = _need(rec, "id", str, where)
            _need(rec, "transport", str, where)
            _need(rec, "started_at", (int, float), where)
            if sid in sessions:
                raise RecordingFormatError(f"{where}: session {sid[:8]} appears twice")
            row = _pick(rec, SESSION_FIELDS)
            row["status"] = row.get("status") or "ended"
            sessions[sid] = SessionRecording(row)
            order.append(sessions[sid])
            counts["sessions"] += 1
            continue
        if kind not in ("http_exchange", "frame", "finding", "annotation"):
            raise RecordingFormatError(f"{where}: unknown record type {kind!r}")
        sid = rec.get("session")
        owner = sessions.get(sid) if isinstance(sid, str) else None
        if owner is None:
            raise RecordingFormatError(f"{where}: {kind} for a session not declared before it")
        if kind == "http_exchange":
            n = _need(rec, "n", int, where)
            _need(rec, "method", str, where)
            _need(rec, "url", str, where)
            _need(rec, "started_at", (int, float), where)
            owner.exchanges.append({"id": n, **_pick(rec, EXCHANGE_FIELDS)})
            counts["http_exchanges"] += 1
        elif kind == "frame":
            frame = _frame_from_record(rec, where)
            if owner.frames and frame["seq"] <= owner.frames[-1]["seq"]:
                raise RecordingFormatError(f"{where}: frame seq {frame['seq']} is out of order")
            ex = frame["http_exchange_id"]
            if ex is not None and not any(e["id"] == ex for e in owner.exchanges):
                raise RecordingFormatError(f"{where}: frame refers to unknown http exchange {ex}")
            owner.frames.append(frame)
            counts["frames"] += 1
        elif kind == "finding":
            _need(rec, "code", str, where)
            owner.findings.append(_pick(rec, FINDING_FIELDS))
            counts["findings"] += 1
        else:
            owner.annotations.append(_pick(rec, ANNOTATION_FIELDS))
            counts["annotations"] += 1
    if end is None:
        raise RecordingFormatError(
            f"{origin} is truncated: no end record after line {last_line}"
            " (was it cut short while copying?)"
        )
    for key, n in counts.items():
        if key in end and end[key] != n:
            raise RecordingFormatError(
                f"{origin}: the end record says {end[key]} {key} but the file holds {n}"
                " (truncated or edited by hand?)"
            )
    return Recording(order, origin=origin, version=version)


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a recording file; a missing or unreadable file is one clear line."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError as exc:
        raise NotFoundError(f"no such recording file: {path}") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{path} is a directory, not a recording file") from exc
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return loads_recording(data, str(path))


# ============================================================================ store → model


async def load_session(store: Store, ref: str) -> SessionRecording:
    """One session from the database (resolved by id prefix or name) as a SessionRecording."""
    row = await store.resolve_session(ref)
    sid = str(row["id"])
    exchanges = await store.http_exchanges(sid)
    numbers = {ex["id"]: n for n, ex in enumerate(exchanges, start=1)}
    frames: list[dict[str, Any]] = []
    async for f in store.iter_frames(sid):
        f = dict(f)
        if f.get("http_exchange_id") is not None:
            f["http_exchange_id"] = numbers.get(f["http_exchange_id"])
        f["raw"] = bytes(f["raw"])
        frames.append(f)
    findings = await store.recorded_findings(sid)
    for fi in findings:
        fi.pop("id", None)
    return SessionRecording(
        session=dict(row),
        exchanges=[{**ex, "id": numbers[ex["id"]]} for ex in exchanges],
        frames=frames,
        findings=findings,
        annotations=await _annotations(store, sid),
    )


async def _annotations(store: Store, session_id: str) -> list[dict[str, Any]]:
    """A session's annotations in a stable order (the store's read API has no query for them)."""
    import sqlalchemy as sa

    from mcp_proxy.store.schema import annotations

    return await store._all(
        sa.select(*[annotations.c[name] for name in ANNOTATION_FIELDS])
        .where(annotations.c.session_id == session_id)
        .order_by(annotations.c.created_at, annotations.c.id)
    )


async def load_sessions(store: Store, refs: Sequence[str]) -> Recording:
    """Sessions from the database in the order given (duplicates once)."""
    out: list[SessionRecording] = []
    seen: set[str] = set()
    for ref in refs:
        s = await load_session(store, ref)
        if s.id not in seen:
            seen.add(s.id)
            out.append(s)
    return Recording(out, origin="database")


async def export_bytes(store: Store, refs: Sequence[str], fmt: str = "jsonl") -> bytes:
    """What ``mcptape export`` writes, as bytes: for the dashboard's download buttons."""
    recording = await load_sessions(store, refs)
    if fmt == "har":
        return dumps_har(recording)
    if fmt != "jsonl":
        raise UserError(f"unknown export format {fmt!r} (jsonl or har)")
    return dumps_jsonl(recording)


# ============================================================================ model → store


@dataclass
class ImportResult:
    """What an import created: ``(original id, new id)`` per session, in file order."""

    sessions: list[tuple[str, str]]
    frames: int


def import_recording(
    recording: Recording,
    db_url: str,
    *,
    extra_meta: dict[str, Any] | None = None,
    flush_interval: float = 0.02,
) -> ImportResult:
    """Load a recording into a database through the :class:`~mcp_proxy.recorder.Recorder`.

    The recorder is the one writer of traffic, so imported frames are classified, numbered and
    stored exactly as live ones. Each session gets a new id (importing the same file twice, or
    into the database it came from, never collides); the original id, the file and its format
    version are kept in ``meta["imported_from"]``. A session exported while still live is
    imported as ended: nothing will ever write to the copy.
    """
    from mcp_proxy.recorder import Recorder

    warnings: list[str] = []
    recorder = Recorder(db_url, flush_interval=flush_interval, warn=warnings.append)
    recorder.start()
    recorder.ready.wait(60)
    if recorder.store_error:
        recorder.close()
        from mcp_proxy.errors import StoreError

        raise StoreError(recorder.store_error)
    created: list[tuple[str, str]] = []
    notes: list[dict[str, Any]] = []
    total = 0
    try:
        for s in recording.sessions:
            row = s.session
            meta = dict(row.get("meta") or {})
            meta["imported_from"] = {
                "session_id": s.id,
                "origin": recording.origin,
                "format_version": recording.version,
                **({"status": row["status"]} if row.get("status") == "live" else {}),
            }
            if extra_meta:
                meta.update(extra_meta)
            fields = {
                k: row.get(k)
                for k in SESSION_FIELDS
                if k not in ("id", "transport", "meta", "frame_count", "status", "gap_count")
            }
            fields["pid"] = None
            new_id = recorder.new_session(transport=str(row["transport"]), **fields)
            local = {
                ex["id"]: recorder.new_exchange(new_id, **_pick(ex, EXCHANGE_FIELDS))
                for ex in s.exchanges
            }
            seq_map: dict[int, int] = {}
            for n, f in enumerate(s.frames, start=1):
                seq_map[int(f["seq"])] = n
                ex = f.get("http_exchange_id")
                recorder.put(
                    new_id,
                    Frame(
                        Direction(f["direction"]),
                        Channel(f["channel"]),
                        bytes(f["raw"]),
                        int(f.get("mono_ns") or 0),
                        float(f["ts"]),
                        complete=bool(f.get("complete", True)),
                        http_exchange=local.get(ex) if ex is not None else None,
                        sse_id=f.get("sse_id"),
                        sse_event=f.get("sse_event"),
                    ),
                )
                total += 1
            for fi in s.findings:
                fields_fi = _pick(fi, FINDING_FIELDS)
                seqs = fields_fi.get("frame_seqs")
                if isinstance(seqs, list):
                    fields_fi["frame_seqs"] = [
                        seq_map.get(q, q) for q in seqs if isinstance(q, int)
                    ]
                recorder.add_finding(
                    new_id, **{k: v for k, v in fields_fi.items() if v is not None}
                )
            for an in s.annotations:
                seq = an.get("frame_seq")
                notes.append(
                    {
                        **_pick(an, ANNOTATION_FIELDS),
                        "session_id": new_id,
                        "frame_seq": seq_map.get(seq, seq) if isinstance(seq, int) else None,
                        "created_at": float(an.get("created_at") or row["started_at"]),
                    }
                )
            final = {
                k: row.get(k)
                for k in SESSION_FIELDS
                if k not in ("id", "transport", "frame_count", "gap_count", "meta")
                and row.get(k) is not None
            }
            final["status"] = "ended" if row.get("status") == "live" else row.get("status")
            final["meta"] = meta
            final["gap_count"] = int(row.get("gap_count") or 0)
            recorder.update_session(new_id, **final)
            created.append((s.id, new_id))
    finally:
        stats = recorder.close(timeout=120)
    if stats.frames_lost:
        from mcp_proxy.errors import StoreError

        raise StoreError(
            f"import incomplete: {stats.frames_lost} frame(s) could not be written"
            f" ({stats.last_error or 'unknown error'})"
        )
    if notes:
        _write_annotations(db_url, notes)
    return ImportResult(created, total)


def _write_annotations(db_url: str, rows: list[dict[str, Any]]) -> None:
    """Annotations are people's words, not traffic: written after the recorder has finished."""
    from mcp_proxy.errors import StoreError
    from mcp_proxy.store import writes
    from mcp_proxy.store.schema import annotations

    engine = writes.open_for_writing(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(annotations.insert(), rows)
    except Exception as exc:
        raise StoreError(f"annotations not imported: {str(exc).splitlines()[0]}") from exc
    finally:
        engine.dispose()


# ============================================================================ HAR 1.2


def _iso(ts: float | None) -> str:
    """HAR wants ISO 8601 with milliseconds and a zone."""
    dt = datetime.fromtimestamp(ts or 0.0, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _ms(a: float | None, b: float | None) -> float:
    """Milliseconds from a to b, never negative (clocks: both are the relay's wall clock)."""
    if a is None or b is None:
        return 0.0
    return round(max(0.0, (b - a) * 1000.0), 3)


def _headers(pairs: Any) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    if isinstance(pairs, dict):
        pairs = list(pairs.items())
    for item in pairs or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append({"name": str(item[0]), "value": str(item[1])})
    return out


def _header(pairs: list[dict[str, str]], name: str) -> str | None:
    for h in pairs:
        if h["name"].lower() == name:
            return h["value"]
    return None


STATUS_TEXT = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def sse_event_bytes(f: dict[str, Any]) -> bytes:
    """The wire bytes of one recorded SSE event.

    A relay that keeps whole events stores them as the frame's raw bytes (they start with a
    field name or a comment); one that keeps only the ``data`` payload gets its event rebuilt in
    the form sse-starlette writes (CRLF line ends), so the concatenated HAR body reads as SSE.
    """
    raw = bytes(f["raw"])
    head = raw.lstrip()[:8]
    if head.startswith((b"data:", b"event:", b"id:", b"retry:", b":")) or raw.startswith(b"\r\n"):
        return raw
    lines: list[bytes] = []
    if f.get("sse_id") is not None:
        lines.append(b"id: " + str(f["sse_id"]).encode())
    if f.get("sse_event") is not None:
        lines.append(b"event: " + str(f["sse_event"]).encode())
    for part in raw.split(b"\n"):
        lines.append(b"data: " + part)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _sse_data(f: dict[str, Any]) -> bytes:
    raw = bytes(f["raw"])
    head = raw.lstrip()[:8]
    if not head.startswith((b"data:", b"event:", b"id:", b"retry:", b":")):
        return raw
    from mcp_proxy.framing import SSEParser

    parser = SSEParser()
    events = parser.feed(raw)
    tail = parser.flush()
    if tail is not None:
        events.append(tail)
    return b"\n".join(e.data for e in events)


def _content(body: bytes, mime: str) -> dict[str, Any]:
    text = text_or_none(body)
    if text is None:
        return {
            "size": len(body),
            "mimeType": mime,
            "text": base64.b64encode(body).decode(),
            "encoding": "base64",
        }
    return {"size": len(body), "mimeType": mime, "text": text}


def har_entry(s: SessionRecording, ex: dict[str, Any]) -> dict[str, Any]:
    """One HTTP exchange as a HAR 1.2 entry; SSE events go to ``_sseEvents`` and the body."""
    frames = [f for f in s.frames if f.get("http_exchange_id") == ex["id"]]
    req_frames = [f for f in frames if f["direction"] == Direction.C2S.value]
    resp_frames = [f for f in frames if f["direction"] == Direction.S2C.value]
    req_headers = _headers(ex.get("request_headers"))
    resp_headers = _headers(ex.get("response_headers"))
    url = str(ex["url"])
    req_body = b"".join(bytes(f["raw"]) for f in req_frames)
    request: dict[str, Any] = {
        "method": str(ex["method"]),
        "url": url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": req_headers,
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query)],
        "headersSize": -1,
        "bodySize": len(req_body) if req_frames or ex.get("request_size") is not None else 0,
    }
    if req_body:
        mime = _header(req_headers, "content-type") or "application/json"
        text = text_or_none(req_body)
        request["postData"] = {
            "mimeType": mime,
            "text": text if text is not None else base64.b64encode(req_body).decode(),
        }
    sse = [f for f in resp_frames if f["channel"] == Channel.SSE.value]
    if sse:
        body = b"".join(sse_event_bytes(f) for f in sse)
        mime = _header(resp_headers, "content-type") or "text/event-stream"
    else:
        body = b"".join(bytes(f["raw"]) for f in resp_frames)
        mime = _header(resp_headers, "content-type") or (
            "application/json" if body else "x-unknown"
        )
    status = ex.get("status")
    response: dict[str, Any] = {
        "status": int(status) if isinstance(status, int) else 0,
        "statusText": STATUS_TEXT.get(status or 0, "") if status else (ex.get("error") or ""),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": resp_headers,
        "content": _content(body, mime),
        "redirectURL": _header(resp_headers, "location") or "",
        "headersSize": -1,
        "bodySize": len(body) if status else -1,
    }
    started = float(ex["started_at"])
    first = ex.get("first_byte_at")
    ended = ex.get("ended_at")
    wait = _ms(started, first if first is not None else ended)
    receive = _ms(first, ended) if first is not None else 0.0
    timings = {
        "blocked": -1,
        "dns": -1,
        "connect": -1,
        "send": 0.0,
        "wait": wait,
        "receive": receive,
        "ssl": -1,
    }
    entry: dict[str, Any] = {
        "startedDateTime": _iso(started),
        "time": round(wait + receive, 3),
        "request": request,
        "response": response,
        "cache": {},
        "timings": timings,
        "_mcptape": {
            "session": s.id,
            "exchange": ex["id"],
            "outcome": ex.get("outcome"),
            **({"error": ex["error"]} if ex.get("error") else {}),
        },
    }
    if sse:
        entry["_sseEvents"] = [
            {
                "time": f["ts"],
                "eventId": f.get("sse_id"),
                "eventType": f.get("sse_event") or "message",
                "data": text_or_none(_sse_data(f)) or "",
            }
            for f in sse
        ]
    return entry


def to_har(recording: Recording) -> dict[str, Any]:
    """HTTP sessions as one HAR 1.2 log (pure). stdio sessions have no HTTP to show: refused."""
    stdio = [
        s.label
        for s in recording.sessions
        if not s.exchanges and s.session.get("transport") == "stdio"
    ]
    if stdio:
        raise UserError(
            f"HAR holds HTTP traffic; session {stdio[0]} was recorded over stdio"
            " (export it as JSON Lines instead)"
        )
    pages = []
    entries = []
    for s in recording.sessions:
        page_id = f"session-{s.id[:12]}"
        pages.append(
            {
                "startedDateTime": _iso(s.session.get("started_at")),
                "id": page_id,
                "title": f"{s.session.get('name') or 'mcptape session'} {s.id[:8]}",
                "pageTimings": {"onContentLoad": -1, "onLoad": -1},
            }
        )
        for ex in s.exchanges:
            entry = har_entry(s, ex)
            entry["pageref"] = page_id
            entries.append(entry)
    entries.sort(
        key=lambda e: (e["startedDateTime"], e["_mcptape"]["session"], e["_mcptape"]["exchange"])
    )
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "mcptape", "version": __version__},
            "pages": pages,
            "entries": entries,
        }
    }


def dumps_har(recording: Recording) -> bytes:
    """HAR as bytes, indented (people open these in editors), deterministic like JSON Lines."""
    return (json.dumps(to_har(recording), ensure_ascii=False, indent=2) + "\n").encode("utf-8")


# ============================================================================ sources


def split_source(ref: str) -> tuple[str, str | None] | None:
    """``(path, session pick)`` when a SOURCE names a recording file; None for a database ref.

    ``recordings/x.jsonl#2`` picks the second session of the file; files win over session names,
    so ``recordings/x.jsonl`` is never looked up in the database.
    """
    if Path(ref).is_file():
        return ref, None
    base, _, pick = ref.partition("#")
    if Path(base).is_file() or base.endswith((".jsonl", ".json")) or os.sep in base:
        return base, pick or None
    return None


async def load_source(ref: str, store_url: str | None) -> tuple[Recording, SessionRecording]:
    """A SOURCE argument (``FILE``, ``FILE#SESSION`` or a database session) → one session."""
    file_ref = await asyncio.to_thread(split_source, ref)
    if file_ref is not None:
        rec = await asyncio.to_thread(read_recording, file_ref[0])
        return rec, rec.one(file_ref[1])
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import Store

    store = await Store.open(resolve_url(store_url))
    try:
        rec = await load_sessions(store, [ref])
    finally:
        await store.close()
    rec.origin = f"session {rec.sessions[0].label}"
    return rec, rec.sessions[0]


def frame_messages(s: SessionRecording) -> Iterator[tuple[dict[str, Any], Any]]:
    """Each JSON-RPC frame with its parsed message (noise, stderr and empty frames left out)."""
    for f in s.frames:
        if f["kind"] in ("request", "response", "error", "notification", "batch"):
            msg = parse_json(bytes(f["raw"]))
            if msg is not None:
                yield f, msg
