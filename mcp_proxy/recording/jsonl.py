"""JSON Lines, mcptape's own recording format: writer, reader and version upgrades.

Three rules shape the code (the format itself is documented in ``docs/recording-format.md``):

- **Exact bytes.** Frames carry their raw bytes (as text when they are valid UTF-8, base64
  otherwise) so an import reproduces the recording byte for byte. Everything else in a frame
  record (kind, method, id) is informative and recomputed on import by :mod:`mcp_proxy.frames`.
- **Deterministic output.** Exporting the same sessions twice yields identical bytes: no export
  timestamps, a fixed key order, HTTP exchanges renumbered per session in order.
- **Old files keep loading.** The header names a format version; older versions pass through a
  chain of upgrade steps (:data:`UPGRADES`), each a small stream transformer, before validation.

One writer (:func:`frame_chunks`) assembles a frame line from pre-encoded pieces of a row
tuple, never a dict per frame: an export from the database streams stored rows through it,
the model (mock, replay, HAR) reaches it through :func:`mcp_proxy.recording.model.frame_rows`.
One reader (:mod:`mcp_proxy.recording.jsonl_read`) parses each line once into row tuples and
classifies every frame from its bytes.
"""

from __future__ import annotations

# The reading half lives in jsonl_read (this module stayed under the size rule); what is public
# there is re-exported here, where the format is.
import base64
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from json.encoder import encode_basestring as _quote
from typing import Any

from mcp_proxy import __version__
from mcp_proxy.frames import plain_float_texts
from mcp_proxy.recording.jsonl_read import (
    FORMAT_NAME,
    FORMAT_VERSION,
    PROGRESS_STEP,
    UPGRADES,
    Records,
    frame_row,
    line_records,
    loads_recording,
    loads_rows,
)
from mcp_proxy.recording.model import (
    ANNOTATION_FIELDS,
    EXCHANGE_FIELDS,
    FINDING_FIELDS,
    SESSION_FIELDS,
    Progress,
    Recording,
    SessionRecording,
    frame_rows,
    pick,
)

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# ============================================================================ writing


def _dump(record: dict[str, Any]) -> bytes:
    """One record as one line: compact, UTF-8, no NaN (JSON Lines readers everywhere agree)."""
    return _encode(record).encode("utf-8") + b"\n"


_KEYS = {
    name: f',"{name}":'
    for name in ("method", "id", "error_code", "exchange", "sse_id", "sse_event")
}


def _json(value: Any) -> str:
    """One JSON value as compact text: strings through the C encoder directly."""
    if type(value) is str:
        return _quote(value)
    return _encode(value)


def _middle(key: tuple[Any, ...]) -> str:
    """``,"dir":…,"channel":…,"kind":…[,"method":…]`` of a frame's four class fields."""
    direction, channel, kind, method = key
    text = f',"dir":{_json(direction)},"channel":{_json(channel)},"kind":{_json(kind)}'
    if method is not None:
        text += _KEYS["method"] + _json(method)
    return text


#: A frame row as the writer takes it: ``(seq, ts, mono_ns, class, msg_id, error_code,
#: complete, raw, exchange, sse_id, sse_event)`` — ``recording.database.EXPORT_COLUMNS``, where
#: ``class`` is any key that the writer's ``classes`` turns into ``(direction, channel, kind,
#: method)`` (a stored shape integer; a tuple of the four for rows of the model).
WriteRow = tuple[Any, ...]
#: A session's frame lines, as chunks: given the counts to keep and the progress callback.
FrameChunks = Callable[[dict[str, int], Progress | None], Iterator[bytes]]


def frame_chunks(
    session_id: str,
    pages: Iterable[Sequence[WriteRow]],
    classes: Callable[[Any], tuple[Any, Any, Any, Any]],
    exchange_numbers: dict[int, int] | None = None,
) -> FrameChunks:
    """The one frame writer: frame lines from pages of :data:`WriteRow`, a chunk per page.

    ``classes`` turns a row's class key into ``(direction, channel, kind, method)``; its JSON
    is made once per key. ``exchange_numbers`` maps a row's exchange (a database id) to its
    number in the session; None: the rows carry the numbers already. Lines of a page are
    joined as text and encoded once.
    """
    prefix = '{"type":"frame","session":' + _encode(session_id) + ',"seq":'
    middles: dict[Any, str] = {}

    def chunks(counts: dict[str, int], progress: Progress | None) -> Iterator[bytes]:
        for page in pages:
            text = _row_lines(prefix, page, middles, classes, exchange_numbers)
            counts["frames"] += len(page)
            yield text.encode("utf-8")
            if progress is not None:
                progress(len(page))

    return chunks


