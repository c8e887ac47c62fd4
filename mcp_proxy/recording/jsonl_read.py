"""Reading mcptape's JSON Lines recordings: parsing, validation and version upgrades.

The reading half of :mod:`mcp_proxy.recording.jsonl` (the format's module, which re-exports
what is public here). One reader (:func:`read_rows`), lines to row tuples in ``FRAME_COLUMNS``
order, each frame classified from its bytes (never from what the file says): :func:`stream_rows`
reads a file a block at a time and hands an import its frames a page at a time (memory bounded
whatever the file's size), :func:`loads_rows` reads bytes in memory, and
:func:`loads_recording` builds the model from those rows (a dict per frame, for diff, replay
and mock: :func:`~mcp_proxy.recording.model.frame_dicts`). Every value is checked
(:mod:`mcp_proxy.recording.validate`); every problem is one line naming the file, the line and
the reason.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from orjson import loads as _orjson_loads

from mcp_proxy.errors import NotFoundError, UserError
from mcp_proxy.frames import Channel, Direction, Kind, classify, has_long_number
from mcp_proxy.limits import IMPORT_LINE_MAX, IMPORT_READ, IMPORT_SEQ_MAX, IMPORT_TIME_MAX
from mcp_proxy.recording import validate
from mcp_proxy.recording.model import (
    ANNOTATION_FIELDS,
    EXCHANGE_FIELDS,
    FINDING_FIELDS,
    SESSION_FIELDS,
    Progress,
    Recording,
    RecordingFormatError,
    SessionRecording,
    frame_dicts,
    pick,
    raw_fields,
)

FORMAT_NAME = "mcptape-recording"
#: The version this mcptape writes. Readers accept every version from 1 up to this one.
FORMAT_VERSION = 2

Records = Iterator[tuple[int, dict[str, Any]]]

_CHANNELS = frozenset(c.value for c in Channel)
_DIRECTIONS = frozenset((Direction.C2S.value, Direction.S2C.value))
#: Report progress every this many frames (a callback per frame would cost more than the frame).
PROGRESS_STEP = 2000


# ============================================================================ upgrades


def _v1_to_v2(records: Records) -> Records:
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
        if kind == "http_exchange":
            sid = str(rec.get("session"))
            n = per_session[sid] = per_session.get(sid, 0) + 1
            renumber[(sid, rec.pop("id", None))] = n
            rec["n"] = n
        elif kind == "frame":
            _v1_frame(rec, renumber)
        key = {"session": "sessions", "http_exchange": "http_exchanges"}.get(str(kind), f"{kind}s")
        if key in counts:
            counts[key] += 1
        yield lineno, rec
    yield last + 1, {"type": "end", **counts}


def _v1_frame(rec: dict[str, Any], renumber: dict[tuple[str, Any], int]) -> None:
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


#: Upgrade steps: ``UPGRADES[v]`` turns a version-``v`` record stream into version ``v + 1``.
UPGRADES: dict[int, Callable[[Records], Records]] = {1: _v1_to_v2}


# ============================================================================ reading


#: The C scanner behind ``json.loads``, called once per line without the wrapper's overhead.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: What ``bytes.strip()`` removes: a line of only these is blank.
_BLANK_B = b" \t\r\x0b\x0c"
#: JSON's own whitespace, allowed around a record.
_JSON_SPACE = " \t\r"


#: A digit written as a JSON escape (the only way a frame text's digits are not in the line as
#: themselves). A regex: ``b"\\u" in block`` stopped at every ``\\"`` of a block of JSON bodies,
#: twice the time of this search (~0.3 µs a frame of a 1 MiB block).
_DIGIT_ESCAPE = re.compile(rb"\\u003[0-9]")


class BlockScan:
    """What the block the last record was read from says of every frame text in it.

    ``digits_checked``: the block has no run of 19+ digits (:func:`has_long_number`) and no
    digit written as an escape (``\\u0030``-``\\u0039``: :data:`_DIGIT_ESCAPE`), so no frame
    text of it (a JSON string, whose digits appear as themselves unless so written) holds such a
    run either: :func:`~mcp_proxy.frames.classify` may skip its own look (``checked=True``), and
    decides as without it.
    """

    __slots__ = ("digits_checked",)

    def __init__(self) -> None:
        self.digits_checked = False


def line_records(data: bytes, origin: str, scan: BlockScan | None = None) -> Records:
    """Each non-blank line's record of a file's bytes in memory, with its line number."""
    return _block_lines((data,), origin, lambda: data, scan)


def _block_lines(
    blocks: Iterable[bytes],
    origin: str,
    whole: Callable[[], bytes],
    scan: BlockScan | None = None,
) -> Records:
    """Each non-blank line's record, with its line number, from blocks of whole lines.

    Each line's bytes go to orjson (~3× the C scanner, and no decoding of the whole file
    first): a line it reads as an object is json's object too, unless its block has a run of
    19+ digits somewhere (orjson reads an integer past 64 bits as a float; then every line of
    the block goes the json way). Whatever it refuses (a blank line, a BOM, whitespace JSON does
    not allow) or reads as another type goes the json way (:func:`_slow_line`), which names the
    line's problem; a line that is an object with JSON's whitespace around it is the same object
    either way, so no line is looked at before orjson has it. ``whole`` gives the file's bytes, only
    for saying what a file that is not JSON Lines is.
    """
    loads = _orjson_loads
    lineno = 0
    for block in blocks:
        fast = not has_long_number(block)
        if scan is not None:
            scan.digits_checked = fast and _DIGIT_ESCAPE.search(block) is None
        for lineno, line in enumerate(block.split(b"\n"), start=lineno + 1):  # noqa: B020
            if fast:
                try:
                    rec = loads(line)
                except ValueError:  # orjson.JSONDecodeError is a ValueError
                    rec = None
                if type(rec) is dict:
                    yield lineno, rec
                    continue
            if not line.strip(_BLANK_B):
                continue
            yield lineno, _slow_line(whole, line, origin, lineno, fast)


def _open(path: str | os.PathLike[str]) -> BinaryIO:
    """A recording file opened for reading; a missing or unreadable file is one clear line."""
    try:
        return open(path, "rb")
    except FileNotFoundError as exc:
        raise NotFoundError(f"no such recording file: {path}") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{path} is a directory, not a recording file") from exc
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_head(path: str | os.PathLike[str], n: int) -> bytes:
    """The first ``n`` bytes of a recording file (what tells its format)."""
    with _open(path) as f:
        try:
            return f.read(n)
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc


def file_blocks(
    path: str | os.PathLike[str], origin: str, read_bytes: Progress | None = None
) -> Iterator[bytes]:
    """A file's bytes as blocks of whole lines (the last ``\\n`` of a block left off), read
    :data:`~mcp_proxy.limits.IMPORT_READ` bytes at a time: memory of one block and one line,
    whatever the file's size. A line longer than ``IMPORT_LINE_MAX`` is refused, naming it.
    ``read_bytes`` is told of each read's size (a progress bar whose total is the file's)."""
    with _open(path) as f:
        carry = b""
        lines = 0
        while True:
            try:
                chunk = f.read(IMPORT_READ)
            except OSError as exc:
                raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
            if not chunk:
                break
            if read_bytes is not None:
                read_bytes(len(chunk))
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry += chunk
                if len(carry) > IMPORT_LINE_MAX:
                    raise RecordingFormatError(
                        f"{origin} line {lines + 1}: longer than {IMPORT_LINE_MAX} bytes"
                        " (not written by mcptape)"
                    )
                continue
            block = carry + memoryview(chunk)[:cut]  # one copy of the block, not two
            carry = chunk[cut + 1 :]
            lines += block.count(b"\n") + 1
            yield block
        if carry:
            yield carry


def _slow_line(
    whole: Callable[[], bytes], line: bytes, origin: str, lineno: int, fast: bool
) -> dict[str, Any]:
    """One line the fast path did not take, read by ``json``: its record, or the error that
    names the line (not UTF-8, not JSON, not an object, nested too deeply)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:
        for _n, rec in _byte_lines(line, origin, lineno):
            return rec  # json decoded it itself (a BOM-marked UTF-16 line, say)
        raise RecordingFormatError(f"{origin} line {lineno}: not UTF-8")  # pragma: no cover
    body = text.strip(_JSON_SPACE)
    if fast and body[:1] == "{":
        try:
            quick = _orjson_loads(body)
        except ValueError:
            quick = None
        if type(quick) is dict:
            return quick
    try:
        rec, end = _scan(body, 0)
    except RecursionError:
        raise RecordingFormatError(
            f"{origin} line {lineno}: nested too deeply to read (not written by mcptape)"
        ) from None
    except (StopIteration, ValueError) as exc:
        raise RecordingFormatError(_not_json(whole, origin, lineno, ValueError(str(exc)))) from None
    if end != len(body):
        raise RecordingFormatError(_not_json(whole, origin, lineno, ValueError("extra data")))
    if type(rec) is not dict:
        raise RecordingFormatError(f"{origin} line {lineno}: a record must be a JSON object")
    return rec


