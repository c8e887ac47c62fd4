"""Every value an imported file gives is checked (issue #22, defect 11).

``import`` once took ``started_at: 1e30``, and then ``sessions``, ``show`` and the dashboard's
``/`` failed on the date it cannot be; ``seq: -5`` and a ``command`` that is not a list went in
as well. Now a value out of range is one line naming the file's line and the field, exit 2,
and nothing of the file is imported (one transaction, even when the bad line comes after pages
of frames were written). The validator is pure, so hypothesis checks its promise: a record it
accepts holds values the readers can use.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.recording import validate
from tests.helpers import db as rdb
from tests.recording.conftest import RECORDINGS, run_cli

SOURCE = RECORDINGS / "basic-legacy.mcptape.jsonl"


def _records(path: Path = SOURCE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _edited(tmp_path: Path, kind: str, field: str, value: Any, nth: int = 0) -> tuple[Path, int]:
    """The committed recording with one field of its ``nth`` record of ``kind`` changed; the
    file and the line number of that record."""
    recs = _records()
    at = [i for i, r in enumerate(recs) if r.get("type") == kind][nth]
    recs[at][field] = value
    return _write(tmp_path / "edited.jsonl", recs), at + 1


def _session_count(db: Path | str) -> int:
    return len(rdb.rows(db, "SELECT id FROM sessions"))


@pytest.mark.parametrize(
    ("kind", "field", "value", "why"),
    [
        ("session", "started_at", 1e30, "field 'started_at' is 1e+30, not a time"),
        ("session", "started_at", -1.0, "field 'started_at' is -1.0, not a time"),
        ("session", "ended_at", "yesterday", "field 'ended_at' must be a time"),
        ("session", "command", "python server.py", "field 'command' must be a list of strings"),
        ("session", "exit_code", 2**40, "field 'exit_code' is 1099511627776, outside"),
        ("session", "meta", [1], "field 'meta' must be a JSON object"),
        ("frame", "seq", -5, "field 'seq' is -5, outside 1 to 2147483647"),
        ("frame", "seq", 2**40, "field 'seq' is 1099511627776, outside"),
        ("frame", "ts", 1e300, "field 'ts' is 1e+300, not a time"),
        ("frame", "mono_ns", 2**64, "field 'mono_ns' must be an integer"),
        ("frame", "sse_id", 5, "field 'sse_id' must be a string"),
    ],
)
def test_a_value_out_of_range_is_one_line_and_imports_nothing(
    tmp_path: Path, kind: str, field: str, value: Any, why: str
) -> None:
    path, line = _edited(tmp_path, kind, field, value)
    db = tmp_path / "t.db"
    result = run_cli("import", str(path), "--db", str(db))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{path} line {line}: {why}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists() or _session_count(db) == 0


def test_a_bad_value_after_pages_of_frames_leaves_the_database_as_it_was(
    tmp_path: Path, any_db: Path | str
) -> None:
    """Two sessions; the first's frames are written a page at a time before the second
    session's line says ``started_at: 1e30``: the import is one transaction, so nothing stays."""
    from mcp_proxy.limits import IMPORT_PAGE

    recs = _records()
    header, end = recs[0], recs[-1]
    body = [r for r in recs[1:-1] if r.get("type") in ("session", "frame")]
    first = [dict(r) for r in body]
    frames = [r for r in first if r["type"] == "frame"]
    template = frames[-1]
    for i in range(1, IMPORT_PAGE * 2 + 2):  # more than two pages of frames
        frames.append({**template, "seq": template["seq"] + i, "ts": template["ts"] + i / 1e3})
    second = [{**r, "session": "b" * 32} if r["type"] == "frame" else dict(r) for r in body]
    second[0].update(id="b" * 32, started_at=1e30)
    recs = [header, first[0], *frames, *second, end]
    end.update(
        sessions=2, frames=len(frames) + len(second) - 1, http_exchanges=0, findings=0,
        annotations=0,
    )  # fmt: skip
    path = _write(tmp_path / "two.jsonl", recs)
    line = 2 + len(frames) + 1
    # What the database held before: a session imported earlier stays, alone.
    assert run_cli("import", str(SOURCE), "--db", rdb.db_arg(any_db)).returncode == 0
    result = run_cli("import", str(path), "--db", rdb.db_arg(any_db))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{path} line {line}: field 'started_at' is 1e+30, not a time" in result.stderr
    assert _session_count(any_db) == 1
    assert len(rdb.rows(any_db, "SELECT seq FROM frames")) == sum(
        1 for r in _records() if r.get("type") == "frame"
    )
    listed = run_cli("sessions", "--db", rdb.db_arg(any_db))
    assert listed.returncode == 0, listed.stderr


