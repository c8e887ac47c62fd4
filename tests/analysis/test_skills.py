"""Skills (SEP-2640): a skill file served by resources/read is compared with the digest and
size its skills/list or skills/get entry gave (``skill.digest_mismatch``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.testing.factories import Wire
from tests.analysis.cases_tasks import SKILL_MD, SKILL_URI, skill_session
from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape

ROOT = Path(__file__).resolve().parents[2]


def _codes(w: Wire) -> list[str]:
    return [f.code for f in w.analyze().findings if f.code.startswith("skill.")]


def test_a_matching_file_is_no_finding_as_text_or_blob_from_list_or_get() -> None:
    for method in ("skills/list", "skills/get"):
        assert _codes(skill_session(SKILL_MD, method=method)) == []
        assert _codes(skill_session(SKILL_MD.encode(), method=method)) == []


def test_other_bytes_or_another_size_are_one_finding_naming_both() -> None:
    a = skill_session(SKILL_MD.replace("Git\n", "Gjt\n"), method="skills/get").analyze()
    (f,) = [f for f in a.findings if f.code == "skill.digest_mismatch"]
    assert SKILL_URI in f.title and "sha256:" in f.title
    by = {ex.method: ex for ex in a.exchanges}
    entry, read = by["skills/get"], by["resources/read"]
    assert f.frame_seqs == [entry.response_seq, read.request_seq, read.response_seq]
    assert f.exchange == read.index
    longer = skill_session((SKILL_MD + "more\n").encode())
    (g,) = [f for f in longer.analyze().findings if f.code == "skill.digest_mismatch"]
    assert f"{len(SKILL_MD) + 5} bytes, its entry says {len(SKILL_MD)}" in g.title


def test_unlisted_files_and_undecodable_blobs_are_not_compared() -> None:
    w = skill_session(SKILL_MD)
    w.request("resources/read", 9, {"uri": "skill://other/SKILL.md"})
    w.result(9, {"contents": [{"uri": "skill://other/SKILL.md", "text": "anything"}]})
    assert _codes(w.end()) == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(entry=json_values, contents=json_values)
def test_hostile_shapes_do_not_raise(entry: Any, contents: Any) -> None:
    w = Wire.modern()
    w.request("skills/list", 2, {})
    w.result(2, {"skills": [entry, {"resources": [entry]}]})
    w.request("resources/read", 3, {"uri": SKILL_URI})
    w.result(3, {"contents": contents})
    w.end().analyze()


@pytest.mark.parametrize("tampered", [True, False])
def test_a_tampered_skill_file_through_the_stdio_relay(tampered: bool, tmp_path: Path) -> None:
    """``mcptape record`` in front of a raw skills server; ``check`` of the recording names the
    skill file whose bytes differ from its listing (and says nothing when they match)."""
    db = str(tmp_path / "s.db")
    server = [sys.executable, "-m", "tests.analysis.raw_skill_server"]
    server += ["tampered"] if tampered else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-host", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 2, "method": "skills/list", "params": {"_meta": meta}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "resources/read",
            "params": {"uri": SKILL_URI, "_meta": meta},
        },
    ]
    proc = subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", db, "--name", "skills", "--", *server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    for line in lines:  # one at a time: each answer read before the next request
        proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.flush()
        answers.append(json.loads(proc.stdout.readline()))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [a["id"] for a in answers] == [1, 2, 3]
    out = json.loads(run_mcptape("check", "skills", "--db", db, "--format", "json").stdout)
    findings = out[0]["findings"] if out and "findings" in out[0] else out
    found = [f for f in findings if f["code"] == "skill.digest_mismatch"]
    if not tampered:
        assert found == [], findings
        return
    (f,) = found
    assert SKILL_URI in f["title"] and f"its entry says {len(SKILL_MD)}" in f["title"], f


def test_listed_files_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most SKILL_FILES_KEPT files are followed (the oldest forgotten), none with a URI
    longer than SKILL_URI_CHARS."""
    from mcp_proxy.analysis import skills
    from mcp_proxy.analysis.skills import Skills

    monkeypatch.setattr(skills, "SKILL_FILES_KEPT", 3)
    s = Skills(sink=None)  # type: ignore[arg-type]  (nothing is reported here)
    digest = "sha256:" + "0" * 64
    for i in range(5):
        s.remember({"uri": f"skill://s/{i}", "digest": digest, "size": 1}, i)
    s.remember({"uri": "skill://" + "x" * 5000, "digest": digest, "size": 1}, 9)
    assert list(s.listed) == ["skill://s/2", "skill://s/3", "skill://s/4"]