def _byte_lines(data: bytes, origin: str, first: int = 1) -> Records:
    """Lines read by ``json.loads`` from bytes (it decodes them itself): the way a line that is
    not UTF-8 is reported, numbered from ``first``."""
    for lineno, line in enumerate(data.split(b"\n"), start=first):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except RecursionError:
            raise RecordingFormatError(
                f"{origin} line {lineno}: nested too deeply to read (not written by mcptape)"
            ) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise RecordingFormatError(_not_json(lambda: data, origin, lineno, exc)) from exc
        if not isinstance(rec, dict):
            raise RecordingFormatError(f"{origin} line {lineno}: a record must be a JSON object")
        yield lineno, rec


def _not_json(whole: Callable[[], bytes], origin: str, lineno: int, exc: Exception) -> str:
    """Why a line is not JSON, said in the user's terms (a HAR file is the common case)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"{origin} line {lineno}: not UTF-8 (truncated or edited by hand?)"
    data = whole() if lineno == 1 else b""
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("log"), dict):
            return (
                f"{origin} is a HAR file, not an mcptape JSON Lines recording"
                " (import it with --format har)"
            )
        if doc is not None:
            return (
                f"{origin} is one JSON document, not an mcptape JSON Lines recording"
                " (one JSON object per line)"
            )
    return f"{origin} line {lineno}: not valid JSON (truncated or edited by hand?)"


def _need(rec: dict[str, Any], name: str, types: type | tuple[type, ...], where: str) -> Any:
    value = rec.get(name)
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise RecordingFormatError(f"{where}: field {name!r} is missing or has the wrong type")
    return value


def _frame_raw(rec: dict[str, Any], where: str) -> bytes:
    text = rec.get("text")
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordingFormatError(
                f"{where}: 'text' holds a lone surrogate, which is not UTF-8 text"
                " (bytes that are not UTF-8 go in 'base64')"
            ) from None
    if "text" in rec:
        raise RecordingFormatError(f"{where}: field 'text' is missing or has the wrong type")
    if "base64" in rec:
        try:
            return base64.b64decode(_need(rec, "base64", str, where), validate=True)
        except ValueError as exc:
            raise RecordingFormatError(f"{where}: 'base64' is not valid base64") from exc
    raise RecordingFormatError(f"{where}: a frame needs 'text' or 'base64'")


def frame_row(rec: dict[str, Any], where: str, checked: bool = False) -> tuple[Any, ...]:
    """A file's frame record → a frame row tuple (``FRAME_COLUMNS`` order), validated.

    The bytes decide: kind, method, id and error code are classified from the frame's bytes
    (:func:`mcp_proxy.frames.classify`), never taken from the record, whoever wrote the file
    (its header's say-so is no proof). A tuple, not a dict: an import moves it to the store as
    it is. ``checked``: the record's ``text`` holds no run of 19+ digits (:class:`BlockScan`).

    The common record (every field of the right type, UTF-8 ``text``, none of the rare fields)
    is read with one lookup per field; anything else takes :func:`_frame_row_checked`, which
    validates field by field and names what is wrong.
    """
    try:
        seq, ts, mono, direction, channel, text = (
            rec["seq"], rec["ts"], rec["mono_ns"], rec["dir"], rec["channel"], rec["text"]
        )  # fmt: skip
    except KeyError:
        return _frame_row_checked(rec, where)
    if (
        type(seq) is not int
        or type(ts) is not float
        or type(mono) is not int
        or not 0 < seq <= IMPORT_SEQ_MAX
        or not 0.0 <= ts <= IMPORT_TIME_MAX
        or not _INT64_LO <= mono <= _INT64_HI
        or type(text) is not str
        or direction not in _DIRECTIONS
        or channel not in _CHANNELS
        or "exchange" in rec  # the rare fields (_frame_row_checked reads them): five
        or "complete" in rec  # lookups, half the time of one frozenset.isdisjoint(rec)
        or "sse_id" in rec
        or "sse_event" in rec
        or "base64" in rec
    ):
        return _frame_row_checked(rec, where)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        return _frame_row_checked(rec, where)
    c = classify(raw, channel, checked=checked)
    return (
        seq, ts, mono, direction, channel, _KIND_TEXT[c.kind], c.method, c.msg_id, c.error_code,
        len(raw), True, c.partial, raw, None, None, None,
    )  # fmt: skip


_KIND_TEXT = {k: k.value for k in Kind}


_INT64_LO, _INT64_HI = -(2**63), 2**63 - 1


def _frame_row_checked(rec: dict[str, Any], where: str) -> tuple[Any, ...]:
    seq = rec.get("seq")
    if type(seq) is not int:
        _need(rec, "seq", int, where)
    ts = rec.get("ts")
    if type(ts) is not float:
        _need(rec, "ts", (int, float), where)
    mono = rec.get("mono_ns", 0)
    why = validate.frame_problem(seq, ts, mono)
    if why is not None:
        raise RecordingFormatError(f"{where}: {why}")
    ts = float(ts)  # type: ignore[arg-type]
    direction = rec.get("dir")
    if direction not in _DIRECTIONS:
        raise RecordingFormatError(f'{where}: \'dir\' must be "c2s" or "s2c"')
    channel = rec.get("channel")
    if channel not in _CHANNELS:
        raise RecordingFormatError(f"{where}: unknown channel {channel!r}")
    raw = _frame_raw(rec, where)
    c = classify(raw, channel)
    exchange = rec.get("exchange")
    if exchange is not None and type(exchange) is not int:
        raise RecordingFormatError(f"{where}: 'exchange' must be an integer")
    for name in ("sse_id", "sse_event"):
        if rec.get(name) is not None and type(rec[name]) is not str:
            raise RecordingFormatError(f"{where}: field {name!r} must be a string")
    return (
        seq,
        ts,
        mono,
        direction,
        channel,
        c.kind.value,
        c.method,
        c.msg_id,
        c.error_code,
        len(raw),
        rec.get("complete", True) is not False,
        c.partial,
        raw,
        exchange,
        rec.get("sse_id"),
        rec.get("sse_event"),
    )


def _header(stream: Records, origin: str) -> int:
    """Read and check the header line; returns the file's format version (what else the header
    says, such as its ``generator``, is informative: it decides nothing)."""
    try:
        _, header = next(stream)
    except StopIteration:
        raise RecordingFormatError(f"{origin} is empty") from None
    if header.get("format") != FORMAT_NAME:
        hint = ""
        if isinstance(header.get("log"), dict):
            hint = " (this looks like a HAR file: import it with --format har)"
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
    return version


#: Called with a session and a page of its frame rows, which it owns from then on.
OnPage = Callable[[SessionRecording, list[tuple[Any, ...]]], None]


class _Reader:
    """Builds the model from validated records, one record at a time."""

    def __init__(self, origin: str, progress: Progress | None) -> None:
        self.origin = origin
        self.progress = progress
        self.sessions: dict[str, SessionRecording] = {}
        self.order: list[SessionRecording] = []
        self.counts = {
            "sessions": 0,
            "http_exchanges": 0,
            "frames": 0,
            "findings": 0,
            "annotations": 0,
        }
        self.exchange_ids: dict[str, set[int]] = {}
        self.pending = 0
        #: Each session's frames not handed on yet, as row tuples (``FRAME_COLUMNS``), by id.
        self.rows: dict[str, list[tuple[Any, ...]]] = {}
        #: Each session's last frame ``seq`` (frames must come in order).
        self.last: dict[str, int] = {}

    def session(self, rec: dict[str, Any], where: str) -> None:
        _check(rec, validate.SESSION, where)
        sid = rec["id"]
        if sid in self.sessions:
            raise RecordingFormatError(f"{where}: session {sid[:8]} appears twice")
        row = pick(rec, SESSION_FIELDS)
        row["status"] = row.get("status") or "ended"
        self.sessions[sid] = SessionRecording(row)
        self.exchange_ids[sid] = set()
        self.rows[sid] = []
        self.last[sid] = 0
        self.order.append(self.sessions[sid])
        self.counts["sessions"] += 1

    def owner(self, rec: dict[str, Any], kind: str, where: str) -> SessionRecording:
        """The session a record belongs to, declared before it (or one clear error)."""
        sid = rec.get("session")
        owner = self.sessions.get(sid) if isinstance(sid, str) else None
        if owner is None:
            raise RecordingFormatError(f"{where}: {kind} for a session not declared before it")
        return owner

    def owned(self, rec: dict[str, Any], kind: str, where: str) -> None:
        """A session's exchange, finding or annotation (its frames are read by
        :func:`read_rows`'s loop)."""
        owner = self.owner(rec, kind, where)
        if kind == "http_exchange":
            _check(rec, validate.EXCHANGE, where)
            n = rec["n"]
            owner.exchanges.append({"id": n, **pick(rec, EXCHANGE_FIELDS)})
            self.exchange_ids[owner.id].add(n)
            self.counts["http_exchanges"] += 1
        elif kind == "finding":
            _check(rec, validate.FINDING, where)
            owner.findings.append(pick(rec, FINDING_FIELDS))
            self.counts["findings"] += 1
        else:
            _check(rec, validate.ANNOTATION, where)
            owner.annotations.append(pick(rec, ANNOTATION_FIELDS))
            self.counts["annotations"] += 1

    def check_end(self, end: dict[str, Any] | None, last_line: int) -> None:
        if self.progress is not None and self.pending:
            self.progress(self.pending)
        if end is None:
            raise RecordingFormatError(
                f"{self.origin} is truncated: no end record after line {last_line}"
                " (was it cut short while copying?)"
            )
        for key, n in self.counts.items():
            if key in end and end[key] != n:
                raise RecordingFormatError(
                    f"{self.origin}: the end record says {end[key]} {key} but the file holds {n}"
                    " (truncated or edited by hand?)"
                )


