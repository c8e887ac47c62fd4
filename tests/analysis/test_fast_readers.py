"""The viewers' fast paths give what the slow ones give, on hostile and real recordings.

``show``, ``stats`` and the analysis read a SQLite session from ``frame_rows`` as stored
(integer codes, decoded in Python: :func:`mcp_proxy.store.stream.coded_batches`) instead of
through the view ``frames``. Every tuple must be the one the view gives, for every column
subset the readers use, on: every session of the finding catalogue (invalid JSON, noise,
stderr, undecodable bytes, HTTP exchanges, SSE, injected frames …), the recordings shipped in
``recordings/``, and one stream of every hostile line kind of the fuzz corpus. (The default
run takes every fourth catalogue session; ``--full`` and ``--only-full`` all of them.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.core import analyze
from mcp_proxy.analysis.facts import SHAPED_FRAME_COLUMNS, Decoder
from mcp_proxy.recording import read_recording
from mcp_proxy.recording.database import import_recording
from mcp_proxy.render import SHAPED_COLUMNS, FrameRenderer, dict_row, same_shape
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.engine import ensure_schema
from mcp_proxy.store.stream import frame_batches, shaped_batches
from mcp_proxy.testing.factories import Wire
from tests.analysis.cases import CASES
from tests.conftest import catalogue_sample
from tests.fuzz.hostile import every_kind_stream

RECORDINGS = Path(__file__).parents[2] / "recordings"
SUBSETS = [
    FRAME_COLUMNS,
    ("mono_ns", "direction", "channel", "kind", "method", "msg_id", "partial_parse", "raw"),
    ("seq", "kind", "raw"),
    ("method", "direction"),
    ("channel",),
    ("raw", "method", "method", "seq"),
]


def _hostile() -> Wire:
    """Every hostile line kind of the fuzz corpus, both ways and on stderr."""
    w = Wire()
    for i, line in enumerate(every_kind_stream().split(b"\n")):
        w.frame("c2s" if i % 2 else "s2c", line + b"\n")
        if i % 5 == 0:
            w.frame("s2c", line + b"\n", channel="stderr")
    return w


pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One SQLite file holding every shape; its path and session ids."""
    db = tmp_path_factory.mktemp("fast") / "shapes.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    sids = [_hostile().record(url, name="hostile")]
    for code in catalogue_sample(sorted(CASES)):
        for which in (0, 1):
            sids.append(CASES[code][which]().record(url, name=code))
    for path in sorted(RECORDINGS.glob("*.jsonl")):
        result = import_recording(read_recording(path), url)
        sids.extend(new for _old, new in result.sessions)
    return db, sids


