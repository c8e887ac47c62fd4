"""``mcptape import``: a recording file into the database, streamed, in one transaction.

A file is read by a child process (:class:`~mcp_proxy.recording.import_reader.ReaderProcess`),
a JSON Lines file a block at a time (:func:`~mcp_proxy.recording.jsonl_read.stream_rows`); each
session's frames are handed over a page at a time (``IMPORT_PAGE`` rows), then redacted here as
``record`` redacts (:func:`redact_page`) and written, straight into ``frame_rows``
(:class:`~mcp_proxy.store.recordings.ImportWriter`). Memory is a block of the file and a page
of rows, whatever the file's size: the file is never read whole, no frame becomes a dict, and
nothing is kept per frame (the map from a file's frame numbers to the new ones is a range while
they are 1, 2, …; only a file with gaps in its numbers costs 8 bytes a frame for it).

Everything goes in one transaction: a bad line anywhere in the file (a value out of range, a
truncated end) leaves the database as it was. With ``analyse`` (``mcptape import --analyse``),
once it committed, each session imported is settled as the recorder process settles a session
that ended (:func:`settle`: its findings and per-method numbers analysed in one pass and
stored), so that the first ``check`` and ``stats`` after the import read them; a session that
cannot be settled costs a line on the log, never the import (its first ``check`` analyses it
instead). Not by default: the analysis costs about as much CPU as the import itself (measured,
docs/recording-format.md), and a file imported and exported again is the same file only when
the import added nothing to it. Other formats (HAR) are read whole as row tuples
(the format's ``read_rows``), in the child too, and written by the same writer;
:func:`import_recording` takes a model built in memory to the same writer in-process.
"""

from __future__ import annotations

import logging
import os
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import batched
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Frame
from mcp_proxy.limits import IMPORT_PAGE
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
from mcp_proxy.store.columns import CHANNEL_NAMES, DIRECTION_NAMES
from mcp_proxy.store.recordings import FramePage, frame_page
from mcp_proxy.store.rows import storable

if TYPE_CHECKING:
    from mcp_proxy.redact import Redactor
    from mcp_proxy.store.recordings import ImportWriter

log = logging.getLogger(__name__)

__all__ = [
    "IMPORT_PAGE",
    "ImportResult",
    "import_file",
    "import_recording",
    "import_redactor",
    "redact_page",
]


@dataclass
class ImportResult:
    """What an import created: ``(original id, new id)`` per session, in file order."""

    sessions: list[tuple[str, str]]
    frames: int
    #: Frames written per session, in the order of ``sessions``.
    counts: list[int] = field(default_factory=list)


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


def _texts(row: dict[str, Any]) -> dict[str, Any]:
    """A row's text values as a text column holds them: a lone surrogate (``"\\ud800"`` in the
    file's JSON, no UTF-8) escaped, as the recorder stores it. JSON columns need no help."""
    return {k: storable(v) if type(v) is str else v for k, v in row.items()}


def _policy(redactor: Redactor | None) -> Redactor:
    return import_redactor() if redactor is None else redactor


class _Written:
    """What an import keeps of one session while it writes it: ids, counts, the seq map."""

    __slots__ = ("count", "exchange_ids", "key", "last_ts", "new_id", "seqs")

    def __init__(self, new_id: str, key: int) -> None:
        self.new_id = new_id
        self.key = key
        self.count = 0
        self.last_ts: float | None = None
        #: Exchange number in the file → database id.
        self.exchange_ids: dict[int, int] = {}
        #: The file's frame numbers, once they stop being 1, 2, … (None: frame n was seq n).
        self.seqs: array[int] | None = None

    def took(self, page: FramePage) -> None:
        seqs = page.seq
        first, last, n = seqs[0], seqs[-1], len(seqs)
        if self.seqs is None and (first != self.count + 1 or last != self.count + n):
            self.seqs = array("q", range(1, self.count + 1))
        if self.seqs is not None:
            self.seqs.extend(seqs)
        self.count += n
        self.last_ts = page.ts[-1]

    def new_seq(self, seq: int) -> int:
        """The new number of the file's frame ``seq`` (``seq`` itself when no frame had it)."""
        if self.seqs is None:
            return seq
        i = bisect_left(self.seqs, seq)
        return i + 1 if i < len(self.seqs) and self.seqs[i] == seq else seq


