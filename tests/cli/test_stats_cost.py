"""Issue #28: ``mcptape stats`` shows the estimated context cost of each session's
``tools/list`` answer (text and ``--format json``), computed with ``mcp_proxy.tokens``.

Run in-process through the real entry point on an imported recording; the expected figures are
worked out here from the recording file itself (its last ``tools/list`` answer's bytes), not by
the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import run_mcptape
from tests.travel.conftest import RECORDINGS

SOURCE = RECORDINGS / "basic-2026.mcptape.jsonl"


def _last_tools_list_answer() -> tuple[int, str, list[dict]]:
    """(seq, text, tools) of the last response to a ``tools/list`` request in the file."""
    asked: set[str] = set()
    found: tuple[int, str, list[dict]] | None = None
    for line in SOURCE.read_text("utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("type") != "frame" or "text" not in rec:
            continue
        msg = json.loads(rec["text"])
        if rec["kind"] == "request" and msg.get("method") == "tools/list":
            asked.add(str(msg["id"]))
        elif rec["kind"] == "response" and str(msg.get("id")) in asked:
            found = (rec["seq"], rec["text"], msg["result"]["tools"])
    assert found is not None
    return found


def test_stats_shows_the_tools_list_context_cost(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    done = run_mcptape("import", str(SOURCE), "--db", str(db))
    assert done.returncode == 0, done.stderr
    seq, text, tools = _last_tools_list_answer()
    whole = -(-len(text.encode("utf-8")) // 4)

    out = run_mcptape("stats", "--db", str(db), "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    [cost] = doc["context_cost"]
    assert cost["session"] == doc["sessions"][0]["id"]
    assert cost["response_seq"] == seq
    assert cost["how"] == "estimate: 4 bytes of JSON a token"
    assert cost["tokens"] == whole
    assert cost["tool_count"] == len(tools)
    # each tool costed as compact JSON, the dearest first
    expect = [
        (-(-len(json.dumps(t, ensure_ascii=False, separators=(",", ":")).encode()) // 4), t["name"])
        for t in tools
    ]
    expect.sort(key=lambda p: (-p[0], p[1]))
    assert [(t["tokens"], t["name"]) for t in cost["tools"]] == expect[:10]
    assert all(t["description_tokens"] + t["schema_tokens"] <= t["tokens"] for t in cost["tools"])

    text_out = run_mcptape("stats", "--db", str(db))
    assert text_out.returncode == 0, text_out.stderr
    line = next(x for x in text_out.stdout.splitlines() if x.startswith("context cost"))
    assert f"~{whole} tokens" in line and f"{len(tools)} tool(s)" in line
    assert "estimate: 4 bytes of JSON a token" in line
    assert f"dearest: {expect[0][1]} ~{expect[0][0]}" in line
