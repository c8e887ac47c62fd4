"""The in-memory model every format reads into and writes from.

A :class:`Recording` is a list of :class:`SessionRecording`, each in the store's row shapes, so
analysis, diff, replay and mock work the same on a file and on a database session. Formats in
this package convert between bytes and this model; the database adapter converts between the
store and this model. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_proxy.errors import NotFoundError, UserError
from mcp_proxy.frames import parse_json, text_or_none
from mcp_proxy.store.columns import FRAME_COLUMNS

#: Session columns carried by recordings, in file order. ``pid`` is left out: it means nothing
#: elsewhere.
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

#: Kinds of frames that carry a JSON-RPC message.
MESSAGE_KINDS = frozenset({"request", "response", "error", "notification", "batch"})

#: A progress callback: called with the number of frames done since the previous call.
Progress = Callable[[int], None]


class RecordingFormatError(UserError):
    """A recording file that cannot be read: one line naming the file, the line and the reason."""

    exit_code = 2


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

    def frames_by_exchange(self) -> dict[int, list[dict[str, Any]]]:
        """Frames grouped by their HTTP exchange number, in order: one pass over the frames.

        Writers that walk exchanges use this instead of filtering every frame per exchange
        (which made the HAR builder quadratic).
        """
        out: dict[int, list[dict[str, Any]]] = {}
        for f in self.frames:
            ex = f.get("http_exchange_id")
            if ex is not None:
                out.setdefault(ex, []).append(f)
        return out


@dataclass
class Recording:
    """Sessions read from a file or a database, ready to export, diff, replay or mock."""

    sessions: list[SessionRecording]
    #: Where it came from (a file path or ``db:SESSION``), for messages.
    origin: str = ""
    #: The format version the file was written in (the current one for database loads).
    version: int = 2

    @property
    def frame_total(self) -> int:
        return sum(len(s.frames) for s in self.sessions)

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


def pick(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The named fields of a row, in the given order (absent ones as None)."""
    return {name: row.get(name) for name in names}


def raw_fields(raw: bytes) -> dict[str, str]:
    """``{"text": …}`` for UTF-8 bytes (readable in a diff of the file), else ``{"base64": …}``."""
    text = text_or_none(raw)
    if text is not None:
        return {"text": text}
    return {"base64": base64.b64encode(raw).decode("ascii")}


def frame_messages(s: SessionRecording) -> Iterator[tuple[dict[str, Any], Any]]:
    """Each JSON-RPC frame with its parsed message (noise, stderr and empty frames left out)."""
    for f in s.frames:
        if f["kind"] in MESSAGE_KINDS:
            msg = parse_json(bytes(f["raw"]))
            if msg is not None:
                yield f, msg


def frame_rows(frames: Iterable[dict[str, Any]]) -> Iterator[tuple[Any, ...]]:
    """The model's frame dicts as frame rows (``FRAME_COLUMNS`` order): the one adapter from
    the model to the row every writer takes (JSON Lines, an import)."""
    for f in frames:
        raw = bytes(f["raw"])
        yield (
            f["seq"],
            float(f["ts"]),
            int(f.get("mono_ns") or 0),
            f["direction"],
            f["channel"],
            f.get("kind"),
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


def frame_dicts(rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Frame rows as the model's frame dicts (for diff, replay and mock, which read fields by
    name): the one adapter from the row back to the model."""
    return [dict(zip(FRAME_COLUMNS, r, strict=True)) for r in rows]


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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_bytes(path: str | os.PathLike[str], what: str = "recording file") -> bytes:
    """A file's bytes; a missing or unreadable file is one clear line."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError as exc:
        raise NotFoundError(f"no such {what}: {path}") from exc
    except IsADirectoryError as exc:
        raise UserError(f"{path} is a directory, not a {what}") from exc
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc


def analyse(s: SessionRecording) -> Any:
    """The analysis of a session (exchanges, findings), for formats that report on it.

    A frame nested deeper than the analysis can parse must not turn an export into a
    traceback: that is one clear line naming the session.
    """
    from mcp_proxy.analysis import analyze

    try:
        return analyze(s.frames, session=s.session, http_exchanges=s.exchanges)
    except RecursionError:
        raise UserError(
            f"session {s.label} holds a frame nested too deeply for the analysis;"
            " export it as jsonl (byte for byte) instead"
        ) from None
