"""``mcptape replay --format junit``: the CI report of docs/ci.md, for the same and a changed server.

One test case per recorded exchange, failed where the live server answered differently; the
exit code still says whether the conversations agree (0) or not (1).
"""

from __future__ import annotations

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

    changed_server = server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed")
    changed = run_cli("replay", REC, "--db", db, "--format", "junit", "--", *changed_server)
    assert changed.returncode == 1, changed.stderr
    failed = {name: text for name, text in _cases(changed.stdout).items() if text is not None}
    assert "#4 → tools/call echo" in failed
    assert (
        "$.result.content[0].text: changed hello, wire → HELLO, WIRE"
        in failed["#4 → tools/call echo"]
    )
