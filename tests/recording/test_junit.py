"""JUnit XML: the ``junit`` export format through the CLI, and the writers ``check`` and
``replay`` use, on real recordings and a real database's findings (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

from mcp_proxy.analysis.service import current_findings
from mcp_proxy.diff import diff_sessions
from mcp_proxy.recording.junit import Case, Suite, check_junit, junit_xml, replay_junit
from mcp_proxy.recording.registry import read_recording
from mcp_proxy.store.queries import Store
from tests.recording.conftest import RECORDINGS, jsonl_with_frames, run_cli


def _cases(xml: bytes) -> list[ET.Element]:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert int(root.get("tests", "-1")) == len(cases)
    assert int(root.get("failures", "-1")) == sum(1 for c in cases if c.find("failure") is not None)
    return cases


def test_export_junit_has_a_case_per_exchange_and_finding(
    tmp_path: Path, any_db: Path | str
) -> None:
    db = str(any_db)
    imported = run_cli("import", str(RECORDINGS / "basic-legacy.mcptape.jsonl"), "--db", db)
    sid = imported.stdout.split()[0]
    out = tmp_path / "report.junit.xml"
    proc = run_cli("export", sid, "-o", str(out), "--db", db)
    assert proc.returncode == 0 and "(junit)" in proc.stderr, proc.stderr
    cases = _cases(out.read_bytes())
    exchanges = [c for c in cases if not c.get("classname", "").endswith(".findings")]
    findings = [c for c in cases if c.get("classname", "").endswith(".findings")]
    assert len(exchanges) == 13 and findings
    failed = [c for c in exchanges if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["#11 c2s tools/call fail (id 12)"]
    assert failed[0].find("failure").get("type") == "tool.error_result"  # type: ignore[union-attr]


def test_check_junit_fails_a_case_per_error_finding_from_the_database(
    tmp_path: Path, any_db: Path | str, any_db_url: str
) -> None:
    url = any_db_url
    src = tmp_path / "bad.jsonl"
    # An answer to a request that was never made: an error-severity finding.
    src.write_bytes(
        jsonl_with_frames(
            RECORDINGS / "basic-legacy.mcptape.jsonl",
            [{"dir": "s2c", "text": '{"jsonrpc":"2.0","id":999,"result":{}}\n'}],
        )
    )
    assert run_cli("import", str(src), "--db", str(any_db)).returncode == 0

    async def gather() -> list[tuple[dict, list[dict]]]:
        store = await Store.open(url)
        try:
            (s,) = await store.list_sessions()
            return [(s, current_findings(url, s))]
        finally:
            await store.close()

    results = asyncio.run(gather())
    rows = results[0][1]
    errors = [r for r in rows if r["severity"] == "error"]
    assert errors
    cases = _cases(check_junit(results, fail_on="error"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == len(errors)
    assert {c.find("failure").get("type") for c in failed} == {r["code"] for r in errors}  # type: ignore[union-attr]
    assert not [
        c for c in _cases(check_junit(results, fail_on="never")) if c.find("failure") is not None
    ]
    clean = _cases(check_junit([({"id": "0" * 32, "name": "ok"}, [])]))
    assert [c.get("name") for c in clean] == ["no findings"]


def test_replay_junit_fails_the_exchanges_that_changed() -> None:
    a = read_recording(RECORDINGS / "basic-legacy.mcptape.jsonl").one()
    changed = read_recording(RECORDINGS / "basic-legacy.mcptape.jsonl").one()
    for f in changed.frames:
        if f["direction"] == "s2c" and f["msg_id"] == "3":
            f["raw"] = f["raw"].replace(b'"result":{', b'"result":{"extra":1,')
    same = _cases(replay_junit(diff_sessions(a, a), "basic"))
    assert same and all(c.find("failure") is None for c in same)
    result = diff_sessions(a, changed)
    cases = _cases(replay_junit(result, "basic"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == result.counts()["changed"] >= 1
    assert failed[0].find("failure").get("type") == "changed"  # type: ignore[union-attr]


def test_text_xml_cannot_hold_is_replaced_not_fatal() -> None:
    xml = junit_xml([Suite("s\x00", [Case("c", "bad \x01 name \ud800", failure="nul \x00")])])
    (case,) = _cases(xml)
    assert "\ufffd" in case.get("name", "")
