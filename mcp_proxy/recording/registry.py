"""The format registry: every way a recording leaves or enters mcptape, listed in one place.

The CLI's ``export --format`` and ``import --format`` choices, the dashboard's download links
and ``load_source`` (which reads ``FILE`` arguments for ``diff``, ``replay`` and ``mock``) all
come from :data:`FORMATS`. Adding a format is one module with a ``FORMAT`` (a :class:`Format`)
plus its tests, and one line in :data:`_MODULES` (see ``docs/recording-format.md``).

Formats are loaded lazily: listing them imports each module, but a module may defer its heavy
imports (protobuf, XML) to the moment it writes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import UserError

if TYPE_CHECKING:
    from mcp_proxy.recording.model import Progress, Recording

#: Writes a recording: returns the bytes as chunks (a generator may stream them).
type Writer = Callable[[Recording, Progress | None], Iterable[bytes]]
#: Reads a file's bytes (with the file's name for messages) into a recording.
type Reader = Callable[[bytes, str, Progress | None], Recording]
#: Reads the same, each session's frames as row tuples (``FRAME_COLUMNS`` order) beside it.
type RowsReader = Callable[
    [bytes, str, Progress | None], tuple[Recording, list[list[tuple[Any, ...]]]]
]
#: Writes sessions straight from a database (URL, exact session ids), streaming: no model.
type DbWriter = Callable[[str, Sequence[str], Progress | None], Iterable[bytes]]
#: Sends a recording somewhere that is not a file (a URL); returns a one-line summary.
type Sender = Callable[[Recording, str, Progress | None], str]


@dataclass(frozen=True)
class Format:
    """One recording format and what mcptape can do with it."""

    name: str
    #: One line for ``--help`` and the dashboard.
    title: str
    #: File name endings, most specific first (``.mcptape.jsonl`` before ``.jsonl``).
    suffixes: tuple[str, ...]
    media_type: str
    write: Writer | None = None
    read: Reader | None = None
    #: Recognises the format from a file's first bytes (for ``import`` without ``--format``).
    sniff: Callable[[bytes], bool] | None = None
    #: For formats that can also be sent (``export -o http://…``).
    send: Sender | None = None
    #: A short name for buttons (the dashboard's download links); the name in capitals if empty.
    label: str = ""
    #: The session transports the format can hold (HAR: HTTP only); empty means every one.
    transports: tuple[str, ...] = ()
    #: ``read`` with the frames as row tuples: what ``import`` writes (no dict per frame).
    read_rows: RowsReader | None = None
    #: Writes the same bytes as ``write`` straight from a database, a page of rows at a time
    #: (``export`` and the dashboard's downloads use it when there is one).
    write_db: DbWriter | None = None

    @property
    def short(self) -> str:
        return self.label or self.name.upper()

    def holds(self, transport: str | None) -> bool:
        """Whether a session recorded over ``transport`` can be written in this format."""
        return not self.transports or transport in self.transports

    def need_writer(self) -> Writer:
        if self.write is None:
            raise UserError(f"mcptape cannot write {self.name} (it only reads it)")
        return self.write

    def need_rows_reader(self) -> RowsReader:
        """What ``import`` reads a whole file with (JSON Lines streams instead)."""
        if self.read_rows is None:
            self.need_reader()  # the line that says which formats it imports
            raise UserError(f"mcptape cannot import {self.name} as rows")
        return self.read_rows

    def need_reader(self) -> Reader:
        if self.read is None:
            readable = ", ".join(f.name for f in formats() if f.read is not None)
            raise UserError(f"mcptape cannot import {self.name} (it imports {readable})")
        return self.read


#: The modules that define a ``FORMAT``, in the order formats are listed. A format's name is its
#: module's name, so that the CLI can list the names without importing any format.
_MODULES = (
    "mcp_proxy.recording.jsonl",
    "mcp_proxy.recording.har",
    "mcp_proxy.recording.otlp",
    "mcp_proxy.recording.junit",
)
_loaded: dict[str, Format] | None = None


def declared_names() -> list[str]:
    """The formats' names, without importing them (for ``--help`` texts, read at every start)."""
    return [m.rsplit(".", 1)[1] for m in _MODULES]


def formats() -> list[Format]:
    """Every registered format, in listing order."""
    global _loaded
    if _loaded is None:
        found: dict[str, Format] = {}
        for mod in _MODULES:
            fmt: Format = importlib.import_module(mod).FORMAT
            found[fmt.name] = fmt
        _loaded = found
    return list(_loaded.values())


def names(*, writable: bool = False, readable: bool = False) -> list[str]:
    return [
        f.name
        for f in formats()
        if (not writable or f.write is not None) and (not readable or f.read is not None)
    ]


def downloads() -> list[Format]:
    """The formats a recording can be written in: the dashboard offers each as a download."""
    return [f for f in formats() if f.write is not None]


def get_format(name: str) -> Format:
    for f in formats():
        if f.name == name:
            return f
    raise UserError(f"unknown recording format {name!r} (known: {', '.join(names())})")


def detect(path: str | os.PathLike[str], head: bytes) -> Format | None:
    """The readable format a file is in: by its content first, then by its name."""
    readable = [f for f in formats() if f.read is not None]
    for f in readable:
        if f.sniff is not None and f.sniff(head):
            return f
    lower = str(path).lower()
    for f in readable:
        if lower.endswith(f.suffixes):
            return f
    return None


def read_file(
    path: str | os.PathLike[str], fmt: str | None = None, progress: Progress | None = None
) -> Recording:
    """Read a recording file in the given format, or in the one it is recognised as."""
    from mcp_proxy.recording.model import read_bytes

    data = read_bytes(path)
    if fmt is not None:
        chosen = get_format(fmt)
    else:
        found = detect(path, data[:4096])
        chosen = found if found is not None else get_format("jsonl")
    return chosen.need_reader()(data, str(path), progress)


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """:func:`read_file` with detection: what ``diff``/``replay``/``mock`` use for FILE."""
    return read_file(path)


def output_format(output: str, fmt: str | None) -> Format:
    """The format for ``export -o OUTPUT``: the one named, else by the output's file name."""
    if fmt is not None:
        return get_format(fmt)
    lower = output.lower()
    for f in formats():
        if f.write is not None and lower.endswith(f.suffixes):
            return f
    return get_format("jsonl")


__all__ = [
    "DbWriter",
    "Format",
    "Reader",
    "Sender",
    "Writer",
    "declared_names",
    "detect",
    "downloads",
    "formats",
    "get_format",
    "names",
    "output_format",
    "read_file",
    "read_recording",
]
