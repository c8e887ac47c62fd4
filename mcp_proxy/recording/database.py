"""The database side of recordings: load sessions into the model, import the model back.

Loading resolves session references through the store's read API (id prefix or name) and then
reads each session's rows in bulk (its frames from :func:`mcp_proxy.store.stream.shaped_pages`,
the rest through :mod:`mcp_proxy.store.recordings`) in a worker thread,
so the dashboard's event loop is never blocked by a 50,000-frame export. Importing writes each
session in one transaction, with new ids, so importing a file twice never collides.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_proxy.recording.importer import (
    IMPORT_PAGE,
    ImportResult,
    import_file,
    import_recording,
    import_redactor,
)
from mcp_proxy.recording.model import (
    Progress,
    Recording,
    SessionRecording,
    frame_dicts,
)

if TYPE_CHECKING:
    from mcp_proxy.store.queries import Store

__all__ = [
    "IMPORT_PAGE",
    "ImportResult",
    "export_bytes",
    "import_file",
    "import_recording",
    "import_redactor",
    "load_session",
    "load_sessions",
    "load_source",
    "read_session",
    "read_sessions",
    "resolve_sessions",
    "split_source",
    "stream_jsonl",
]


# ============================================================================ store → model


def read_session(url: str, session_id: str, progress: Progress | None = None) -> SessionRecording:
    """One session (by exact id) as a :class:`SessionRecording` (sync): its frames from the one
    bulk stream of frame rows (:func:`~mcp_proxy.store.stream.shaped_pages`), named by the
    store's one way back to :data:`~mcp_proxy.store.columns.FRAME_COLUMNS`
    (:func:`~mcp_proxy.store.stream.named_rows`), as the model's dicts
    (:func:`~mcp_proxy.recording.model.frame_dicts`): the flags as booleans, exchange ids as
    the session's numbers."""
    from mcp_proxy.store.recordings import RecordingStore
    from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, named_rows, shaped_pages

    with RecordingStore(url) as rs:
        rows = rs.session_rows(session_id)
    numbers = {ex["id"]: n for n, ex in enumerate(rows.exchanges, start=1)}
    frames: list[dict[str, Any]] = []
    shapes, pages = shaped_pages(url, session_id, SHAPED_FRAME_COLUMNS)
    for page in pages:
        start = len(frames)
        frames += frame_dicts(named_rows(shapes, page))
        for f in frames[start:]:
            f["complete"] = bool(f["complete"])
            f["partial_parse"] = bool(f["partial_parse"])
            if (x := f["http_exchange_id"]) is not None:
                f["http_exchange_id"] = numbers.get(x)
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


#: What an export reads of each frame (:func:`~mcp_proxy.store.stream.shaped_pages`): the
#: writer's row (:data:`~mcp_proxy.recording.jsonl.WriteRow`), the shape as its class key.
EXPORT_COLUMNS = (
    "seq", "ts", "mono_ns", "shape", "msg_id", "error_code", "complete", "raw",
    "http_exchange_id", "sse_id", "sse_event",
)  # fmt: skip


def stream_jsonl(
    url: str, session_ids: Sequence[str], progress: Progress | None = None
) -> Iterator[bytes]:
    """Sessions by exact id as JSON Lines, straight from the store (what ``export`` writes).

    The same bytes as ``iter_jsonl(read_sessions(...))`` (a test keeps them equal) without the
    model in between: frames stream from ``frame_rows`` a page at a time as stored, their
    direction, channel, kind and method as one shape
    (:func:`~mcp_proxy.store.stream.shaped_pages`, as ``show`` reads them), into the one frame
    writer; memory stays one page whatever the session's size, and no frame becomes a dict.
    """
    from mcp_proxy.errors import StoreError
    from mcp_proxy.recording.jsonl import frame_chunks, iter_jsonl_parts
    from mcp_proxy.store.recordings import RecordingStore
    from mcp_proxy.store.stream import shaped_pages

    def parts(rs: RecordingStore) -> Iterator[tuple[SessionRecording, Any]]:
        for sid in session_ids:
            rows = rs.session_rows(sid)
            numbers = {ex["id"]: n for n, ex in enumerate(rows.exchanges, start=1)}
            head = SessionRecording(
                session=rows.session,
                exchanges=[{**ex, "id": numbers[ex["id"]]} for ex in rows.exchanges],
                findings=rows.findings,
                annotations=rows.annotations,
            )
            shapes, pages = shaped_pages(url, sid, EXPORT_COLUMNS)

            def classes(shape: int, shapes: Any = shapes) -> tuple[Any, Any, Any, Any]:
                names = shapes(shape)
                if None in names[:3]:
                    raise StoreError(f"frame shape {shape} holds a code this mcptape does not know")
                return names  # type: ignore[no-any-return]

            yield head, frame_chunks(sid, pages, classes, numbers)

    with RecordingStore(url) as rs:
        yield from iter_jsonl_parts(parts(rs), progress)


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

# Importing lives in mcp_proxy.recording.importer (streamed, one transaction); its public names
# stay importable from here (IMPORT_PAGE, ImportResult, import_file, import_recording,
# import_redactor).

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
