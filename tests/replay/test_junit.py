"""``mcptape replay --format junit`` and ``mcptape replay DIR``: the CI job of docs/ci.md.

One test case per recorded exchange, failed where the live server answered differently; the
exit code still says whether the conversations agree (0) or not (1). A directory replays every
recording in it (servers per file from its ``mcptape.toml``), keeps going after a difference and
writes one JUnit document.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.travel.conftest import RECORDINGS, run_cli, server

pytestmark = pytest.mark.timeout(180)

REC = str(RECORDINGS / "basic-legacy.mcptape.jsonl")


def _cases(xml: str) -> dict[str, str | None]:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    out: dict[str, str | None] = {}
    for case in root.iter("testcase"):
        failure = case.find("failure")
        out[case.get("name", "")] = None if failure is None else (failure.text or "")
    return out


def test_replay_writes_junit_for_ci(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    same = run_cli(
        "replay", REC, "--db", db, "--format", "junit", "--", *server("basic,slow,failing")
    )
    assert same.returncode == 0, same.stderr
    cases = _cases(same.stdout)
    assert len(cases) == 14 and all(f is None for f in cases.values()), cases


def test_replay_directory_replays_every_recording_and_keeps_going(tmp_path: Path) -> None:
    """Two recordings of two servers; the CLI's server is the changed one, the toml names the
    other's. One command: exit 1, one JUnit document, the echo named, the other all passing."""
    rec = tmp_path / "recordings"
    rec.mkdir()
    shutil.copy(REC, rec / "basic-legacy.mcptape.jsonl")
    shutil.copy(RECORDINGS / "nested-legacy.mcptape.jsonl", rec)
    nested = " ".join(server("sampling,elicitation"))
    (rec / "mcptape.toml").write_text(f"[replay.'nested-*']\ncommand = {nested!r}\n")
    changed_server = server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed")
    db = str(tmp_path / "r.db")
    out = run_cli("replay", str(rec), "--db", db, "--format", "junit", "--", *changed_server)
    assert out.returncode == 1, out.stderr
    assert "replayed 2 recording(s)" in out.stderr and "1 differ" in out.stderr
    root = ET.fromstring(out.stdout)
    suites = {
        (s.find("testcase").get("classname") or "").removeprefix("mcptape.replay."): s  # type: ignore[union-attr]
        for s in root.iter("testsuite")
    }
    assert set(suites) == {"basic-legacy", "nested-legacy"}, suites
    assert suites["nested-legacy"].get("failures") == "0"
    assert int(suites["nested-legacy"].get("tests") or 0) > 3
    failed = {
        c.get("name"): (c.find("failure").text or "")  # type: ignore[union-attr]
        for c in suites["basic-legacy"].iter("testcase")
        if c.find("failure") is not None
    }
    echo = json.loads(failed["#4 → tools/call echo"])  # a failure's text is JSON
    assert echo["status"] == "changed"
    assert {
        "path": "$.result.content[0].text",
        "kind": "changed",
        "a": "hello, wire",
        "b": "HELLO, WIRE",
    } in echo["changes"]
    assert root.get("failures") == str(len(failed))

    # A directory with nothing to replay: one line, exit 2.
    (tmp_path / "none").mkdir()
    none = run_cli("replay", str(tmp_path / "none"), "--db", db, "--", *changed_server)
    assert none.returncode == 2 and "no recordings (*.mcptape.jsonl) to replay" in none.stderr
    assert "Traceback" not in none.stderr
