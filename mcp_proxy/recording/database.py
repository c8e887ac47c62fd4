"""The database side of recordings: load sessions into the model, import the model back.

Loading resolves session references through the store's read API (id prefix or name) and then
reads each session's rows in bulk through :mod:`mcp_proxy.store.recordings` in a worker thread,
so the dashboard's event loop is never blocked by a 50,000-frame export. Importing writes each
session in one transaction, with new ids, so importing a file twice never collides.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Frame
from mcp_proxy.recording.model import (
    ANNOTATION_FIELDS,
    EXCHANGE_FIELDS,
    FINDING_FIELDS,
    SESSION_FIELDS,
    Progress,
    Recording,
    SessionRecording,
    pick,
)

if TYPE_CHECKING:
    from mcp_proxy.redact import Redactor
    from mcp_proxy.store.queries import Store


# ============================================================================ store → model


def read_session(url: str, session_id: str, progress: Progress | None = None) -> SessionRecording:
    """One session (by exact id) as a :class:`SessionRecording`, read in bulk (sync)."""
    from mcp_proxy.store.columns import FRAME_COLUMNS
    from mcp_proxy.store.recordings import RecordingStore

    with RecordingStore(url) as rs:
        rows = rs.session_rows(session_id)
        numbers = {ex["id"]: n for n, ex in enumerate(rows.exchanges, start=1)}
        frames: list[dict[str, Any]] = []
        ex_col = FRAME_COLUMNS.index("http_exchange_id")
        complete_col = FRAME_COLUMNS.index("complete")
        partial_col = FRAME_COLUMNS.index("partial_parse")
        for page in rs.iter_frames(session_id):
            for t in page:
                f = dict(zip(FRAME_COLUMNS, t, strict=True))
                f["complete"] = bool(t[complete_col])
                f["partial_parse"] = bool(t[partial_col])
                if t[ex_col] is not None:
                    f["http_exchange_id"] = numbers.get(t[ex_col])
                frames.append(f)
            if progress is not None:
                progress(len(page))
    return SessionRecording(
        session=rows.session,
        exchanges=[{**ex, "id": numbers[ex["id"]]} for ex in rows.exchanges],
        frames=frames,
        findings=rows.findings,
        annotations=rows.annotations,
    )


async def load_session(
    store: Store, ref: str, progress: Progress | None = None
) -> SessionRecording:
    """One session from the database (resolved by id prefix or name) as a SessionRecording."""
    row = await store.resolve_session(ref)
    return await asyncio.to_thread(read_session, store.url, str(row["id"]), progress)


async def load_sessions(
    store: Store, refs: Sequence[str], progress: Progress | None = None
) -> Recording:
    """Sessions from the database in the order given (duplicates once)."""
    out: list[SessionRecording] = []
    seen: set[str] = set()
    for ref in refs:
        row = await store.resolve_session(ref)
        sid = str(row["id"])
        if sid not in seen:
            seen.add(sid)
            out.append(await asyncio.to_thread(read_session, store.url, sid, progress))
    return Recording(out, origin="database")


async def resolve_sessions(store: Store, refs: Sequence[str]) -> list[dict[str, Any]]:
    """The session rows the references name, in the order given (duplicates once)."""
    rows: dict[str, dict[str, Any]] = {}
    for ref in refs:
        row = await store.resolve_session(ref)
        rows.setdefault(str(row["id"]), row)
    return list(rows.values())


def read_sessions(
    url: str, session_ids: Sequence[str], progress: Progress | None = None
) -> Recording:
    """Sessions by exact id, read in bulk in the calling thread (what the CLI uses).

    Reading in a worker thread while an event loop and the async store are alive (as
    :func:`load_sessions` must, for the dashboard) was measured 2-3 times slower for the
    same rows; a command has nothing else to do meanwhile.
    """
    return Recording([read_session(url, sid, progress) for sid in session_ids], origin="database")


def stream_jsonl(
    url: str, session_ids: Sequence[str], progress: Progress | None = None
) -> Iterator[bytes]:
    """Sessions by exact id as JSON Lines, straight from the store (what ``export`` writes).

    The same bytes as ``iter_jsonl(read_sessions(...))`` (a test keeps them equal) without the
    model in between: frames stream from ``frame_rows`` a page at a time as stored tuples
    (:meth:`~mcp_proxy.store.recordings.RecordingStore.iter_frame_codes`), so memory stays one
    page whatever the session's size, and no frame becomes a dict. Building a dict per frame
    and reading through the decoding view were most of an export's time.
    """
    from mcp_proxy.recording.jsonl import frame_chunks_from_rows, iter_jsonl_parts
    from mcp_proxy.store.recordings import RecordingStore, class_key_parts

    with RecordingStore(url) as rs:
        names: dict[int, str] = {}

        def classes(key: int) -> tuple[str, str, str, str | None]:
            direction, channel, kind, code = class_key_parts(key)
            if code is not None and code not in names:
                names.update(rs.method_names())
            return direction, channel, kind, None if code is None else names.get(code)

        def parts() -> Iterator[tuple[SessionRecording, Any]]:
            for sid in session_ids:
                rows = rs.session_rows(sid)
                numbers = {ex["id"]: n for n, ex in enumerate(rows.exchanges, start=1)}
                head = SessionRecording(
                    session=rows.session,
                    exchanges=[{**ex, "id": numbers[ex["id"]]} for ex in rows.exchanges],
                    findings=rows.findings,
                    annotations=rows.annotations,
                )
                pages = rs.iter_frame_codes(sid)
                yield head, frame_chunks_from_rows(sid, pages, classes, numbers)

        yield from iter_jsonl_parts(parts(), progress)


async def export_bytes(store: Store, refs: Sequence[str], fmt: str = "jsonl") -> bytes:
    """What ``mcptape export`` writes, as bytes: for the dashboard's download buttons."""
    from mcp_proxy.recording.registry import get_format

    chosen = get_format(fmt)
    writer = chosen.need_writer()
    if chosen.write_db is not None:
        ids = [str(r["id"]) for r in await resolve_sessions(store, refs)]
        stream = chosen.write_db
        return await asyncio.to_thread(lambda: b"".join(stream(store.url, ids, None)))
    recording = await load_sessions(store, refs)
    return b"".join(writer(recording, None))


