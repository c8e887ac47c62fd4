"""The reading half of ``mcptape import``, in a process of its own.

An import is two jobs of about the same cost: reading the file (lines → checked, classified row
tuples: :func:`~mcp_proxy.recording.jsonl_read.stream_rows`, or a format's ``read_rows``) and
writing the rows (``store/recordings.py`` ``ImportWriter``). In one process they take turns on
one core, and a thread cannot help (``sqlite3`` takes the GIL back for every row it binds). So
the file is read by a child process (:class:`ReaderProcess`, forked where the system can: no
start-up to pay, nothing imported again) that sends each page to the importer through a pipe,
while the importer redacts (``importer.redact_page``) and writes the pages before it: two cores
share the work. Redaction is the importer's: while the child reads, the writer's core is the
idler one (its index builds and commit come after the file's end, with the child done).

Bounded: the child sends a page (``IMPORT_PAGE`` rows) at a time, and the pipe holds at most
:data:`~mcp_proxy.limits.IMPORT_PIPE_BYTES`; when the writer is behind, the reader waits, so
the reader is never more than a page and a pipe ahead. The importer owns the child: whatever
ends the import (its end, a bad line, the database failing, an interrupt), the child is stopped
by its pid and waited for before the import returns. An error of the reader (a bad line, a
file that cannot be read) is raised by the importer as it was raised in the child: the same
exception, the same one line and exit code as if it had been read in-process.
"""

from __future__ import annotations

import marshal
import multiprocessing
import os
import pickle
import signal
import sys
from collections.abc import Iterator
from contextlib import suppress
from itertools import batched
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NamedTuple

from mcp_proxy.limits import IMPORT_PIPE_BYTES
from mcp_proxy.recording.model import Progress, Recording, SessionRecording
from mcp_proxy.store.recordings import FramePage, frame_page

if TYPE_CHECKING:
    from mcp_proxy.recording.jsonl_read import OnPage

__all__ = ["ReaderProcess", "read_pages"]

#: A session's frames as row tuples (``mcp_proxy.store.columns.FRAME_COLUMNS`` order).
type Rows = list[tuple[Any, ...]]


#: The first byte of a page's message (``marshal``: its values are what JSON and the row tuples
#: hold, and it writes them 4× faster than ``pickle``); the end and an error are pickled.
_PAGE = b"M"
#: ``marshal``'s format 2, without the back-references of 3 and 4: a page's few repeated
#: strings (method names) written again cost less than looking every value up as a possible
#: reference, ~1,200 instructions a frame of the writing and ~300 of the reading (callgrind).
_MARSHAL_VERSION = 2


class Page(NamedTuple):
    """A page of one session's frames, with what the file declared of it since the last page."""

    session_id: str
    #: The session's record the first time one of its pages is sent, else None.
    session: dict[str, Any] | None
    #: HTTP exchanges declared since the session's last page (written before its frames).
    exchanges: list[dict[str, Any]]
    #: The frames by column (:class:`~mcp_proxy.store.recordings.FramePage`, sent as a tuple).
    frames: FramePage
    #: Bytes of the file and frames read since the last message (the progress bars).
    read_bytes: int
    read_frames: int


class Done(NamedTuple):
    """The file read to its end and checked: the sessions without their frames."""

    recording: Recording
    read_bytes: int
    read_frames: int


class Failed(NamedTuple):
    """The reader stopped: the exception it raised, for the importer to raise."""

    error: BaseException


def read_pages(
    path: str,
    fmt: str,
    on_page: OnPage,
    page: int,
    read_progress: Progress | None = None,
    read_bytes: Progress | None = None,
) -> Recording:
    """Read a recording file of format ``fmt``, handing each session's frames to ``on_page``
    ``page`` at a time: JSON Lines streams (:func:`stream_rows`), another format is read whole
    as rows by its ``read_rows``. The sessions without their frames are returned."""
    from mcp_proxy.recording.jsonl_read import stream_rows

    if fmt == "jsonl":
        return stream_rows(path, on_page, page, read_progress, read_bytes=read_bytes)
    from mcp_proxy.recording.model import read_bytes as read_file_bytes
    from mcp_proxy.recording.registry import get_format

    read_rows = get_format(fmt).need_rows_reader()
    data = read_file_bytes(path)
    if read_bytes is not None:
        read_bytes(len(data))
    recording, rows = read_rows(data, path, read_progress)
    del data
    for s, frames in zip(recording.sessions, rows, strict=True):
        for part in batched(frames, page):
            on_page(s, list(part))
        frames.clear()
    return recording