def _row_lines(
    prefix: str,
    page: Sequence[WriteRow],
    middles: dict[Any, str],
    classes: Callable[[Any], tuple[Any, Any, Any, Any]],
    numbers: dict[int, int] | None,
) -> str:
    """One page of rows as frame lines (the export's hot loop)."""
    out: list[str] = []
    append = out.append
    quote = _quote
    times = [row[1] for row in page]
    stamps = plain_float_texts(times) or [
        float.__repr__(ts) if type(ts) is float else _encode(ts) for ts in times
    ]
    for stamp, (seq, _ts, mono, key, msg_id, code, complete, raw, ex, sse_id, sse_event) in zip(
        stamps, page, strict=True
    ):
        middle = middles.get(key)
        if middle is None:
            middle = middles[key] = _middle(classes(key))
        line = f'{prefix}{seq},"ts":{stamp},"mono_ns":{mono}{middle}'
        if msg_id is not None:
            line += ',"id":' + (quote(msg_id) if type(msg_id) is str else _encode(msg_id))
        if code is not None or ex is not None or sse_id is not None or sse_event is not None:
            if ex is not None and numbers is not None:
                ex = numbers.get(ex)
            line += _rare_fields(code, ex, sse_id, sse_event)
        if not complete:
            line += ',"complete":false'
        if type(raw) is not bytes:
            raw = bytes(raw)  # a memoryview from some drivers
        try:
            append(f'{line},"text":{quote(raw.decode("utf-8"))}}}\n')
        except UnicodeDecodeError:
            append(f'{line},"base64":"{base64.b64encode(raw).decode("ascii")}"}}\n')
    return "".join(out)


def _rare_fields(code: Any, exchange: Any, sse_id: Any, sse_event: Any) -> str:
    """``error_code``, ``exchange``, ``sse_id``, ``sse_event`` in file order, those present."""
    text = ""
    for name, value in (
        ("error_code", code),
        ("exchange", exchange),
        ("sse_id", sse_id),
        ("sse_event", sse_event),
    ):
        if value is not None:
            text += _KEYS[name] + _json(value)
    return text


def _model_pages(s: SessionRecording) -> Iterator[list[WriteRow]]:
    """The model's frames as pages of :data:`WriteRow` (their class key: the four fields)."""
    page: list[WriteRow] = []
    for r in frame_rows(s.frames):
        page.append((r[0], r[1], r[2], r[3:7], *r[7:9], r[10], *r[12:]))
        if len(page) >= PROGRESS_STEP:
            yield page
            page = []
    if page:
        yield page


def _same(key: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    return key


def iter_jsonl(recording: Recording, progress: Progress | None = None) -> Iterator[bytes]:
    """The recording as JSON Lines, in chunks of whole lines (pure, deterministic): the
    model's frames through the one frame writer (:func:`frame_chunks`)."""
    return iter_jsonl_parts(
        ((s, frame_chunks(s.id, _model_pages(s), _same)) for s in recording.sessions), progress
    )


def iter_jsonl_parts(
    parts: Iterable[tuple[SessionRecording, FrameChunks]], progress: Progress | None = None
) -> Iterator[bytes]:
    """JSON Lines from sessions and their frame writers: each part is a session (its
    ``frames`` unused) and the :func:`frame_chunks` that writes its frame lines (from the
    model, :func:`iter_jsonl`; or from pages of stored rows, which an export from the database
    streams without holding the session in memory)."""
    yield _dump(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "generator": f"mcptape {__version__}"}
    )
    counts = {"sessions": 0, "http_exchanges": 0, "frames": 0, "findings": 0, "annotations": 0}
    for s, chunks in parts:
        sid = s.id
        yield _dump({"type": "session", **pick(s.session, SESSION_FIELDS)})
        counts["sessions"] += 1
        for ex in s.exchanges:
            yield _dump(
                {
                    "type": "http_exchange",
                    "session": sid,
                    "n": ex["id"],
                    **pick(ex, EXCHANGE_FIELDS),
                }
            )
            counts["http_exchanges"] += 1
        yield from chunks(counts, progress)
        for fi in s.findings:
            yield _dump({"type": "finding", "session": sid, **pick(fi, FINDING_FIELDS)})
            counts["findings"] += 1
        for an in s.annotations:
            yield _dump({"type": "annotation", "session": sid, **pick(an, ANNOTATION_FIELDS)})
            counts["annotations"] += 1
    yield _dump({"type": "end", **counts})


def dumps_jsonl(recording: Recording) -> bytes:
    """The whole file as bytes (what ``export -o`` writes and the dashboard offers to download)."""
    return b"".join(iter_jsonl(recording))


def sniff(head: bytes) -> bool:
    """Whether a file's first bytes look like an mcptape JSON Lines recording."""
    first = head.lstrip()[:200]
    return first.startswith(b"{") and b'"format":"' + FORMAT_NAME.encode() in first.replace(
        b" ", b""
    )


def read_jsonl(data: bytes, origin: str, progress: Progress | None = None) -> Recording:
    return loads_recording(data, origin, progress)


def _write_db(
    url: str, session_ids: Sequence[str], progress: Progress | None = None
) -> Iterator[bytes]:
    from mcp_proxy.recording.database import stream_jsonl

    return stream_jsonl(url, session_ids, progress)


def _format() -> Any:
    from mcp_proxy.recording.registry import Format

    return Format(
        name="jsonl",
        title="mcptape recording (JSON Lines): every frame, byte for byte",
        suffixes=(".mcptape.jsonl", ".jsonl"),
        media_type="application/x-ndjson",
        write=iter_jsonl,
        write_db=_write_db,
        read=read_jsonl,
        read_rows=loads_rows,
        sniff=sniff,
        label="JSON Lines",
    )


FORMAT = _format()


__all__ = [
    "FORMAT",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PROGRESS_STEP",
    "UPGRADES",
    "Records",
    "dumps_jsonl",
    "frame_chunks",
    "frame_row",
    "iter_jsonl",
    "iter_jsonl_parts",
    "line_records",
    "loads_recording",
    "loads_rows",
    "read_jsonl",
    "sniff",
]