# ============================================================================ model → store


@dataclass
class ImportResult:
    """What an import created: ``(original id, new id)`` per session, in file order."""

    sessions: list[tuple[str, str]]
    frames: int
    #: Frames written per session, in the order of ``sessions``.
    counts: list[int] = field(default_factory=list)


#: Frames per page handed to the store (and looked at by the redaction prefilter at once).
IMPORT_PAGE = 5000
#: A session's frames as row tuples (``mcp_proxy.store.columns.FRAME_COLUMNS`` order).
type Rows = list[tuple[Any, ...]]


def _model_rows(s: SessionRecording) -> Rows:
    """The model's frame dicts as row tuples (formats read into the model: HAR)."""
    out: Rows = []
    for f in s.frames:
        raw = bytes(f["raw"])
        out.append(
            (
                f["seq"],
                float(f["ts"]),
                int(f.get("mono_ns") or 0),
                f["direction"],
                f["channel"],
                f["kind"],
                f.get("method"),
                f.get("msg_id"),
                f.get("error_code"),
                len(raw),
                bool(f.get("complete", True)),
                bool(f.get("partial_parse", False)),
                raw,
                f.get("http_exchange_id"),
                f.get("sse_id"),
                f.get("sse_event"),
            )
        )
    return out


def _frame_pages(
    rows: Rows, progress: Progress | None, redactor: Redactor
) -> Iterator[tuple[Rows, set[int]]]:
    """The session's rows a page at a time, each with the positions of its redacted rows: the
    file's bytes go in as they are unless the policy hides a secret in them, as ``record``
    would have. The prefilter looks at a page's bodies together (:meth:`Redactor.suspects`);
    only the bodies it cannot clear take the whole redactor."""
    suspects = redactor.suspects if redactor.enabled else None
    for start in range(0, len(rows), IMPORT_PAGE):
        page = rows[start : start + IMPORT_PAGE]
        marked: set[int] = set()
        if suspects is not None:
            for i in suspects([r[12] for r in page]):
                r = page[i]
                raw = r[12]
                out = redactor.frame(Frame(r[3], r[4], raw, 0, 0.0))
                if out.raw is not raw:
                    new = bytes(out.raw)
                    page[i] = (*r[:9], len(new), *r[10:12], new, *r[13:])
                    marked.add(i)
        yield page, marked
        if progress is not None:
            progress(len(page))