class _Importer:
    """Writes sessions a page of frames at a time as the reader hands them over."""

    def __init__(
        self,
        writer: ImportWriter,
        redactor: Redactor,
        progress: Progress | None,
        extra_meta: dict[str, Any] | None,
    ) -> None:
        self.writer = writer
        self.redactor = redactor
        self.progress = progress
        self.extra_meta = extra_meta
        self.written: dict[str, _Written] = {}

    def _open(self, s: SessionRecording) -> _Written:
        done = self.written.get(s.id)
        if done is None:
            new_id, key = self.writer.session(_texts(_session_row(s)))
            done = self.written[s.id] = _Written(new_id, key)
        if s.exchanges:  # the ones declared since the last page: written, then let go
            exchanges = [
                {
                    "id": ex["id"],
                    **_texts(_redacted_exchange(pick(ex, EXCHANGE_FIELDS), self.redactor)),
                }
                for ex in s.exchanges
            ]
            done.exchange_ids.update(self.writer.exchanges(done.new_id, exchanges))
            s.exchanges.clear()
        return done

    def page(self, s: SessionRecording, page: FramePage) -> None:
        """Redact a page of a session's frames (:func:`redact_page`: ``page`` is the importer's
        from now on) and write it, the frames redaction changed marked ``redacted``."""
        if not page.raw:
            return
        done = self._open(s)
        marked = redact_page(page, self.redactor)
        self.writer.frames(done.key, done.count, page, marked, done.exchange_ids)
        done.took(page)
        if self.progress is not None:
            self.progress(len(page.raw))

    def finish(self, recording: Recording) -> ImportResult:
        """Each session's row completed, its findings and annotations written."""
        created: list[tuple[str, str]] = []
        counts: list[int] = []
        for s in recording.sessions:
            done = self._open(s)
            row = s.session
            values: dict[str, Any] = {
                "frame_count": done.count,
                "updated_at": row.get("updated_at") or done.last_ts,
                "meta": _meta(recording, s, self.extra_meta),
            }
            if row.get("ended_at") is None and done.last_ts is not None:
                values["ended_at"] = float(done.last_ts)
            self.writer.finish(done.new_id, values, _findings(s, done), _notes(s, done))
            created.append((s.id, done.new_id))
            counts.append(done.count)
        return ImportResult(created, sum(counts), counts)


def redact_page(page: FramePage, redactor: Redactor) -> set[int]:
    """Redact a page of frames in place; the positions of the frames redacted.

    The file's bytes go in as they are unless the policy hides a secret in them, as ``record``
    would have. The prefilter looks at a page's bodies together (:meth:`Redactor.suspects`);
    only the bodies it cannot clear take the whole redactor.
    """
    marked: set[int] = set()
    if not redactor.enabled:
        return marked
    raws = page.raw
    for i in redactor.suspects(raws):
        raw = raws[i]
        direction, channel = DIRECTION_NAMES[page.direction[i]], CHANNEL_NAMES[page.channel[i]]
        out = redactor.frame(Frame(direction, channel, raw, 0, 0.0))  # type: ignore[arg-type]
        if out.raw is not raw:
            raws[i] = new = bytes(out.raw)
            page.size[i] = len(new)
            marked.add(i)
    return marked


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


def _session_row(s: SessionRecording) -> dict[str, Any]:
    """The session's row as first written (its meta, counts and last times come at the end)."""
    row = s.session
    out = {k: row.get(k) for k in SESSION_FIELDS if k not in ("id", "frame_count", "meta")}
    out["transport"] = str(row["transport"])
    # A session exported while still live is imported as ended: nothing will write to the copy.
    out["status"] = "ended" if row.get("status") in (None, "live") else row["status"]
    out["gap_count"] = int(row.get("gap_count") or 0)
    out["pid"] = None
    return out


