"""``mcptape check --format junit`` and ``mcptape replay --format junit`` through the real CLI:
CI systems read the report on stdout; the exit codes stay those of the text format."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.recording.conftest import RECORDINGS, jsonl_with_frames, run_cli
from tests.travel.conftest import server


def _failures(xml: str) -> list[ET.Element]:
    root = ET.fromstring(xml)
    cases = root.findall("./testsuite/testcase")
    assert int(root.get("tests", "-1")) == len(cases) > 0
    return [c for c in cases if c.find("failure") is not None]


def test_check_format_junit_fails_the_error_findings(tmp_path: Path, any_db: Path | str) -> None:
    db = str(any_db)
    src = tmp_path / "bad.jsonl"
    src.write_bytes(  # an answer to a request never made: an error finding
        jsonl_with_frames(
            RECORDINGS / "basic-legacy.mcptape.jsonl",
            [{"dir": "s2c", "text": '{"jsonrpc":"2.0","id":999,"result":{}}\n'}],
        )
    )
    sid = run_cli("import", str(src), "--db", db).stdout.split()[0]
    proc = run_cli("check", sid, "--db", db, "--format", "junit")
    assert proc.returncode == 5, proc.stderr  # findings at --fail-on: as with text
    failed = _failures(proc.stdout)
    assert failed and all(c.find("failure").get("type") for c in failed)  # type: ignore[union-attr]
    never = run_cli("check", sid, "--db", db, "--format", "junit", "--fail-on", "never")
    assert never.returncode == 0 and not _failures(never.stdout)


def test_replay_format_junit_fails_the_exchanges_that_changed(tmp_path: Path) -> None:
    file = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
    changed = server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed")
    proc = run_cli(
        "replay", file, "--db", str(tmp_path / "r.db"), "--format", "junit", "--", *changed
    )
    assert proc.returncode == 1, proc.stderr
    names = [c.get("name", "") for c in _failures(proc.stdout)]
    assert any("tools/call echo" in n for n in names), names
