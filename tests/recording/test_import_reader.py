"""``import`` reads the file in a child process (``recording/import_reader.py``) while it writes.

Whatever ends an import — its end, a bad line the child read, the database failing, an
interrupt — the child is gone (stopped by its pid and waited for) when ``import_file`` returns
or raises, and a failed import leaves the database as it was (one transaction). The child's
error is the importer's: the same exception, the same one line, as the CLI shows it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.errors import StoreError, UserError
from mcp_proxy.recording import import_reader
from mcp_proxy.recording.importer import import_file
from mcp_proxy.recording.model import RecordingFormatError
from mcp_proxy.redact import Redactor
from mcp_proxy.store.recordings import ImportWriter
from tests.helpers import db as rdb
from tests.recording.conftest import run_cli
from tests.recording.test_import_memory import write_recording

#: Four pages and a bit (``IMPORT_PAGE`` 5,000): pages are written before the file's end is read.
FRAMES = 21_000


@pytest.fixture
def pids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the reader processes started while the test runs."""
    started: list[int] = []
    enter = import_reader.ReaderProcess.__enter__

    def spy(self: import_reader.ReaderProcess) -> import_reader.ReaderProcess:
        out = enter(self)
        assert self.pid is not None
        started.append(self.pid)
        return out

    monkeypatch.setattr(import_reader.ReaderProcess, "__enter__", spy)
    return started


def assert_gone(pids: list[int]) -> None:
    """Each pid was a child of this process and has been waited for (no zombie, no runner)."""
    assert pids
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def big(tmp_path: Path, bad_line: int | None = None) -> Path:
    path = tmp_path / "big.jsonl"
    write_recording(path, FRAMES)
    if bad_line is not None:
        lines = path.read_bytes().split(b"\n")
        lines[bad_line - 1] = lines[bad_line - 1].replace(b'"dir":"c2s"', b'"dir":"up"')
        path.write_bytes(b"\n".join(lines))
    return path


def sessions(db: Path) -> int:
    return len(rdb.rows(db, "SELECT id FROM sessions"))


def test_an_import_waits_for_its_reader(tmp_path: Path, pids: list[int]) -> None:
    db = tmp_path / "ok.db"
    read: list[int] = []
    _rec, result = import_file(big(tmp_path), f"sqlite:///{db}", read_bytes=read.append)
    assert result.frames == FRAMES
    assert sum(read) == (tmp_path / "big.jsonl").stat().st_size
    assert_gone(pids)


def test_a_bad_line_after_pages_is_the_readers_error_and_nothing_is_kept(
    tmp_path: Path, pids: list[int]
) -> None:
    db = tmp_path / "bad.db"
    line = 2 + 20_001  # header, session, then frame 20,001: four pages were written before it
    path = big(tmp_path, bad_line=line)
    with pytest.raises(RecordingFormatError) as caught:
        import_file(path, f"sqlite:///{db}")
    assert str(caught.value) == f'{path} line {line}: \'dir\' must be "c2s" or "s2c"'
    assert sessions(db) == 0
    assert_gone(pids)


def test_the_cli_says_the_readers_error_in_one_line(tmp_path: Path) -> None:
    line = 2 + 20_001
    path = big(tmp_path, bad_line=line)
    done = run_cli("import", str(path), "--db", f"sqlite:///{tmp_path / 'cli.db'}")
    assert done.returncode == 2
    assert done.stderr.strip() == f'mcptape: {path} line {line}: \'dir\' must be "c2s" or "s2c"'


@pytest.mark.parametrize("error", [StoreError("import failed: disk full"), KeyboardInterrupt()])
def test_the_writer_failing_stops_the_reader_and_rolls_back(
    tmp_path: Path, pids: list[int], monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    db = tmp_path / "fail.db"
    frames = ImportWriter.frames
    calls = [0]

    def failing(self: ImportWriter, *args: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:  # the reader is still reading (or waiting on a full pipe)
            raise error
        frames(self, *args)

    monkeypatch.setattr(ImportWriter, "frames", failing)
    with pytest.raises(type(error)):
        import_file(big(tmp_path), f"sqlite:///{db}", redactor=Redactor(enabled=False))
    assert calls[0] == 2
    assert sessions(db) == 0
    assert_gone(pids)


def test_a_reader_that_dies_is_one_line(tmp_path: Path, pids: list[int]) -> None:
    db = tmp_path / "dead.db"
    pages = import_reader.ReaderProcess.pages

    def killed(self: import_reader.ReaderProcess) -> Any:
        assert self.pid is not None
        for n, page in enumerate(pages(self)):
            if n == 0:
                os.kill(self.pid, signal.SIGKILL)
            yield page

    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as m:
        m.setattr(import_reader.ReaderProcess, "pages", killed)
        with pytest.raises(UserError, match=r"the reader of .* stopped \(exit code -9\)"):
            import_file(big(tmp_path), f"sqlite:///{db}")
    assert sessions(db) == 0
    assert_gone(pids)
