"""``stats`` reads the per-method numbers stored when a session ended (``session_stats``).

The recorder process stores them (``service.settle``) with the fingerprint they were computed
from; ``stats`` reads them and recomputes (the one streaming pass) only what is missing or stale,
or everything with ``--recompute``. What is printed must not depend on which of the two it was:
the stored form keeps every latency (exact histograms), so the numbers pooled across sessions
are those of the streaming pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.stats import MethodStats, merge_stats, sorted_stats
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.store.direct import DirectStore
from tests.analysis.streamed import pass_stats
from tests.analysis.task_wires import legacy
from tests.analysis.test_stats_stream import _busy
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

PY = sys.executable


def _pass(w: Any, *, by_name: bool) -> dict[Any, MethodStats]:
    return pass_stats(w, by_name=by_name)


def _dicts(stats: list[MethodStats]) -> str:
    return json.dumps([st.as_dict() for st in stats])


@pytest.mark.parametrize("modern", [False, True])
def test_the_stored_form_gives_back_the_same_numbers_by_name_or_not(modern: bool) -> None:
    """Stored by name, folded by method: the pass's numbers either way (latencies pooled)."""
    w = _busy(modern)
    stored = [st.stored() for st in _pass(w, by_name=True).values()]
    stored = json.loads(json.dumps(stored))  # as the JSON column gives them back
    for by_name in (False, True):
        back = merge_stats(
            {(st.direction, st.method, st.name): st}
            for st in (MethodStats.from_stored(r, by_name=by_name) for r in stored)
        )
        want = sorted_stats(_pass(w, by_name=by_name))
        assert _dicts(sorted_stats(back)) == _dicts(want)


def test_task_durations_survive_the_stored_form() -> None:
    wire = legacy(["working", "completed"], poll_ms=400)
    stats = _pass(wire, by_name=True)
    st = stats[("c2s", "tools/call", "research")]
    back = MethodStats.from_stored(json.loads(json.dumps(st.stored())))
    assert back.as_dict() == st.as_dict() and back.as_dict()["task_ms"]["n"] == 1


def test_stored_numbers_are_stale_on_a_new_analyzer_or_new_frames() -> None:
    w = _busy(False)
    session = {**w.session, "id": "s1", "frame_count": len(w.frames)}
    row = service.stats_row(session, _pass(w, by_name=True))
    assert service.stats_fresh(session, row)
    assert not service.stats_fresh({**session, "frame_count": len(w.frames) + 1}, row)
    assert not service.stats_fresh({**session, "status": "crashed"}, row)
    assert not service.stats_fresh(session, {**row, "analyzer_version": ANALYZER_VERSION + "x"})
    assert not service.stats_fresh(session, {**row, "fingerprint": "not json"})
    assert not service.stats_fresh(session, None)