def import_redactor(redact: bool | None = None) -> Redactor:
    """The policy an import records with: on by default, like ``record`` for every transport.

    ``redact`` is the command's choice (``--no-redact`` gives False); None lets
    ``MCPTAPE_REDACT`` decide, as it does for the recorder process, and otherwise redacts.
    Switching it off says so on stderr (:func:`~mcp_proxy.redact.redactor_for_recording`).
    """
    from mcp_proxy.redact import redactor_for_recording, redactor_from_env

    if redact is None:
        env = redactor_from_env()
        if env is not None and env.enabled:
            return env
        redact = env is None
    return redactor_for_recording(redact)


def _redacted_exchange(ex: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """An HTTP exchange row with its URL and secret headers redacted as the relay records them."""
    if not redactor.enabled:
        return ex
    out = dict(ex)
    if isinstance(out.get("url"), str):
        out["url"] = redactor.url(out["url"])
    for key in ("request_headers", "response_headers"):
        pairs = out.get(key)
        if isinstance(pairs, list):
            out[key] = redactor.headers(
                [p for p in pairs if isinstance(p, (list, tuple)) and len(p) >= 2]
            )
    return out


def _session_row(
    recording: Recording, s: SessionRecording, rows: Rows, extra: dict[str, Any] | None
) -> dict[str, Any]:
    row = s.session
    meta = dict(row.get("meta") or {})
    meta["imported_from"] = {
        "session_id": s.id,
        "origin": recording.origin,
        "format_version": recording.version,
        **({"status": row["status"]} if row.get("status") == "live" else {}),
    }
    if extra:
        meta.update(extra)
    out = {k: row.get(k) for k in SESSION_FIELDS if k not in ("id", "frame_count")}
    out["transport"] = str(row["transport"])
    # A session exported while still live is imported as ended: nothing will write to the copy.
    out["status"] = "ended" if row.get("status") in (None, "live") else row["status"]
    out["gap_count"] = int(row.get("gap_count") or 0)
    out["meta"] = meta
    out["pid"] = None
    if out.get("ended_at") is None and rows:
        out["ended_at"] = float(rows[-1][1])
    return out


def import_recording(
    recording: Recording,
    db_url: str,
    *,
    extra_meta: dict[str, Any] | None = None,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
) -> ImportResult:
    """Load a recording into a database, each session in one transaction with a new id.

    The original id, the file and its format version are kept in ``meta["imported_from"]``.
    Frames are renumbered 1, 2, … as a live recording numbers them; findings and annotations
    that point at frames follow the new numbers. Frames were classified when the file was read
    (by the one classifier every producer uses); their bytes go in as in the file, redacted by
    the recording policy (``redactor``; default :func:`import_redactor`: on, as ``record``) and
    then marked ``redacted`` — a file someone sends you is recorded like live traffic.
    """
    rows = [_model_rows(s) for s in recording.sessions]
    return import_rows(
        recording, rows, db_url, extra_meta=extra_meta, progress=progress, redactor=redactor
    )


def import_rows(
    recording: Recording,
    rows: Sequence[Rows],
    db_url: str,
    *,
    extra_meta: dict[str, Any] | None = None,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
) -> ImportResult:
    """:func:`import_recording` of sessions whose frames are row tuples (``rows[i]`` for
    ``recording.sessions[i]``, whose ``frames`` are not read): what a JSON Lines file reads
    into (:func:`~mcp_proxy.recording.jsonl.loads_rows`), with no dict per frame."""
    from mcp_proxy.store.recordings import RecordingStore

    if redactor is None:
        redactor = import_redactor()
    created: list[tuple[str, str]] = []
    counts: list[int] = []
    total = 0
    with RecordingStore(db_url, write=True) as rs:
        for s, frames in zip(recording.sessions, rows, strict=True):
            seq_map = (
                {int(r[0]): n for n, r in enumerate(frames, start=1)}
                if s.findings or s.annotations
                else {}
            )
            exchanges = [
                {"id": ex["id"], **_redacted_exchange(pick(ex, EXCHANGE_FIELDS), redactor)}
                for ex in s.exchanges
            ]
            new_id, n = rs.import_session(
                _session_row(recording, s, frames, extra_meta),
                exchanges,
                _frame_pages(frames, progress, redactor),
                _findings(s, seq_map),
                _notes(s, seq_map),
            )
            created.append((s.id, new_id))
            counts.append(n)
            total += n
    return ImportResult(created, total, counts)


def import_file(
    path: str | os.PathLike[str],
    db_url: str,
    fmt: str | None = None,
    *,
    read_progress: Progress | None = None,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
) -> tuple[Recording, ImportResult]:
    """``mcptape import FILE``: read it in whatever format it is, then import it.

    A JSON Lines file is read into row tuples and written from them (:func:`import_rows`);
    other formats go through the model (:func:`import_recording`).
    """
    from mcp_proxy.recording.jsonl import loads_rows
    from mcp_proxy.recording.model import read_bytes
    from mcp_proxy.recording.registry import detect, get_format

    data = read_bytes(path)
    chosen = get_format(fmt) if fmt is not None else detect(path, data[:4096])
    if chosen is None or chosen.name == "jsonl":
        recording, rows = loads_rows(data, str(path), read_progress)
        del data
        return recording, import_rows(recording, rows, db_url, progress=progress, redactor=redactor)
    recording = chosen.need_reader()(data, str(path), read_progress)
    del data
    return recording, import_recording(recording, db_url, progress=progress, redactor=redactor)


def _findings(s: SessionRecording, seq_map: dict[int, int]) -> list[dict[str, Any]]:
    out = []
    for fi in s.findings:
        row = {k: v for k, v in pick(fi, FINDING_FIELDS).items() if v is not None}
        seqs = row.get("frame_seqs")
        if isinstance(seqs, list):
            row["frame_seqs"] = [seq_map.get(q, q) for q in seqs if isinstance(q, int)]
        row.setdefault("severity", "info")
        row.setdefault("title", row["code"])
        row.setdefault("source", "recorder")
        row.setdefault("created_at", float(s.session.get("started_at") or 0.0))
        out.append(row)
    return out


def _notes(s: SessionRecording, seq_map: dict[int, int]) -> list[dict[str, Any]]:
    out = []
    for an in s.annotations:
        seq = an.get("frame_seq")
        out.append(
            {
                **pick(an, ANNOTATION_FIELDS),
                "frame_seq": seq_map.get(seq, seq) if isinstance(seq, int) else None,
                "created_at": float(an.get("created_at") or s.session["started_at"]),
            }
        )
    return out


# ============================================================================ sources


def split_source(ref: str) -> tuple[str, str | None] | None:
    """``(path, session pick)`` when a SOURCE names a recording file; None for a database ref.

    ``recordings/x.jsonl#2`` picks the second session of the file; files win over session names,
    so ``recordings/x.jsonl`` is never looked up in the database.
    """
    if Path(ref).is_file():
        return ref, None
    base, _, pick_ = ref.partition("#")
    if Path(base).is_file() or base.endswith((".jsonl", ".json", ".har")) or os.sep in base:
        return base, pick_ or None
    return None


async def load_source(
    ref: str, store_url: str | None, progress: Progress | None = None
) -> tuple[Recording, SessionRecording]:
    """A SOURCE argument (``FILE``, ``FILE#SESSION`` or a database session) → one session.

    A file is read by whichever registered format recognises it (JSON Lines, HAR, …);
    ``progress`` is told of the frames read as they are (a terminal's progress bar).
    """
    from mcp_proxy.recording.registry import read_file

    file_ref = await asyncio.to_thread(split_source, ref)
    if file_ref is not None:
        rec = await asyncio.to_thread(read_file, file_ref[0], None, progress)
        return rec, rec.one(file_ref[1])
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import Store

    store = await Store.open(resolve_url(store_url))
    try:
        rec = await load_sessions(store, [ref], progress)
    finally:
        await store.close()
    rec.origin = f"session {rec.sessions[0].label}"
    return rec, rec.sessions[0]