def _meta(
    recording: Recording, s: SessionRecording, extra: dict[str, Any] | None
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
    return meta


def _findings(s: SessionRecording, done: _Written) -> list[dict[str, Any]]:
    out = []
    for fi in s.findings:
        row = {k: v for k, v in pick(fi, FINDING_FIELDS).items() if v is not None}
        seqs = row.get("frame_seqs")
        if isinstance(seqs, list):
            row["frame_seqs"] = [done.new_seq(q) for q in seqs if isinstance(q, int)]
        row.setdefault("severity", "info")
        row.setdefault("title", row["code"])
        row.setdefault("source", "recorder")
        row.setdefault("created_at", float(s.session.get("started_at") or 0.0))
        out.append(_texts(row))
    return out


def _notes(s: SessionRecording, done: _Written) -> list[dict[str, Any]]:
    out = []
    for an in s.annotations:
        seq = an.get("frame_seq")
        out.append(
            _texts(
                {
                    **pick(an, ANNOTATION_FIELDS),
                    "frame_seq": done.new_seq(seq) if isinstance(seq, int) else None,
                    "created_at": float(an.get("created_at") or s.session["started_at"]),
                }
            )
        )
    return out


def import_recording(
    recording: Recording,
    db_url: str,
    *,
    extra_meta: dict[str, Any] | None = None,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
    analyse: bool = False,
) -> ImportResult:
    """Load a recording (the model: a HAR file read) into a database, in one transaction, each
    session with a new id: its frames become rows (:func:`~mcp_proxy.recording.model.frame_rows`)
    and take the one import path, a page at a time, as a JSON Lines file's do.

    The original id, the file and its format version are kept in ``meta["imported_from"]``.
    Frames are renumbered 1, 2, … as a live recording numbers them; findings and annotations
    that point at frames follow the new numbers. Frames were classified when the file was read
    (by the one classifier every producer uses); their bytes go in as in the file, redacted by
    the recording policy (``redactor``; default :func:`import_redactor`: on, as ``record``) and
    then marked ``redacted`` — a file someone sends you is recorded like live traffic.
    """
    rows = (frame_rows(s.frames) for s in recording.sessions)
    return _import_rows(recording, rows, db_url, extra_meta, progress, redactor, analyse)


def _import_rows(
    recording: Recording,
    rows: Iterable[Iterable[tuple[Any, ...]]],
    db_url: str,
    extra_meta: dict[str, Any] | None,
    progress: Progress | None,
    redactor: Redactor | None,
    analyse: bool = False,
) -> ImportResult:
    """Sessions read whole (``rows``: each session's frames, in ``recording``'s order) into the
    database a page at a time, in one transaction."""
    from mcp_proxy.store.recordings import RecordingStore

    with RecordingStore(db_url, write=True) as rs, rs.import_writer() as writer:
        policy = _policy(redactor)
        importer = _Importer(writer, policy, progress, extra_meta)
        for s, frames in zip(recording.sessions, rows, strict=True):
            for part in batched(frames, IMPORT_PAGE):
                importer.page(s, frame_page(part))
        result = importer.finish(recording)
        writer.commit()
    if analyse:
        settle(db_url, result)
    return result


def import_file(
    path: str | os.PathLike[str],
    db_url: str,
    fmt: str | None = None,
    *,
    read_progress: Progress | None = None,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
    read_bytes: Progress | None = None,
    analyse: bool = False,
) -> tuple[Recording, ImportResult]:
    """``mcptape import FILE``: read it in whatever format it is and import it, in one
    transaction. The returned recording holds the sessions without their frames.

    The file is read by a child process (:class:`~mcp_proxy.recording.import_reader.ReaderProcess`:
    JSON Lines streams, another format is read whole as rows) that hands the pages of rows over
    while this process writes the ones before: reading and writing on two cores. ``read_bytes``
    is told of the file's bytes as they are read (``read_progress`` counts frames).
    """
    from mcp_proxy.recording.import_reader import ReaderProcess
    from mcp_proxy.recording.jsonl_read import read_head
    from mcp_proxy.recording.registry import detect, get_format
    from mcp_proxy.store.recordings import RecordingStore

    chosen = get_format(fmt) if fmt is not None else detect(path, read_head(path, 4096))
    name = "jsonl" if chosen is None else chosen.name
    if name != "jsonl":
        assert chosen is not None
        chosen.need_rows_reader()  # a format it cannot import: said before anything starts
    policy = _policy(redactor)
    reader = ReaderProcess(
        str(path), name, IMPORT_PAGE, read_progress=read_progress, read_bytes=read_bytes
    )
    # The child first, so that it reads while the store is opened (and migrated).
    with reader, RecordingStore(db_url, write=True) as rs, rs.import_writer() as writer:
        importer = _Importer(writer, policy, progress, None)
        for s, page in reader.pages():
            importer.page(s, page)
        recording = reader.recording
        assert recording is not None
        result = importer.finish(recording)
        writer.commit()
    if analyse:
        settle(db_url, result)
    return recording, result


def settle(db_url: str, result: ImportResult) -> None:
    """Store the findings and numbers of the sessions an import committed, with the recorder
    process's settle (:func:`mcp_proxy.analysis.service.settle`): the session's one analysis,
    paid here once instead of by its first ``check``. A failure is logged in one line and
    leaves that session to be analysed by its first ``check``."""
    from mcp_proxy.analysis.service import settle as settle_session

    for _, new_id in result.sessions:
        try:
            settle_session(db_url, new_id)
        except Exception as exc:  # the rows are committed: the analysis must not undo the import
            log.warning("could not store the findings of %s: %s", new_id, exc)
