"""JSON Lines, mcptape's own recording format: writer, reader and version upgrades.

Three rules shape the code (the format itself is documented in ``docs/recording-format.md``):

- **Exact bytes.** Frames carry their raw bytes (as text when they are valid UTF-8, base64
  otherwise) so an import reproduces the recording byte for byte. Everything else in a frame
  record (kind, method, id) is informative and recomputed on import by :mod:`mcp_proxy.frames`.
- **Deterministic output.** Exporting the same sessions twice yields identical bytes: no export
  timestamps, a fixed key order, HTTP exchanges renumbered per session in order.
- **Old files keep loading.** The header names a format version; older versions pass through a
  chain of upgrade steps (:data:`UPGRADES`), each a small stream transformer, before validation.

A frame line is assembled from pre-encoded pieces instead of a dict per frame (an export from
the database streams stored rows: :func:`frame_chunks_from_rows`), and reading
(:mod:`mcp_proxy.recording.jsonl_read`) parses each line once.
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
from mcp_proxy.recording.jsonl_read import (
    FORMAT_NAME,
    FORMAT_VERSION,
    PROGRESS_STEP,
    UPGRADES,
    Records,
    frame_from_record,
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
    pick,
    raw_fields,
)

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# ============================================================================ writing


def _dump(record: dict[str, Any]) -> bytes:
    """One record as one line: compact, UTF-8, no NaN (JSON Lines readers everywhere agree)."""
    return _encode(record).encode("utf-8") + b"\n"


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
    for key, name in _OPTIONAL:
        if f.get(key) is not None:
            rec[name] = f[key]
    if not f.get("complete", True):
        rec["complete"] = False
    rec.update(raw_fields(bytes(f["raw"])))
    return rec


_OPTIONAL = (
    ("method", "method"),
    ("msg_id", "id"),
    ("error_code", "error_code"),
    ("http_exchange_id", "exchange"),
    ("sse_id", "sse_id"),
    ("sse_event", "sse_event"),
)
_KEYS = {name: f',"{name}":' for _, name in _OPTIONAL}


def _json(value: Any) -> str:
    """One JSON value as compact text: strings through the C encoder directly."""
    if type(value) is str:
        return _quote(value)
    return _encode(value)


def _frame_line(prefix: str, f: dict[str, Any]) -> bytes:
    """:func:`frame_record` as a line, without building the dict (the export's hot loop).

    Produces exactly the bytes ``_dump(frame_record(...))`` would (a test keeps them equal):
    the same key order, and strings through the same C encoder ``json.dumps`` uses. The
    direction, channel, kind and method of a frame repeat across a session: their JSON is
    made once per combination (:func:`_middle`).
    """
    ts = f["ts"]
    get = f.get
    key = (f["direction"], f["channel"], get("kind"), get("method"))
    middle = _MIDDLES.get(key) if type(key[0]) is str and type(key[1]) is str else None
    if middle is None:
        middle = _middle(key)
    line = (
        f'{prefix}{f["seq"]},"ts":{float.__repr__(ts) if type(ts) is float else _encode(ts)}'
        f',"mono_ns":{f["mono_ns"]}{middle}'
    )
    msg_id = get("msg_id")
    if msg_id is not None:
        line += ',"id":' + (_quote(msg_id) if type(msg_id) is str else _encode(msg_id))
    for k in _RARE:
        value = get(k)
        if value is not None:
            line += _KEYS[_RARE_NAMES[k]] + _json(value)
    if not get("complete", True):
        line += ',"complete":false'
    raw = f["raw"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f'{line},"base64":"{base64.b64encode(raw).decode("ascii")}"}}\n'.encode()
    return f'{line},"text":{_quote(text)}}}\n'.encode()


#: ``,"dir":…,"channel":…,"kind":…[,"method":…]`` per combination seen (a session has a few).
_MIDDLES: dict[tuple[Any, ...], str] = {}
_RARE = ("error_code", "http_exchange_id", "sse_id", "sse_event")
_RARE_NAMES = dict(_OPTIONAL)


def _middle(key: tuple[Any, ...]) -> str:
    direction, channel, kind, method = key
    text = f',"dir":{_json(direction)},"channel":{_json(channel)},"kind":{_json(kind)}'
    if method is not None:
        text += _KEYS["method"] + _json(method)
    if all(v is None or type(v) is str for v in key) and len(_MIDDLES) < 4096:
        _MIDDLES[key] = text
    return text


def _frame_lines(
    s: SessionRecording, counts: dict[str, int], progress: Progress | None
) -> Iterator[bytes]:
    prefix = '{"type":"frame","session":' + _encode(s.id) + ',"seq":'
    batch: list[bytes] = []
    for f in s.frames:
        if not isinstance(f["seq"], int) or not isinstance(f["mono_ns"], int):
            batch.append(_dump(frame_record(s.id, f)))  # odd types: the general path
        else:
            batch.append(_frame_line(prefix, f))
        if len(batch) >= PROGRESS_STEP:
            counts["frames"] += len(batch)
            yield b"".join(batch)
            if progress is not None:
                progress(len(batch))
            batch = []
    if batch:
        counts["frames"] += len(batch)
        yield b"".join(batch)
        if progress is not None:
            progress(len(batch))


#: A session's frame lines, as chunks: given the counts to keep and the progress callback.
FrameChunks = Callable[[dict[str, int], Progress | None], Iterator[bytes]]


def iter_jsonl(recording: Recording, progress: Progress | None = None) -> Iterator[bytes]:
    """The recording as JSON Lines, in chunks of whole lines (pure, deterministic)."""
    return iter_jsonl_parts(((s, _model_frames(s)) for s in recording.sessions), progress)


def _model_frames(s: SessionRecording) -> FrameChunks:
    def chunks(counts: dict[str, int], progress: Progress | None) -> Iterator[bytes]:
        return _frame_lines(s, counts, progress)

    return chunks


def iter_jsonl_parts(
    parts: Iterable[tuple[SessionRecording, FrameChunks]], progress: Progress | None = None
) -> Iterator[bytes]:
    """JSON Lines from sessions whose frames come from elsewhere: each part is a session (its
    ``frames`` unused) and the function that writes its frame lines. :func:`iter_jsonl` gives
    the model's frames; an export from the database streams pages of stored rows
    (:func:`frame_chunks_from_rows`) and never holds the session in memory."""
    yield _dump(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "generator": f"mcptape {__version__}"}
    )
    counts = {"sessions": 0, "http_exchanges": 0, "frames": 0, "findings": 0, "annotations": 0}
    for s, frame_chunks in parts:
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
        yield from frame_chunks(counts, progress)
        for fi in s.findings:
            yield _dump({"type": "finding", "session": sid, **pick(fi, FINDING_FIELDS)})
            counts["findings"] += 1
        for an in s.annotations:
            yield _dump({"type": "annotation", "session": sid, **pick(an, ANNOTATION_FIELDS)})
            counts["annotations"] += 1
    yield _dump({"type": "end", **counts})


def frame_chunks_from_rows(
    session_id: str,
    pages: Iterable[Sequence[tuple[Any, ...]]],
    classes: Callable[[int], tuple[str, str, str, str | None]],
    exchange_numbers: dict[int, int],
) -> FrameChunks:
    """Frame lines from stored rows (``EXPORT_COLUMNS`` of :mod:`mcp_proxy.store.recordings`),
    a chunk per page: the bytes :func:`_frame_line` writes for the same frame as a dict (a test
    keeps them equal), without the dict.

    ``classes`` turns a row's ``class_key`` into ``(direction, channel, kind, method)``; its JSON
    is made once per key. ``exchange_numbers`` maps a database exchange id to its number in the
    session. Lines of a page are joined as text and encoded once.
    """
    prefix = '{"type":"frame","session":' + _encode(session_id) + ',"seq":'
    middles: dict[int, str] = {}

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
    page: Sequence[tuple[Any, ...]],
    middles: dict[int, str],
    classes: Callable[[int], tuple[str, str, str, str | None]],
    numbers: dict[int, int],
) -> str:
    """One page of stored rows as frame lines (the export's hot loop)."""
    out: list[str] = []
    append = out.append
    quote = _quote
    for seq, ts, mono, key, msg_id, code, complete, raw, ex, sse_id, sse_event in page:
        middle = middles.get(key)
        if middle is None:
            middle = middles[key] = _middle(classes(key))
        line = (
            f'{prefix}{seq},"ts":{float.__repr__(ts) if type(ts) is float else _encode(ts)}'
            f',"mono_ns":{mono}{middle}'
        )
        if msg_id is not None:
            line += ',"id":' + quote(msg_id)
        if code is not None or ex is not None or sse_id is not None or sse_event is not None:
            line += _rare_fields(code, None if ex is None else numbers.get(ex), sse_id, sse_event)
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
    "frame_chunks_from_rows",
    "frame_from_record",
    "frame_record",
    "frame_row",
    "iter_jsonl",
    "iter_jsonl_parts",
    "line_records",
    "loads_recording",
    "loads_rows",
    "read_jsonl",
    "sniff",
]