@pytest.mark.both_dialects
def test_stats_are_stored_then_read_and_recomputed_when_stale(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first ``stats`` stores each ended session's numbers; the next reads them (no pass
    over the frames); a stale row is recomputed and replaced; a live session is never stored."""
    wires = [_busy(False), _busy(True, status="crashed", exit_code=1), _busy(True, status="live")]
    sids = [w.record(db_url, name=f"s{i}") for i, w in enumerate(wires)]
    with DirectStore(db_url) as store:
        sessions = [store.session(sid) for sid in sids]
    assert all(sessions)
    ended = [s for s in sessions if s is not None and s["status"] != "live"]
    passes: list[str] = []
    real = service.stream_analysis

    def counted(*args: Any, **kwargs: Any) -> Any:
        passes.append(args[1]["id"])
        return real(*args, **kwargs)

    for by_name in (False, True):
        first = service.stats_of_sessions(db_url, ended, by_name=by_name)
        passes.clear()
        monkeypatch.setattr(service, "stream_analysis", counted)
        again = service.stats_of_sessions(db_url, ended, by_name=by_name)
        assert passes == [] and _dicts(again) == _dicts(first)  # read, not recomputed
        redone = service.stats_of_sessions(db_url, ended, by_name=by_name, recompute=True)
        assert passes == [s["id"] for s in ended] and _dicts(redone) == _dicts(first)
        monkeypatch.setattr(service, "stream_analysis", real)
    with DirectStore(db_url) as store:
        rows = {sid: store.session_stats(sid) for sid in sids}
        assert rows[sids[0]] and rows[sids[1]] and rows[sids[2]] is None
        # Stale (another analyzer's numbers): recomputed and replaced on the next read.
        stale = dict(rows[sids[0]] or {})
        stale["analyzer_version"] = "0"
        stale["methods"] = []
        store.replace_session_stats(stale)
    got = service.stats_of_sessions(db_url, ended[:1])
    assert got and got[0].count > 0
    with DirectStore(db_url) as store:
        assert (store.session_stats(sids[0]) or {})["analyzer_version"] == ANALYZER_VERSION
    # A live session's numbers are computed every time and never stored.
    live = [s for s in sessions if s is not None and s["status"] == "live"]
    assert service.stats_of_sessions(db_url, live)
    with DirectStore(db_url) as store:
        assert store.session_stats(sids[2]) is None


def test_a_recorded_session_s_stats_come_from_the_stored_table(tmp_path: Path) -> None:
    """End to end through the real CLI: ``mcptape record`` (its recorder process stores the
    numbers when the session ends), then ``mcptape stats`` prints what the table holds — shown
    by altering the stored row — and ``--recompute`` gives the numbers the table held, from
    the frames, and stores them back."""
    db = tmp_path / "rec.db"
    lines = b"".join(
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t%d"}}\n' % (i, i % 2)
        for i in range(1, 8)
    )
    done = subprocess.run(
        [*mcptape_cmd(), "record", "--db", str(db), "--name", "rec", "--", PY, "-m",
         "mcp_proxy.testing.rawecho"],
        input=lines + b'{"jsonrpc":"2.0","id":99,"method":"ping"}\n',
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [row] = rdb.rows(db, "SELECT * FROM session_stats")
    stored = json.loads(row["methods"])
    assert {(m["method"], m["name"]) for m in stored} >= {("tools/call", "t0"), ("ping", None)}

    def stats(*extra: str) -> dict[str, Any]:
        out = run_mcptape("stats", "rec", "--db", str(db), "--format", "json", *extra)
        assert out.returncode == 0, out.stderr
        doc: dict[str, Any] = json.loads(out.stdout)
        return doc

    read = stats()
    recomputed = stats("--recompute")
    assert read == recomputed
    call = next(m for m in read["methods"] if m["method"] == "tools/call")
    assert call["count"] == 7 and call["latency_ms"]["n"] == 7
    assert stats("--by-name") == stats("--by-name", "--recompute")

    # Alter the stored row (its fingerprint still current): ``stats`` prints what it holds.
    for m in stored:
        if m["name"] == "t0":
            m["count"] += 1000
    rdb.execute(db, "UPDATE session_stats SET methods = ?", json.dumps(stored))
    altered = next(m for m in stats()["methods"] if m["method"] == "tools/call")
    assert altered["count"] == 1007
    # ``--recompute`` reads the frames again and stores the true numbers back.
    assert stats("--recompute") == recomputed
    assert stats() == recomputed


@pytest.mark.both_dialects
def test_the_settle_reads_the_session_once(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the settle streamed every frame of an ended session twice — the per-method
    numbers' pass, then the findings' — so the recorder's end-of-session work cost two reads.
    One pass gives both now: every read of the whole session at the store seam is counted (the
    handshake pass's filtered reads are not whole ones)."""
    w = _busy(True, status="crashed", exit_code=1)
    sid = w.record(db_url, name="once")
    whole: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def read(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("rows") is None:
                whole.append(name)
            return real(*args, **kwargs)

        return read

    monkeypatch.setattr(service, "shaped_pages", spy("shaped_pages", service.shaped_pages))
    assert service.settle(db_url, sid)
    assert len(whole) == 1, whole
    with DirectStore(db_url) as store:
        s = store.session(sid)
        assert s is not None
        assert service.stats_fresh(s, store.session_stats(sid))
        assert service.is_fresh(s, store.analysis_summary(sid))
    whole.clear()
    assert not service.settle(db_url, sid) and whole == []  # both current: nothing read
    # What it stored is what each command computes alone.
    assert _dicts(service.stats_of_sessions(db_url, [s], by_name=True)) == _dicts(
        sorted_stats(_pass(w, by_name=True))
    )


def test_a_histogram_keeps_so_many_values_and_says_how_many_it_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounded (``limits.STATS_VALUES_KEPT``): a new distinct latency past the limit is left out
    of the histogram and counted in ``dropped`` (its exchange still counted), which the stored
    form, the pooling across sessions and ``as_dict`` all keep."""
    from mcp_proxy.analysis import stats as stats_mod
    from mcp_proxy.analysis.model import Exchange

    monkeypatch.setattr(stats_mod, "STATS_VALUES_KEPT", 3)

    def ex(ms: float) -> Exchange:
        e = Exchange(0, "c2s", "ping", "1", request_seq=1, request_ts=0.0, request_mono_ns=0)
        e.latency_ms = ms
        return e

    st = MethodStats("c2s", "ping")
    for ms in (1.0, 2.0, 1.0, 3.0, 4.0, 5.0, 2.0):
        st.add(ex(ms))
    assert st.latencies == {1.0: 2, 2.0: 2, 3.0: 1} and st.dropped == 2 and st.count == 7
    d = st.as_dict()
    assert d["dropped"] == 2 and d["latency_ms"]["n"] == 5
    back = MethodStats.from_stored(json.loads(json.dumps(st.stored())))
    assert back.as_dict() == d
    other = MethodStats("c2s", "ping", latencies={3.0: 1, 9.0: 4}, dropped=1)
    st.merge(other)
    assert st.latencies == {1.0: 2, 2.0: 2, 3.0: 2} and st.dropped == 2 + 4 + 1
    assert "dropped" not in MethodStats("c2s", "ping", latencies={1.0: 1}).as_dict()


def test_a_session_keeps_so_many_methods_apart_and_counts_the_rest_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounded (``limits.STATS_METHODS_KEPT``): a peer inventing a method per request no
    longer grows the table with every exchange; past the limit the exchanges of methods not yet
    kept are counted under one row per direction, and every exchange is still counted."""
    from mcp_proxy.analysis import stats as stats_mod
    from mcp_proxy.analysis.model import Exchange

    monkeypatch.setattr(stats_mod, "STATS_METHODS_KEPT", 3)
    table = stats_mod.MethodTable()
    for i in range(10):
        for direction in ("c2s", "s2c"):
            e = Exchange(0, direction, f"m{i % 5}", str(i), request_seq=i, request_ts=0.0,
                         request_mono_ns=0)  # fmt: skip
            table.exchange(e)
    other = [k for k in table.stats if k[1] == stats_mod.OTHER_METHODS]
    assert sorted(k[0] for k in other) == ["c2s", "s2c"]  # one row per direction
    assert len(table.stats) == 3 + 2
    assert sum(st.count for st in table.stats.values()) == 20
    assert table.stats[("c2s", "m0", None)].count == 2


def test_stats_says_how_many_latencies_its_percentiles_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``STATS_VALUES_KEPT`` the table says so under the method's row, and the JSON and
    the stored row carry ``dropped``; below it nothing is added (the output is as before)."""
    from mcp_proxy.analysis import stats as stats_mod

    db = tmp_path / "s.db"
    w = _busy(False)
    w.record("sqlite:///" + str(db), name="rec")
    plain = run_mcptape("stats", "rec", "--db", str(db))
    assert plain.returncode == 0 and "left out" not in plain.stdout
    monkeypatch.setattr(stats_mod, "STATS_VALUES_KEPT", 1)
    out = run_mcptape("stats", "rec", "--db", str(db), "--recompute")
    assert out.returncode == 0, out.stderr
    assert "latencies left out of the percentiles" in out.stdout
    got = json.loads(run_mcptape("stats", "rec", "--db", str(db), "--format", "json").stdout)
    assert any(m.get("dropped") for m in got["methods"])


@pytest.mark.both_dialects
def test_a_check_that_analyses_stores_the_numbers_too(db_url: str) -> None:
    """The pass ``check`` runs on a session whose findings are stale is the settle's: it stores
    the session's numbers as well, so the next ``stats`` reads them (no second pass)."""
    w = _busy(False)
    sid = w.record(db_url, name="checked")
    with DirectStore(db_url) as store:
        s = store.session(sid)
        assert s is not None and store.session_stats(sid) is None
    service.current_findings(db_url, s)
    with DirectStore(db_url) as store:
        assert service.stats_fresh(s, store.session_stats(sid))
        assert service.is_fresh(s, store.analysis_summary(sid))
