"""The recorder's writes against real SQLite files, both backends (no relay)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_proxy.store import schema
from mcp_proxy.store.engine import Driver, ensure_schema
from mcp_proxy.store.rows import (
    EXCHANGE_COLUMNS,
    FINDING_COLUMNS,
    FRAME_COLS,
    JSON_COLUMNS,
    SCHEMA_HEAD,
    SESSION_COLUMNS,
    SESSION_STATS_COLUMNS,
    Batch,
    FrameRow,
)
from mcp_proxy.store.writer import BatchWriter, SqliteBackend
from mcp_proxy.store.writes import DriverBackend


def test_the_column_lists_are_the_schema() -> None:
    def cols(table: object) -> tuple[str, ...]:
        return tuple(c.name for c in table.columns if c.name != "id")  # type: ignore[attr-defined]

    assert SESSION_COLUMNS == (*("id",), *cols(schema.sessions))
    assert cols(schema.http_exchanges) == EXCHANGE_COLUMNS
    assert cols(schema.findings) == FINDING_COLUMNS
    assert tuple(c.name for c in schema.session_stats.columns) == SESSION_STATS_COLUMNS
    assert cols(schema.frames) == FRAME_COLS
    for name, js in JSON_COLUMNS.items():
        table = schema.metadata.tables[name]
        assert js == {c.name for c in table.columns if c.type.__class__.__name__ == "JSON"}
    assert schema.SCHEMA_HEAD == SCHEMA_HEAD


def _batch(sid: str) -> Batch:
    row = FrameRow(sid, 1, 1.0, 1, "c2s", "http", "request", "m", "1", None, 2, True, False,
                   b"{}", 7, None, None, None)  # fmt: skip
    bad = row._replace(seq=2, method="\ud800")  # the driver cannot bind this one
    return Batch(
        sessions=[
            {
                "id": sid,
                "transport": "http",
                "status": "live",
                "started_at": 1.0,
                "meta": {"a": 1},
                "command": None,
                "not_a_column": 1,
            }
        ],
        exchanges=[(7, {"session_id": sid, "method": "POST", "url": "/", "started_at": 1.0})],
        exchange_updates=[(7, {"status": 200, "response_headers": [["a", "b"]]})],
        frames=[row, bad],
        session_counts={sid: (2, 2.0)},
        findings=[
            {
                "session_id": sid,
                "code": "c",
                "severity": "info",
                "title": "t",
                "source": "recorder",
                "created_at": 1.0,
                "frame_seqs": [1],
            }
        ],
    )


@pytest.mark.parametrize("backend", ["sqlite3", "driver"])
def test_both_backends_write_the_same_rows_and_a_bad_row_costs_only_itself(
    tmp_path: Path, backend: str
) -> None:
    db = tmp_path / "w.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    writer = BatchWriter(
        SqliteBackend(str(db)) if backend == "sqlite3" else DriverBackend(Driver(url))
    )
    lost = writer.write(_batch("s" * 32))
    writer.close()
    assert lost == []
    con = sqlite3.connect(db)
    s = con.execute("SELECT meta, command, frame_count FROM sessions").fetchone()
    assert (json.loads(s[0]), s[1], s[2]) == ({"a": 1}, "null", 2)  # JSON as SQLAlchemy writes it
    ex = con.execute("SELECT id, status, response_headers, meta FROM http_exchanges").fetchone()
    assert (ex[1], json.loads(ex[2]), ex[3]) == (200, [["a", "b"]], "null")
    frames = con.execute("SELECT seq, method, http_exchange_id FROM frames ORDER BY seq").fetchall()
    assert frames == [(1, "m", ex[0]), (2, "\\ud800", ex[0])]  # escaped on the row-by-row retry
    assert con.execute("SELECT frame_seqs FROM findings").fetchone() == ("[1]",)


def test_the_recorder_process_writes_sqlite_without_importing_sqlalchemy(tmp_path: Path) -> None:
    import subprocess

    db = tmp_path / "w.db"
    ensure_schema("sqlite:///" + str(db))
    code = (
        "import sys; from mcp_proxy.store.writer import BatchWriter; "
        f"w = BatchWriter.open('sqlite:///{db}'); w.close(); "
        "print('sqlalchemy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.stdout == b"False\n", done.stderr.decode()


def test_a_batch_of_many_rows_with_a_huge_frame_among_them_goes_in_whole(tmp_path: Path) -> None:
    """Rows are encoded and inserted one statement's worth at a time (multi-row INSERTs plus
    the odd rows, a frame over ``BIG_BLOB`` through blob I/O): none lost, none reordered."""
    from mcp_proxy.store.writer import BIG_BLOB

    db = tmp_path / "many.db"
    ensure_schema("sqlite:///" + str(db))
    sid = "m" * 32
    writer = BatchWriter(SqliteBackend(str(db)))
    writer.write(
        Batch(sessions=[{"id": sid, "transport": "stdio", "status": "live", "started_at": 1.0}])
    )
    backend = writer.backend
    assert isinstance(backend, SqliteBackend)
    n = backend._multi * 2 + 7  # two full statements and a remainder
    huge = b"[" + b"0," * (BIG_BLOB // 2) + b"0]"
    rows = []
    for seq in range(1, n + 1):
        raw = huge if seq == backend._multi + 3 else b'{"jsonrpc":"2.0","method":"m%d"}' % (seq % 3)
        rows.append(
            FrameRow(sid, seq, float(seq), seq, "s2c", "stdio", "notification", f"m{seq % 3}",
                     None, None, len(raw), True, False, raw, None, None, None, None)
        )  # fmt: skip
    assert writer.write(Batch(frames=rows, session_counts={sid: (n, float(n))})) == []
    writer.close()
    con = sqlite3.connect(db)
    got = con.execute("SELECT seq, method, length(raw) FROM frames ORDER BY id").fetchall()
    assert got == [(r.seq, r.method, len(r.raw)) for r in rows]
    assert con.execute(
        "SELECT raw FROM frames WHERE seq = ?", (backend._multi + 3,)
    ).fetchone() == (huge,)


def _exchange_batches(sid: str, n: int, *, per_batch: int = 500) -> list[Batch]:
    """``n`` exchanges of one session: inserted open in one batch, ended by an update in the
    next (as the HTTP relay does for a streamed response), each with a frame."""
    out = [Batch(sessions=[{"id": sid, "transport": "http", "status": "live", "started_at": 1.0}])]
    pending: list[int] = []
    seq = 0
    for start in range(0, n, per_batch):
        batch = Batch(exchange_updates=[(x, {"ended_at": 2.0, "status": 200}) for x in pending])
        pending = list(range(start, min(n, start + per_batch)))
        for local in pending:
            seq += 1
            row = {"session_id": sid, "method": "POST", "url": "/", "started_at": 1.0}
            batch.exchanges.append((local, row))
            frame = FrameRow(sid, seq, 1.0, seq, "c2s", "http", "request", "m", str(seq), None, 2,
                             True, False, b"{}", local, None, None, None)  # fmt: skip
            batch.frames.append(frame)
        out.append(batch)
    out.append(Batch(exchange_updates=[(x, {"ended_at": 2.0}) for x in pending]))
    return out


def test_the_exchange_id_map_forgets_exchanges_that_ended(tmp_path: Path) -> None:
    """Issue 22, defect 5: the map grew by one entry per exchange for the life of a relay."""
    from mcp_proxy.limits import ENDED_EXCHANGES_KEPT

    db = tmp_path / "ex.db"
    ensure_schema("sqlite:///" + str(db))
    writer = BatchWriter(SqliteBackend(str(db)))
    n = ENDED_EXCHANGES_KEPT + 3000
    for batch in _exchange_batches("e" * 32, n):
        assert writer.write(batch) == []
    ids = writer.exchange_ids
    assert len(ids) <= ENDED_EXCHANGES_KEPT  # only a window of recently ended ones
    assert ids.get(0) is None and ids.get(n - 1) is not None
    writer.close()
    con = sqlite3.connect(db)
    # every frame kept its link, every exchange got its end
    assert (
        con.execute("SELECT COUNT(*) FROM frames WHERE http_exchange_id IS NULL").fetchone()[0] == 0
    )
    assert (
        con.execute("SELECT COUNT(*) FROM http_exchanges WHERE ended_at IS NULL").fetchone()[0] == 0
    )


def test_exchanges_that_never_end_are_bounded_and_counted() -> None:
    from mcp_proxy.store.writer import ExchangeIds

    ids = ExchangeIds(open_limit=10, ended_limit=3)
    ids.add({i: 100 + i for i in range(25)})
    assert len(ids) == 10 and ids.forgotten == 15
    assert ids.get(14) is None and ids.get(15) == 115  # the oldest went first
    ids.end(range(15, 25))
    assert len(ids) == 3 and [ids.get(i) for i in (21, 22, 23, 24)] == [None, 122, 123, 124]


def test_the_recorder_says_once_when_it_forgets_open_exchanges(tmp_path: Path) -> None:
    """Past ``MAX_OPEN_EXCHANGES`` (here made small) the oldest open exchange is forgotten:
    the recorder says so on stderr, once; its later frames are still recorded."""
    from mcp_proxy.frames import Channel, Direction, Frame
    from mcp_proxy.recorder.contract import ExchangeStart, FrameItem, SessionStart
    from mcp_proxy.recorder.runner import BatchRunner

    said: list[str] = []
    runner = BatchRunner("sqlite:///" + str(tmp_path / "f.db"), warn=said.append)
    assert runner.open() and runner.writer is not None
    runner.writer.exchange_ids.open_limit = 3
    sid = "f" * 32
    runner.feed(SessionStart({"id": sid, "transport": "http", "status": "live", "started_at": 1}))
    for round_ in range(2):
        for local in range(round_ * 5, round_ * 5 + 5):
            runner.feed(ExchangeStart(sid, local, {"method": "POST", "url": "/", "started_at": 1}))
        runner.flush()
    late = Frame(Direction.S2C, Channel.HTTP, b"{}", 1, 1.0, http_exchange=0)
    runner.feed(FrameItem(sid, late))
    stats = runner.finish()
    assert stats.frames_written == 1 and runner.writer.exchange_ids.forgotten == 7
    assert len([s for s in said if "HTTP exchanges open at once" in s]) == 1, said


@pytest.mark.parametrize("backend", ["sqlite3", "driver"])
def test_several_exchanges_of_one_batch_get_their_own_ids_and_every_column(
    tmp_path: Path, backend: str
) -> None:
    """SQLite's exchange insert is one ``executemany`` of tuples: each frame still points at
    its own exchange, after rows of an earlier batch, and every column lands where it belongs
    (header columns written by orjson, or ``json.dumps`` for what orjson refuses)."""
    db = tmp_path / "w.db"
    ensure_schema("sqlite:///" + str(db))
    writer = BatchWriter(
        SqliteBackend(str(db))
        if backend == "sqlite3"
        else DriverBackend(Driver("sqlite:///" + str(db)))
    )
    sid = "e" * 32
    session = {"id": sid, "transport": "http", "status": "live", "started_at": 1.0}

    def frame(seq: int, local: int) -> FrameRow:
        return FrameRow(sid, seq, 1.0, seq, "c2s", "http", "request", "m", str(seq), None, 2,
                        True, False, b"{}", local, None, None, None)  # fmt: skip

    def exchange(local: int) -> dict[str, object]:
        return {
            "session_id": sid, "method": f"M{local}", "url": f"/u{local}", "status": 200 + local,
            "request_headers": [["q", str(local)], ["x", "\ud800é"]],  # orjson refuses one
            "response_headers": [["r", str(local)], ["é", "ü"]],
            "started_at": 1.0 + local, "first_byte_at": 2.0 + local, "ended_at": 3.0 + local,
            "outcome": "complete", "error": f"e{local}", "request_size": 10 + local,
            "response_size": 20 + local, "meta": {"n": local},
        }  # fmt: skip

    assert writer.write(Batch(sessions=[session], exchanges=[(1, exchange(1))],
                              frames=[frame(1, 1)])) == []  # fmt: skip
    locals_ = [5, 3, 9]
    batch = Batch(
        exchanges=[(x, exchange(x)) for x in locals_],
        exchange_updates=[(3, {"status": 299})],
        frames=[frame(2 + i, x) for i, x in enumerate(locals_)],
    )
    assert writer.write(batch) == []
    writer.close()
    con = sqlite3.connect(db)
    rows = con.execute(
        f"SELECT e.{', e.'.join(EXCHANGE_COLUMNS)} FROM frames f"
        " JOIN http_exchanges e ON e.id = f.http_exchange_id ORDER BY f.seq"
    ).fetchall()
    js = JSON_COLUMNS["http_exchanges"]
    got = [
        {c: json.loads(v) if c in js else v for c, v in zip(EXCHANGE_COLUMNS, r, strict=True)}
        for r in rows
    ]
    assert got == [exchange(x) | ({"status": 299} if x == 3 else {}) for x in [1, *locals_]]


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(meta=st.dictionaries(st.text(), _JSON_VALUES, max_size=5))
def test_sqlite_writes_a_json_column_as_json_dumps_does(
    tmp_path: Path, meta: dict[str, object]
) -> None:
    """The SQLite backend's JSON text is ``json.dumps``'s (what SQLAlchemy's JSON type writes):
    NaN, infinities, surrogates and non-ASCII included."""
    db = tmp_path / "j.db"
    if not db.exists():
        ensure_schema("sqlite:///" + str(db))
    writer = BatchWriter(SqliteBackend(str(db)))
    sid = "j" * 32
    writer.write(
        Batch(sessions=[{"id": sid, "transport": "http", "status": "live", "started_at": 1.0}])
    )
    assert (
        writer.write(
            Batch(
                exchanges=[
                    (
                        1,
                        {
                            "session_id": sid,
                            "method": "POST",
                            "url": "/",
                            "started_at": 1.0,
                            "meta": meta,
                        },
                    )
                ]
            )
        )
        == []
    )
    writer.close()
    con = sqlite3.connect(db)
    (text,) = con.execute("SELECT meta FROM http_exchanges ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    assert text == json.dumps(meta)