def _view(db: Path, sid: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            f"SELECT {', '.join(columns)} FROM frames WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("columns", SUBSETS, ids=lambda c: "+".join(c)[:40])
def test_the_coded_reader_gives_the_views_rows(
    recorded: tuple[Path, list[str]], columns: tuple[str, ...]
) -> None:
    db, sids = recorded
    url = "sqlite:///" + str(db)
    total = 0
    for sid in sids:
        fast = [row for rows in frame_batches(url, sid, batch=7, columns=columns) for row in rows]
        view = _view(db, sid, columns)
        assert fast == view, sid
        total += len(fast)
    assert len(sids) > 50 and total > 300


def test_an_unknown_session_has_no_rows(recorded: tuple[Path, list[str]]) -> None:
    db, _ = recorded
    assert list(frame_batches("sqlite:///" + str(db), "no-such-session")) == []


def test_a_code_no_name_is_known_for_reads_as_null(tmp_path: Path) -> None:
    """A future code (a newer mcptape wrote it) reads as NULL, as the view's CASE gives it."""
    db = tmp_path / "future.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    w = Wire()
    w.request("tools/list", 1)
    sid = w.record(url, name="future")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE frame_rows SET kind = 99, channel = 42")
    conn.commit()
    conn.close()
    cols = ("seq", "direction", "channel", "kind", "method")
    fast = [r for rows in frame_batches(url, sid, columns=cols) for r in rows]
    assert fast == _view(db, sid, cols)
    assert fast and all(r[2] is None and r[3] is None for r in fast)


@pytest.mark.parametrize("mode", ["json", "text", "head"])
def test_the_shaped_renderer_prints_what_the_row_renderers_print(
    recorded: tuple[Path, list[str]], mode: str
) -> None:
    """``show``'s SQLite path (rows by shape) prints the lines the renderer prints for the
    view's rows (shaped by their four strings): every frame of every session."""
    db, sids = recorded
    url = "sqlite:///" + str(db)
    lines = 0
    for sid in sids:
        shapes, batches = shaped_batches(str(db), sid, SHAPED_COLUMNS, batch=11)
        renderer = FrameRenderer(shapes)
        view = FrameRenderer(same_shape)
        view_rows = [
            [dict_row(dict(zip(FRAME_COLUMNS, r, strict=True))) for r in rows]
            for rows in frame_batches(url, sid)
        ]
        if mode == "json":
            fast = [line for rows in batches for line in renderer.json(rows)]
            slow = [line for rows in view_rows for line in view.json(rows)]
        else:
            body = mode == "text"
            fast = [line for rows in batches for line in renderer.text(rows, body=body)]
            slow = [line for rows in view_rows for line in view.text(rows, body=body)]
        assert fast == slow, sid
        lines += len(fast)
    assert lines > 300


def _msg(m: Any) -> tuple[Any, ...]:
    return (m.seq, m.ts, m.mono_ns, m.direction, m.channel, m.kind, m.method, m.msg_id,
            m.error_code, m.size, m.complete, m.partial, m.http, m.raw, m.body, m.event)  # fmt: skip


def test_the_analysis_decodes_stored_shapes_as_the_views_rows(
    recorded: tuple[Path, list[str]],
) -> None:
    """``check --recompute``'s SQLite load (:meth:`Decoder.feed_shaped`) makes the messages
    :meth:`Decoder.feed` makes from the view's rows, and the same findings and exchanges."""
    db, sids = recorded
    url = "sqlite:///" + str(db)
    for sid in sids:
        slow, fast = Decoder(), Decoder()
        for rows in frame_batches(url, sid):
            slow.feed(rows)
        shapes, batches = shaped_batches(str(db), sid, SHAPED_FRAME_COLUMNS, batch=3)
        for rows in batches:
            fast.feed_shaped(rows, shapes)
        assert [_msg(m) for m in fast.msgs] == [_msg(m) for m in slow.msgs], sid
        assert fast.injected == slow.injected and fast.frames == slow.frames
        assert service.load_sync(url, sid).frames == slow.frames
        a, b = analyze(fast), analyze(slow)
        assert [f.as_dict() for f in a.findings] == [f.as_dict() for f in b.findings]
        assert [e.as_dict() for e in a.exchanges] == [e.as_dict() for e in b.exchanges]


def test_reading_a_sqlite_file_imports_no_sqlalchemy(recorded: tuple[Path, list[str]]) -> None:
    """The stream reader leaves SQLAlchemy (~0.5 s of CPU to import) to other dialects: given
    a SQLite file, it reads it with the standard driver alone. (A URL is still parsed by
    ``store.engine.sqlite_path``, which imports SQLAlchemy.)"""
    import subprocess
    import sys

    db, sids = recorded
    code = (
        "import sys\n"
        "from mcp_proxy.store.stream import shaped_batches\n"
        f"_, b = shaped_batches({str(db)!r}, {sids[0]!r}, ('seq', 'shape'))\n"
        "print(sum(len(r) for r in b), 'sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, imported = out.stdout.split()
    assert int(count) > 0 and imported == "False"


def test_the_flags_in_the_shape_decode_as_the_stored_columns(tmp_path: Path) -> None:
    """``complete`` and ``partial_parse`` reach the analysis in the shape's high bits
    (``store.stream.SHAPE_FLAGS``): each of the four combinations, on frames of one shape,
    makes the messages the view's rows make."""
    db = tmp_path / "flags.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    w = Wire()
    for i in range(8):
        w.notify("notifications/progress", {"progressToken": i, "progress": 1}, direction="s2c")
    sid = w.record(url, name="flags")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE frame_rows SET complete = seq % 2, partial_parse = seq / 2 % 2")
    conn.commit()
    conn.close()
    slow, fast = Decoder(), Decoder()
    for rows in frame_batches(url, sid):
        slow.feed(rows)
    shapes, batches = shaped_batches(str(db), sid, SHAPED_FRAME_COLUMNS, batch=3)
    for rows in batches:
        fast.feed_shaped(rows, shapes)
    flags = {(m.complete, m.partial) for m in fast.msgs}
    assert flags == {(False, False), (True, False), (False, True), (True, True)}
    assert [_msg(m) for m in fast.msgs] == [_msg(m) for m in slow.msgs]
