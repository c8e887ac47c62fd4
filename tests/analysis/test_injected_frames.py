"""Frames on the ``inject`` channel are mcptape's, not a peer's (fault injection, issue 15).

An injected answer (a rule that errors in the server's place) must not pair with the host's
request, nor make the server's real answer a "duplicate"; an injected second copy of a request
is no id reuse by the host. The viewers show those frames apart: ``show`` text and JSON and the
exchange view mark them — through the real CLI on a recording written by the real Recorder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.testing.factories import Wire
from tests.travel.conftest import run_cli

MARK = "[INJECTED by mcptape]"


def _session() -> Wire:
    w = Wire()
    w.handshake()
    call = {"name": "echo", "arguments": {"text": "hi"}}
    w.request("tools/call", 5, call)
    # The host got an error mcptape made up; the server's real answer followed (and was dropped
    # on the wire, but it is recorded as what the server sent).
    w.error(5, -32603, "injected failure", channel="inject")
    w.result(5, {"content": [{"type": "text", "text": "hi"}]})
    # A duplicated request: the server received the host's request twice.
    w.request("tools/call", 6, call)
    w.request("tools/call", 6, call, channel="inject")
    w.result(6, {"content": []})
    w.session["status"] = "ended"
    return w.end()


def test_injected_frames_neither_pair_nor_raise_findings() -> None:
    w = _session()
    a = w.analyze()
    calls = [e for e in a.exchanges if e.method == "tools/call"]
    assert [(e.msg_id, e.outcome, e.response_seq) for e in calls] == [
        ("5", "ok", 6),
        ("6", "ok", 9),
    ]
    codes = {f.code for f in a.findings}
    assert not codes & {
        "exchange.duplicate_response",
        "exchange.id_reused_in_flight",
        "exchange.unknown_response",
    }, codes
    assert [i.seq for i in a.injected] == [5, 8]
    assert a.frame_count == len(w.frames)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("inject") / "rec.db"
    sid = _session().record("sqlite:///" + str(db), name="rehearsal")
    return db, sid


def test_show_marks_injected_frames(recorded: tuple[Path, str]) -> None:
    db, sid = recorded
    text = run_cli("show", sid, "--db", str(db), "--no-findings")
    assert text.returncode == 0, text.stderr
    marked = [line for line in text.stdout.splitlines() if MARK in line]
    assert [line.split()[0] for line in marked] == ["#5", "#8"]
    as_json = run_cli("show", sid, "--db", str(db), "--format", "json")
    frames = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [f["seq"] for f in frames if f.get("injected") is True] == [5, 8]
    assert all("injected" not in f for f in frames if f["channel"] != "inject")


def test_exchange_view_shows_injected_frames_apart(recorded: tuple[Path, str]) -> None:
    db, sid = recorded
    text = run_cli("show", sid, "--db", str(db), "-x", "--no-findings")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    marked = [line for line in lines if MARK in line]
    assert [line.split()[0] for line in marked] == ["#5", "#8"]
    assert any(line.startswith("#4→#6") for line in lines), lines
    as_json = run_cli("show", sid, "--db", str(db), "-x", "--format", "json")
    items = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [i["seq"] for i in items if i.get("injected")] == [5, 8]
    calls = [i for i in items if i.get("method") == "tools/call" and not i.get("injected")]
    assert [i["response_seq"] for i in calls] == [6, 9]