def _check(rec: dict[str, Any], fields: validate.Fields, where: str) -> None:
    why = validate.problem(rec, fields)
    if why is not None:
        raise RecordingFormatError(f"{where}: {why}")


_OWNED = frozenset(("http_exchange", "frame", "finding", "annotation"))


def loads_recording(
    data: bytes,
    origin: str = "recording",
    progress: Progress | None = None,
) -> Recording:
    """Parse, upgrade and validate a recording file's bytes (pure).

    Raises :class:`RecordingFormatError` with one line (file, line number, reason) for anything
    that is not a complete, well-formed recording: a truncated file, a hand-edit that broke a
    line or a count, an unknown format version, a HAR file given as JSON Lines, a value no
    recording holds (``docs/recording-format.md``, "Values").
    """
    recording, rows = loads_rows(data, origin, progress)
    for s, frames in zip(recording.sessions, rows, strict=True):
        s.frames = frame_dicts(frames)
        frames.clear()  # one copy of a big session at a time
    return recording


def loads_rows(
    data: bytes,
    origin: str = "recording",
    progress: Progress | None = None,
) -> tuple[Recording, list[list[tuple[Any, ...]]]]:
    """:func:`loads_recording` as row tuples: the sessions without their frames, and each
    session's frames as row tuples (``FRAME_COLUMNS`` order), validated the same way."""
    if not data.strip():
        raise RecordingFormatError(f"{origin} is empty")
    scan = BlockScan()
    return read_rows(line_records(data, origin, scan), origin, progress, scan=scan)


