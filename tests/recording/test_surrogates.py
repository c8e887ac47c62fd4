"""Lone surrogates through export and diff (issue #22, defects 10 and 12).

A frame's JSON may say ``"\\ud800"``: valid JSON, recordable (the bytes are kept as they are),
but no UTF-8 string holds the character it decodes to. The database stores such a derived value
escaped (the six characters ``\\ud800``). Two places tripped on it:

- ``export --format otlp`` printed a traceback (protobuf refuses the string) — now the span says
  ``\\ud800`` as text, the way the database holds it;
- ``diff`` of a session against its own export reported the method as changed (the file's frame
  says the method its bytes decode to, the database the escaped one) — now they compare equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.recording.conftest import run_cli

SID = "5" * 32

#: (request, response) bodies, each with a lone surrogate somewhere an export or diff reads it.
CASES = {
    "method": (
        '{"jsonrpc":"2.0","id":1,"method":"tools/\\ud800call","params":{}}',
        '{"jsonrpc":"2.0","id":1,"result":{}}',
    ),
    "only-a-surrogate": (
        '{"jsonrpc":"2.0","id":1,"method":"\\ud800","params":{}}',
        '{"jsonrpc":"2.0","id":1,"result":{}}',
    ),
    "request-id": (
        '{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"a"}}',
        '{"jsonrpc":"2.0","id":"\\ud800","result":{"content":[]}}',
    ),
    "error-message": (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\\udc00"}}',
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"bad \\ud800"}}',
    ),
    "resource-uri": (
        '{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///\\ud800"}}',
        '{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}',
    ),
}


def _imported(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A session holding the case's two frames, imported into a new database: (db, id)."""
    request, response = CASES[case]
    recs = [
        {"format": "mcptape-recording", "version": 2, "generator": "hand-made"},
        {"type": "session", "id": SID, "transport": "stdio", "started_at": 1.75e9},
    ]
    for seq, (direction, body) in enumerate((("c2s", request), ("s2c", response)), start=1):
        recs.append(
            {
                "type": "frame", "session": SID, "seq": seq, "ts": 1.75e9 + seq,
                "mono_ns": seq, "dir": direction, "channel": "stdio", "text": body + "\n",
            }
        )  # fmt: skip
    recs.append({"type": "end", "sessions": 1, "frames": 2})
    path = tmp_path / f"{case}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    db = tmp_path / "s.db"
    done = run_cli("import", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    return db, done.stdout.split()[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_otlp_export_writes_a_lone_surrogate_as_text(tmp_path: Path, case: str) -> None:
    db, sid = _imported(tmp_path, case)
    out = tmp_path / "spans.otlp.json"
    done = run_cli("export", sid, "--db", str(db), "--format", "otlp", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Failed to encode" not in done.stderr, done.stderr
    (line,) = out.read_bytes().splitlines()
    line.decode("utf-8")  # strict: every string made it as UTF-8
    spans = [
        span
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    assert (
        len(spans) == 3
    )  # the session, its one exchange's CLIENT and SERVER span: nothing dropped
    assert "\\ud800" in json.dumps(spans[1], ensure_ascii=False) or case == "error-message"
    if case == "error-message":
        assert spans[1]["status"]["message"] == "bad \\ud800"


@pytest.mark.parametrize("case", ["method", "only-a-surrogate"])
def test_a_session_and_its_own_export_do_not_differ(tmp_path: Path, case: str) -> None:
    db, sid = _imported(tmp_path, case)
    out = tmp_path / "back.mcptape.jsonl"
    done = run_cli("export", sid, "--db", str(db), "-o", str(out))
    assert done.returncode == 0, done.stderr
    diffed = run_cli("diff", str(out), sid, "--db", str(db))
    assert diffed.returncode == 0, diffed.stdout + diffed.stderr
    assert "no differences" in diffed.stdout
