"""The one row the analysis and the renderer read, whichever store the frames come from.

Stored frames reach :class:`~mcp_proxy.analysis.facts.Decoder` and
:class:`~mcp_proxy.render.FrameRenderer` as ``frame_rows`` holds them (direction, channel, kind
and method as one *shape* integer, ``complete`` and ``partial_parse`` in its high bits:
:func:`mcp_proxy.store.stream.shaped_pages`); frames held in memory as the same rows
(:class:`~mcp_proxy.store.stream.RowShapes`). These tests hold what comes out — messages,
findings, printed frames — to what was recorded, on every hostile line kind of the fuzz
corpus and a sample of the finding catalogue. (The PostgreSQL half: ``test_dialects_agree.py``.)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.core import analyze
from mcp_proxy.analysis.facts import Decoder, decode
from mcp_proxy.render import SHAPED_COLUMNS, FrameRenderer, frame_json
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.engine import ensure_schema
from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, RowShapes, named_rows, shaped_pages
from mcp_proxy.testing.factories import Wire
from tests.analysis.cases import CASES
from tests.conftest import catalogue_sample
from tests.fuzz.hostile import every_kind_stream


def hostile() -> Wire:
    """Every hostile line kind of the fuzz corpus, both ways and on stderr."""
    w = Wire()
    for i, line in enumerate(every_kind_stream().split(b"\n")):
        w.frame("c2s" if i % 2 else "s2c", line + b"\n")
        if i % 5 == 0:
            w.frame("s2c", line + b"\n", channel="stderr")
    return w


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[tuple[Wire, str]]]:
    """One SQLite file holding the hostile stream and catalogue sessions: its URL, and each
    session's wire (what was recorded) beside its id."""
    db = tmp_path_factory.mktemp("rows") / "shapes.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    w = hostile()
    made = [(w, w.record(url, name="hostile"))]
    for code in catalogue_sample(sorted(CASES)):
        for which in (0, 1):
            w = CASES[code][which]()
            made.append((w, w.record(url, name=code)))
    return url, made


def _msg(m: Any) -> tuple[Any, ...]:
    return (m.seq, m.ts, m.mono_ns, m.direction, m.channel, m.kind, m.method, m.msg_id,
            m.error_code, m.size, m.complete, m.partial, m.http, m.raw, m.body, m.event)  # fmt: skip


def as_stored(url: str, sid: str) -> list[dict[str, Any]]:
    """A stored session's frames as mappings (what an export's model holds: the store's own
    strings, ids cut and surrogates escaped as written)."""
    shapes, pages = shaped_pages(url, sid, SHAPED_FRAME_COLUMNS)
    return [
        dict(zip(FRAME_COLUMNS, row, strict=True))
        for rows in pages
        for row in named_rows(shapes, rows)
    ]


@pytest.mark.corpus
def test_stored_frames_decode_to_what_was_recorded(
    recorded: tuple[str, list[tuple[Wire, str]]],
) -> None:
    """Every frame of every session comes back from the store as the message (or injected
    frame) of the frame recorded — seq, direction, channel, kind, bytes — and the session
    makes the same messages, findings and exchanges as its frames held in memory (an
    exported recording analysed, ``RowShapes``)."""
    url, made = recorded
    frames = 0
    for w, sid in made:
        stored = service.load_sync(url, sid)
        held = Decoder()
        held.feed_frames(as_stored(url, sid))
        got = sorted(
            [(m.seq, m.direction, m.channel, m.kind, m.raw) for m in stored.msgs if m.raw]
            + [(i.seq, i.direction, "inject", i.kind, None) for i in stored.injected]
        )
        want = sorted(
            (f["seq"], f["direction"], f["channel"], f["kind"],
             None if f["channel"] == "inject" else f["raw"])
            for f in w.frames
        )  # fmt: skip
        assert got == want, sid
        assert [_msg(m) for m in stored.msgs] == [_msg(m) for m in held.msgs], sid
        assert stored.injected == held.injected and stored.frames == held.frames == len(w.frames)
        a, b = analyze(stored, session=w.session), analyze(held, session=w.session)
        assert [f.as_dict() for f in a.findings] == [f.as_dict() for f in b.findings], sid
        assert [e.as_dict() for e in a.exchanges] == [e.as_dict() for e in b.exchanges], sid
        frames += len(w.frames)
    assert len(made) > 30 and frames > 200


@pytest.mark.corpus
def test_stored_frames_print_as_the_frames_recorded(
    recorded: tuple[str, list[tuple[Wire, str]]],
) -> None:
    """``show --format json`` of a stored session (rows by stored shape) prints each frame as
    the dashboard's JSON of the recorded frame (a dict, made the same row by ``RowShapes``)."""
    url, made = recorded
    for _w, sid in made:
        shapes, batches = shaped_pages(url, sid, SHAPED_COLUMNS, batch=11)
        renderer = FrameRenderer(shapes)
        printed = [json.loads(line) for rows in batches for line in renderer.json(rows)]
        want = [frame_json(f) for f in as_stored(url, sid)]
        assert printed == want, sid