def stream_rows(
    path: str | os.PathLike[str],
    on_page: OnPage,
    page: int,
    progress: Progress | None = None,
    *,
    read_bytes: Progress | None = None,
) -> Recording:
    """Read, upgrade and validate a recording file as a stream (what ``import`` does): each
    session's frames are handed to ``on_page`` as soon as ``page`` of them are read, and the
    rest after the file's last line was checked. Memory is a block of the file, a page per
    session and what the file says about its sessions (exchanges, findings, annotations) —
    never its frames. Raises :class:`RecordingFormatError` as :func:`loads_recording` does,
    possibly after pages were handed on (an import writes in one transaction)."""
    origin = str(path)

    def whole() -> bytes:
        return _file_head(path, IMPORT_READ * 64)

    blocks = file_blocks(path, origin, read_bytes)
    scan = BlockScan()
    recording, rest = read_rows(
        _block_lines(blocks, origin, whole, scan),
        origin,
        progress,
        on_page=on_page,
        page=page,
        scan=scan,
    )
    for s, rows in zip(recording.sessions, rest, strict=True):
        if rows:
            on_page(s, rows)
    return recording


def _file_head(path: str | os.PathLike[str], limit: int) -> bytes:
    """A file's bytes if it is no longer than ``limit`` (for a hint about what it is), else b""."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return b""
    return data if len(data) <= limit else b""


def read_rows(
    stream: Records,
    origin: str,
    progress: Progress | None = None,
    *,
    on_page: OnPage | None = None,
    page: int = sys.maxsize,
    scan: BlockScan | None = None,
) -> tuple[Recording, list[list[tuple[Any, ...]]]]:
    """The records of ``stream`` (a file's lines) read and checked: the sessions without their
    frames, and each session's frames not handed to ``on_page`` (all of them without it).
    ``scan`` is the :class:`BlockScan` the stream's reader keeps (a file of this version only:
    an upgrade may make a frame's text from other bytes than the line's).

    A dict per frame was a third of an import's time, for fields the store wants as a tuple.
    """
    version = _header(stream, origin)
    records: Records = stream
    for v in range(version, FORMAT_VERSION):
        records = UPGRADES[v](records)
    reader = _Reader(origin, progress)
    if version != FORMAT_VERSION:
        scan = None
    end: dict[str, Any] | None = None
    last_line = 1
    rows_of = reader.rows
    last_of = reader.last
    exchange_ids = reader.exchange_ids
    row_of = frame_row
    step = PROGRESS_STEP
    pending = 0
    handed = 0
    for lineno, rec in records:
        last_line = lineno
        kind = rec.get("type")
        if kind == "frame" and end is None:
            # The hot loop: the line's name is made only for an error (frame_row again).
            sid: str = rec.get("session")  # type: ignore[assignment]
            rows = rows_of.get(sid) if type(sid) is str else None
            if rows is None:  # (an unknown session raises here)
                sid = reader.owner(rec, "frame", f"{origin} line {lineno}").id
                rows = rows_of[sid]
            try:
                row = row_of(rec, "", scan is not None and scan.digits_checked)
            except RecordingFormatError:
                row_of(rec, f"{origin} line {lineno}")
                raise
            if row[0] <= last_of[sid]:
                raise RecordingFormatError(
                    f"{origin} line {lineno}: frame seq {row[0]} is out of order"
                )
            last_of[sid] = row[0]
            ex = row[13]
            if ex is not None and ex not in exchange_ids[sid]:
                raise RecordingFormatError(
                    f"{origin} line {lineno}: frame refers to unknown http exchange {ex}"
                )
            rows.append(row)
            if len(rows) >= page and on_page is not None:
                rows_of[sid] = []
                handed += len(rows)
                on_page(reader.sessions[sid], rows)
            if progress is not None:
                pending += 1
                if pending >= step:
                    progress(pending)
                    pending = 0
            continue
        where = f"{origin} line {lineno}"
        if end is not None:
            raise RecordingFormatError(f"{where}: data after the end record")
        if kind in _OWNED:
            reader.owned(rec, str(kind), where)
        elif kind == "session":
            reader.session(rec, where)
        elif kind == "end":
            end = rec
        else:
            raise RecordingFormatError(f"{where}: unknown record type {kind!r}")
    reader.counts["frames"] += handed + sum(len(r) for r in rows_of.values())
    reader.pending += pending
    reader.check_end(end, last_line)
    recording = Recording(reader.order, origin=origin, version=version)
    return recording, [rows_of[s.id] for s in reader.order]