def test_a_good_file_still_imports_and_lists(tmp_path: Path) -> None:
    """The committed recordings pass the checks; ``sessions`` and ``show`` read them back."""
    db = tmp_path / "ok.db"
    for path in sorted(RECORDINGS.glob("*.jsonl")):
        result = run_cli("import", str(path), "--db", str(db))
        assert result.returncode == 0, result.stderr
    for command in (["sessions"], ["show", result.stdout.split()[0]]):
        shown = run_cli(*command, "--db", str(db))
        assert shown.returncode == 0, shown.stderr


# --------------------------------------------------------------------------- the validator

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_TIMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70), _JSON
)


def _records_of(fields: validate.Fields) -> st.SearchStrategy[dict[str, Any]]:
    times = {n for n, (_r, check) in fields.items() if check is validate.check_time}
    return st.fixed_dictionaries(
        {},
        optional={name: (_TIMES if name in times else _JSON) for name in fields},
    )


def _usable(rec: dict[str, Any], fields: validate.Fields) -> None:
    """What the readers do with an accepted record's values must work."""
    for name, (required, check) in fields.items():
        value = rec.get(name)
        if value is None:
            assert not required
            continue
        assert type(value) is not bool
        if check is validate.check_time:
            assert math.isfinite(value)
            datetime.fromtimestamp(value, UTC)  # what sessions, show and the dashboard do
        elif type(value) is int:
            assert -(2**63) <= value < 2**63
    if "command" in rec and rec["command"] is not None:
        assert all(isinstance(a, str) for a in rec["command"])


_KINDS = [validate.SESSION, validate.EXCHANGE, validate.FINDING, validate.ANNOTATION]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_KINDS).flatmap(lambda f: st.tuples(st.just(f), _records_of(f))))
def test_an_accepted_record_holds_usable_values(
    case: tuple[validate.Fields, dict[str, Any]],
) -> None:
    fields, rec = case
    why = validate.problem(rec, fields)  # never raises
    if why is None:
        _usable(rec, fields)
    else:
        assert why.startswith("field '") and "\n" not in why


@settings(max_examples=300, deadline=None)
@given(_JSON | st.integers(-(2**40), 2**40), _TIMES, _JSON | st.integers(-(2**70), 2**70))
def test_an_accepted_frame_number_and_clock_fit(seq: Any, ts: Any, mono: Any) -> None:
    why = validate.frame_problem(seq, ts, mono)
    if why is None:
        assert type(seq) is int and 1 <= seq <= 2**31 - 1
        datetime.fromtimestamp(ts, UTC)
        assert type(mono) is int and -(2**63) <= mono < 2**63
    else:
        assert why.startswith("field '")


def test_times_at_the_edges() -> None:
    assert validate.is_time(0) and validate.is_time(253_402_300_799.0)
    assert not validate.is_time(253_402_300_800.0)
    assert not validate.is_time(float("nan")) and not validate.is_time(True)
    datetime.fromtimestamp(253_402_300_799.0, UTC)


def test_text_with_a_lone_surrogate_is_stored_escaped(tmp_path: Path) -> None:
    """A session name, a finding's title, a note that say ``"\\ud800"`` in the file's JSON go in
    escaped, as the recorder stores such text (once a traceback from the database driver)."""
    recs = _records()
    session = next(r for r in recs if r.get("type") == "session")
    session["name"] = "x\ud800"
    sid = session["id"]
    end = recs.pop()
    recs.append({"type": "finding", "session": sid, "code": "x", "title": "t\udc00"})
    recs.append({"type": "annotation", "session": sid, "frame_seq": 1, "note": "n\udc00"})
    recs.append({**end, "findings": 1, "annotations": 1})
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))  # ensure_ascii: "\ud800"
    db = tmp_path / "s.db"
    done = run_cli("import", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert rdb.rows(db, "SELECT name FROM sessions") == [{"name": "x\\ud800"}]
    assert rdb.rows(db, "SELECT title FROM findings") == [{"title": "t\\udc00"}]
    assert rdb.rows(db, "SELECT note FROM annotations") == [{"note": "n\\udc00"}]
