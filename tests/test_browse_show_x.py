"""``show -x`` (``show --exchanges``) in bounded memory (issue 24): the exchanges are printed as
the streaming pass resolves them, in request order, through a bounded reorder buffer; the output
is what the full analysis printed (pinned in ``tests/browse_data/show_x.json``)."""

from __future__ import annotations

import contextlib
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from mcp_proxy.analysis import exchanges as exchanges_mod
from mcp_proxy.analysis import in_order, service
from mcp_proxy.analysis.in_order import InOrder
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.store.engine import ensure_schema
from mcp_proxy.testing.factories import Wire, envelope
from tests.conftest import matrix
from tests.helpers.cli import run_mcptape
from tests.show_x_sessions import CATALOGUE_KEYS, EXPECTED, record_all, show_x

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("pinned", matrix(["sample", "every"], keep={"sample"}))
def test_show_x_prints_what_the_full_analysis_printed_on_every_pinned_session(
    tmp_path: Path, pinned: str
) -> None:
    """The default run compares every recording in ``recordings/`` and every twelfth catalogue
    session (~0.1 s each: text and JSON); ``--full`` compares all 180."""
    expected = json.loads(EXPECTED.read_text())
    db = tmp_path / "pinned.db"
    sids = record_all(db)
    assert sorted(sids) == sorted(expected)
    keys = sorted(sids)
    if pinned == "sample":
        catalogue = CATALOGUE_KEYS
        keys = [k for i, k in enumerate(keys) if k not in catalogue or i % 12 == 0]
    for key in keys:
        assert show_x(db, sids[key]) == expected[key], key


def _calls(calls: int, *, first_pending: bool = False) -> Wire:
    """``calls`` tool calls with progress and a log each; the first never answered if asked."""
    w = Wire.modern()
    for i in range(2, calls + 2):
        meta = envelope(log_level="info")
        meta["progressToken"] = i
        w.request("tools/call", i, {"name": "s", "arguments": {"q": i}, "_meta": meta})
        w.progress(i, 1, 2, direction="s2c")
        w.log(f"working on {i}", level="info")
        if first_pending and i == 2:
            continue
        if i % 7 == 0:
            w.error(i, -32602, "Unknown tool: s")
        else:
            w.result(i, {"content": [], "isError": i % 5 == 0, "resultType": "complete"})
    return w.end()


def _peak_of_show_x(db: Path, name: str) -> int:
    """Peak traced memory of ``show NAME -x --format json`` in this process, printing to
    /dev/null (a captured output would grow with the session)."""
    from mcp_proxy.cli import main

    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        tracemalloc.start()
        try:
            with pytest.raises(SystemExit) as done:
                main(["show", name, "-x", "--format", "json", "--db", str(db)])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert done.value.code in (0, None)
    return peak


def test_show_x_memory_does_not_grow_with_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the streaming path show -x held every exchange (and every message while pairing):
    its traced peak grew with the session's length. The bounds (the answered requests the
    pairing remembers, the exchanges show -x holds: 5,000 each; the rows read per query) are made small here so that a
    session of seconds is past them."""
    monkeypatch.setattr(exchanges_mod, "ANSWERED_KEPT", 100)
    monkeypatch.setattr(in_order, "SHOW_EXCHANGES_HELD", 100)
    monkeypatch.setattr(service, "LOAD_BATCH", 500)  # (frames read per query)
    db = tmp_path / "long.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    _calls(500).record(url, name="short")
    _calls(2000).record(url, name="long")
    run_mcptape("check", "short", "--db", str(db))  # (findings stored: both runs only print)
    run_mcptape("check", "long", "--db", str(db))
    short, long = _peak_of_show_x(db, "short"), _peak_of_show_x(db, "long")
    assert long < short * 1.5 + 2_000_000, (short, long)


def test_past_the_bound_the_rest_print_in_answer_order_and_stderr_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "pending.db"
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    _calls(12, first_pending=True).record(url, name="pending")
    args = ("show", "pending", "-x", "--format", "json", "--db", str(db))
    in_request_order = run_mcptape(*args)
    assert in_request_order.returncode == 0 and in_request_order.stderr == ""
    rows = [json.loads(line) for line in in_request_order.stdout.splitlines()]
    assert [r["request_seq"] for r in rows] == sorted(r["request_seq"] for r in rows)

    monkeypatch.setattr(in_order, "SHOW_EXCHANGES_HELD", 4)
    past = run_mcptape(*args)
    assert past.returncode == 0
    assert past.stderr.count("\n") == 1 and "order they were answered" in past.stderr
    got = [json.loads(line) for line in past.stdout.splitlines()]
    assert sorted(got, key=lambda r: r["request_seq"]) == rows  # every exchange, once
    (pending,) = [r for r in rows if r["outcome"] == "no_response"]
    assert rows.index(pending) == 1  # (after the handshake's exchange)
    assert got[-1] == pending  # given its outcome last, at the session's end
    assert got[:-1] == [r for r in rows if r is not pending]  # the others as they were answered


def _ex(index: int, request_seq: int) -> Exchange:
    ex = Exchange.__new__(Exchange)
    ex.index, ex.request_seq = index, request_seq
    return ex


def test_in_order_holds_early_answers_until_the_earlier_ones_resolve() -> None:
    out: list[int] = []
    notes: list[int] = []
    order = InOrder([], lambda e: out.append(e.index), notes.append, held=2)
    for i in (1, 2, 3, 0):
        order.exchange(_ex(i, 10 + i))
    assert notes == [2] and out == [1]  # 0 pending while 3 later ones were answered
    order.finish()
    assert out == [1, 2, 3, 0]
    out.clear()
    order = InOrder([], lambda e: out.append(e.index), notes.append, held=3)
    for i in (2, 1, 0, 3, 4):
        order.exchange(_ex(i, 10 + i))
    assert out == [0, 1]
    order.finish()
    assert out == [0, 1, 2, 3, 4] and notes == [2]