def test_an_unknown_session_has_no_rows(recorded: tuple[str, list[tuple[Wire, str]]]) -> None:
    url, _ = recorded
    _shapes, batches = shaped_pages(url, "no-such-session", SHAPED_COLUMNS)
    assert list(batches) == []
    assert service.load_sync(url, "no-such-session").frames == 0


def test_a_code_no_name_is_known_for_decodes_as_none(tmp_path: Path) -> None:
    """A future code (a newer mcptape wrote it) reads as no name, as the view's CASE gives it:
    the frame still becomes a message, of no channel and no kind, and prints."""
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
    msgs = service.load_sync(url, sid).msgs
    assert [(m.direction, m.channel, m.kind, m.method) for m in msgs] == [
        ("c2s", None, None, "tools/list")
    ]
    shapes, batches = shaped_pages(url, sid, SHAPED_COLUMNS)
    [line] = [line for rows in batches for line in FrameRenderer(shapes).json(rows)]
    assert json.loads(line)["kind"] is None and json.loads(line)["channel"] is None


def test_the_flags_in_the_shape_decode_as_the_stored_columns(tmp_path: Path) -> None:
    """``complete`` and ``partial_parse`` reach the analysis in the shape's high bits
    (``store.stream.SHAPE_FLAGS``): each of the four combinations, on frames of one shape,
    decodes as the columns hold it — from the store and from frames held in memory."""
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
    stored = conn.execute("SELECT seq, complete, partial_parse FROM frame_rows").fetchall()
    conn.close()
    msgs = service.load_sync(url, sid).msgs
    assert [(m.seq, m.complete, m.partial) for m in msgs] == [
        (seq, bool(c), bool(p)) for seq, c, p in stored
    ]
    assert {(m.complete, m.partial) for m in msgs} == {(a, b) for a in (0, 1) for b in (0, 1)}
    held = [
        {**f, "complete": bool(c), "partial_parse": bool(p)}
        for f, (_seq, c, p) in zip(w.frames, stored, strict=True)
    ]
    assert [(m.complete, m.partial) for m in decode(held)] == [
        (m.complete, m.partial) for m in msgs
    ]
    assert [m.complete for m in decode([{**held[0], "complete": None}])] == [True]


def test_frames_held_in_memory_keep_any_names() -> None:
    """Frames held in memory may carry names no stored code has (a hand-written recording):
    their shape is their own table's, so the names come back as given; named rows and
    tuples in ``FRAME_COLUMNS`` order read as mappings do."""
    from collections import namedtuple

    f = dict.fromkeys(FRAME_COLUMNS)
    f |= {"seq": 1, "ts": 1.0, "mono_ns": 1, "direction": "up", "channel": "pigeon",
          "kind": "noise", "method": "x/y", "size": 0, "complete": True}  # fmt: skip
    Row = namedtuple("Row", tuple(reversed(FRAME_COLUMNS)))  # type: ignore[misc]
    for frame in (f, tuple(f[c] for c in FRAME_COLUMNS), Row(**f)):
        [m] = decode([frame])
        assert (m.direction, m.channel, m.kind, m.method) == ("up", "pigeon", "noise", "x/y")
    shapes = RowShapes()
    with pytest.raises(ValueError):
        shapes.rows([f], ("seq", "raw; DROP TABLE frames"))


def test_reading_a_sqlite_file_imports_no_sqlalchemy(
    recorded: tuple[str, list[tuple[Wire, str]]],
) -> None:
    """The stream reader leaves SQLAlchemy (~0.5 s of CPU to import) to other dialects: given
    a SQLite file, it reads it with the standard driver alone."""
    url, made = recorded
    code = (
        "import sys\n"
        "from mcp_proxy.analysis.service import load_sync\n"
        f"d = load_sync({url!r}, {made[0][1]!r})\n"
        "print(d.frames, 'sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, imported = out.stdout.split()
    assert int(count) > 0 and imported == "False"


def test_frames_held_in_memory_number_their_shapes_in_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RowShapes`` keeps at most ``SHAPE_CACHE`` shapes past a page (then starts over) and
    never numbers two shapes alike, so a renderer's cache by shape prints each frame right."""
    from mcp_proxy.store import stream

    monkeypatch.setattr(stream, "SHAPE_CACHE", 2)
    shapes = RowShapes()
    renderer = FrameRenderer(shapes)
    seen: dict[int, str] = {}
    for i in range(6):
        f = {"seq": i, "ts": 1.0, "direction": "c2s", "channel": "stdio", "kind": "request",
             "method": f"m{i}", "size": 2, "raw": b"{}"}  # fmt: skip
        [row] = shapes.rows([f], SHAPED_COLUMNS)
        assert row[2] not in seen and len(shapes.table) <= 2
        seen[row[2]] = f"m{i}"
        assert json.loads(renderer.json([row])[0])["method"] == f"m{i}"