class _Sender:
    """The child's end: pages sent as the reader hands them over, with the progress since."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.opened: set[str] = set()
        self.bytes = 0
        self.frames = 0

    def count_bytes(self, n: int) -> None:
        self.bytes += n

    def count_frames(self, n: int) -> None:
        self.frames += n

    def page(self, s: SessionRecording, rows: Rows) -> None:
        first = s.id not in self.opened
        self.opened.add(s.id)
        exchanges = list(s.exchanges)
        s.exchanges.clear()  # sent: the importer writes them before this page's frames
        session = s.session if first else None
        frames = tuple(frame_page(rows))
        page = Page(s.id, session, exchanges, frames, self.bytes, self.frames)  # type: ignore[arg-type]
        self.conn.send_bytes(_PAGE + marshal.dumps(tuple(page), _MARSHAL_VERSION))
        self.bytes = self.frames = 0


def _serve(
    conn: Connection,
    other: Connection | None,
    path: str,
    fmt: str,
    page: int,
) -> None:
    """The child process: read the file, send its pages, then the end (or the error)."""
    if other is not None:
        other.close()  # the importer's end, inherited by a fork: only the importer reads it
    # An interrupt is the importer's to handle: it stops this process by its pid.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = _Sender(conn)
    try:
        recording = read_pages(path, fmt, out.page, page, out.count_frames, out.count_bytes)
        conn.send_bytes(pickle.dumps(Done(recording, out.bytes, out.frames)))
    except BrokenPipeError:
        pass  # the importer is gone: nobody to tell
    except BaseException as exc:  # every failure is the importer's to raise
        with suppress(BrokenPipeError):
            conn.send_bytes(pickle.dumps(Failed(_portable(exc))))
    conn.close()
    # Out without flushing the standard streams a fork inherited: another thread of the importer
    # (a progress bar's) may have held their locks at the fork. Nothing here wrote to them.
    os._exit(0)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # whatever pickling refuses
        return RuntimeError(f"the import's reader failed: {type(exc).__name__}: {exc}")
    exc.__traceback__ = None
    return exc


def _context() -> Any:
    """Fork where the system has it (nothing to start or import again); spawn elsewhere."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _size_pipe(conn: Connection) -> None:
    """The pipe's kernel buffer set to ``IMPORT_PIPE_BYTES`` (Linux; elsewhere its default)."""
    if not sys.platform.startswith("linux"):
        return
    import fcntl

    try:
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, IMPORT_PIPE_BYTES)
    except OSError:
        pass  # above /proc/sys/fs/pipe-max-size for this user: the default buffer then


class ReaderProcess:
    """A recording file read by a child process, its pages received here.

    Use it as a context manager: leaving the block stops the child (by its pid) if it is still
    running and waits for it, whatever ends the block. :meth:`pages` yields each page as the
    child sends it and then sets :attr:`recording`; the child's error is raised from it.
    """

    def __init__(
        self,
        path: str,
        fmt: str,
        page: int,
        *,
        read_progress: Progress | None = None,
        read_bytes: Progress | None = None,
    ) -> None:
        self.path = path
        self.fmt = fmt
        self.page = page
        self.read_progress = read_progress
        self.read_bytes = read_bytes
        self.recording: Recording | None = None
        self.pid: int | None = None
        self._conn: Connection | None = None
        self._proc: Any = None

    def __enter__(self) -> ReaderProcess:
        ctx = _context()
        mine, theirs = ctx.Pipe(duplex=False)
        _size_pipe(mine)
        forked = ctx.get_start_method() == "fork"
        proc = ctx.Process(
            target=_serve,
            args=(theirs, mine if forked else None, self.path, self.fmt, self.page),
            name="mcptape-import-reader",
            daemon=True,
        )
        try:
            proc.start()
        finally:
            theirs.close()  # the child's end: only the child writes it
        self._conn, self._proc, self.pid = mine, proc, proc.pid
        return self

    def __exit__(self, *exc: object) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.exitcode is None:
                proc.kill()  # SIGKILL to its pid: it may be deep in a large file
            proc.join()
            proc.close()

    def _progress(self, read_bytes: int, read_frames: int) -> None:
        if self.read_bytes is not None and read_bytes:
            self.read_bytes(read_bytes)
        if self.read_progress is not None and read_frames:
            self.read_progress(read_frames)

    def pages(self) -> Iterator[tuple[SessionRecording, FramePage]]:
        """Each page the child sends, with its session (the same object for every page of it,
        holding the exchanges declared since its last page); then :attr:`recording` is set."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the reader process is not running")
        sessions: dict[str, SessionRecording] = {}
        while True:
            try:
                data = conn.recv_bytes()
            except EOFError:  # the child died without a word (killed, out of memory)
                from mcp_proxy.errors import UserError

                self._proc.join()
                raise UserError(
                    f"import failed: the reader of {self.path} stopped"
                    f" (exit code {self._proc.exitcode})"
                ) from None
            if data[:1] == _PAGE:
                msg = Page._make(marshal.loads(memoryview(data)[1:]))
                del data
                s = sessions.get(msg.session_id)
                if s is None:
                    s = sessions[msg.session_id] = SessionRecording(msg.session or {})
                s.exchanges = msg.exchanges
                self._progress(msg.read_bytes, msg.read_frames)
                yield s, FramePage._make(msg.frames)
                continue
            end = pickle.loads(data)
            if type(end) is Done:
                self._progress(end.read_bytes, end.read_frames)
                self.recording = end.recording
                return
            raise end.error
