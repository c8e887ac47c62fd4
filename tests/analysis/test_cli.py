"""``mcptape check``, ``stats`` and ``show --exchanges`` as a user (or a CI job) runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mcp_proxy.testing.factories import Wire
from tests.analysis.cases import CASES
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.both_dialects


def run(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Read-only commands: in-process through the real entry point (tests/helpers/cli.py)."""
    return run_mcptape(*args, "--db", str(db), env=env)


@pytest.fixture
def recorded(db_url: str, db_path: Path) -> Path:
    """Three sessions: clean, one with a warning, one with errors."""
    clean = Wire.initialized()
    for i in range(2, 12):
        clean.request("tools/call", i, {"name": "echo" if i % 2 else "add", "arguments": {}})
        clean.wait(i)  # latencies 2..11 ms
        clean.result(i, {"content": [], "isError": i == 11})
    clean.end().record(db_url, name="clean")
    CASES["jsonrpc.unknown_tool"][0]().record(db_url, name="warned")
    CASES["transport.exit_with_pending"][0]().record(db_url, name="crashed")
    return db_path


def test_check_exit_codes_follow_fail_on(recorded: Path) -> None:
    ok = run(recorded, "check", "clean")
    assert ok.returncode == 0, ok.stderr
    assert "tool.error_result" in ok.stdout and "0 error, 0 warning, 1 info" in ok.stdout

    warned = run(recorded, "check", "warned")
    assert warned.returncode == 0  # default --fail-on error
    assert run(recorded, "check", "warned", "--fail-on", "warning").returncode == 5

    crashed = run(recorded, "check", "clean", "crashed")
    assert crashed.returncode == 5
    assert crashed.stderr.strip() == "mcptape: 2 finding(s) at or above error in 1 session(s)"
    assert run(recorded, "check", "crashed", "--fail-on", "never").returncode == 0


def test_check_json_and_the_error_envelope(recorded: Path) -> None:
    done = run(
        recorded, "check", "warned", "crashed", "--format", "json", "--min-severity", "warning"
    )
    assert done.returncode == 5
    docs = json.loads(done.stdout)
    assert [d["session"]["name"] for d in docs] == ["warned", "crashed"]
    assert [f["code"] for f in docs[0]["findings"]] == ["jsonrpc.unknown_tool"]
    assert docs[1]["failed"] is True and docs[1]["counts"]["error"] == 2
    f = docs[1]["findings"][0]
    assert set(f) >= {"code", "severity", "title", "detail", "frame_seqs", "spec"}
    envelope = json.loads(done.stderr.strip())
    assert envelope == {
        "error": {"message": "2 finding(s) at or above error in 1 session(s)", "code": 5}
    }

    missing = run(recorded, "check", "nope", "--format", "json")
    assert missing.returncode == 4
    assert json.loads(missing.stderr)["error"]["code"] == 4
    assert run(recorded, "check", "clean", "--fail-on", "sometimes").returncode == 2


def test_stats_per_method_with_percentiles(recorded: Path) -> None:
    done = run(recorded, "stats", "clean", "--format", "json", "--by-name")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    by = {(m["method"], m["name"]): m for m in data["methods"]}
    echo = by[("tools/call", "echo")]
    assert echo["count"] == 5 and echo["tool_errors"] == 1 and echo["errors"] == 0
    assert echo["latency_ms"]["p50"] is not None
    assert echo["latency_ms"]["p50"] <= echo["latency_ms"]["p95"] <= echo["latency_ms"]["max"]

    text = run(recorded, "stats")  # across every session
    assert text.returncode == 0
    assert text.stdout.splitlines()[0] == "3 session(s)"
    assert "p95 ms" in text.stdout and "tools/call" in text.stdout


def test_show_exchanges_and_findings(recorded: Path) -> None:
    done = run(recorded, "show", "crashed", "--exchanges")
    assert done.returncode == 0, done.stderr
    assert "tools/call crash" in done.stdout and "LOST" in done.stdout
    assert "Findings (2):" in done.stdout and "transport.server_crashed" in done.stdout

    lines = run(recorded, "show", "crashed", "--exchanges", "--format", "json").stdout.splitlines()
    exchanges = [json.loads(line) for line in lines]
    assert [e["method"] for e in exchanges] == ["initialize", "tools/call"]
    assert exchanges[1]["outcome"] == "lost" and exchanges[1]["response_seq"] is None

    frames = run(recorded, "show", "clean", "--no-body")
    assert frames.returncode == 0 and "#1 " in frames.stdout and "Findings (1):" in frames.stdout


def test_check_junit_for_ci(recorded: Path) -> None:
    """``check --format junit``: one test case per finding, failed at ``--fail-on`` or worse;
    the exit code is the same as in the other formats."""
    import xml.etree.ElementTree as ET

    done = run(recorded, "check", "clean", "crashed", "--format", "junit")
    assert done.returncode == 5, done.stderr
    root = ET.fromstring(done.stdout)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name", "").split()[1] for s in suites] == ["clean", "crashed"]
    clean, crashed = suites
    assert clean.get("failures") == "0" and len(clean.findall("testcase")) == 1
    failed = [c for c in crashed.findall("testcase") if c.find("failure") is not None]
    assert len(failed) == 2 and int(crashed.get("failures") or 0) == 2
    assert {c.find("failure").get("type") for c in failed} >= {"transport.server_crashed"}  # type: ignore[union-attr]
    never = run(recorded, "check", "crashed", "--format", "junit", "--fail-on", "never")
    assert never.returncode == 0 and 'failures="0"' in never.stdout


def test_check_reads_a_sqlite_file_without_sqlalchemy(tmp_path: Path) -> None:
    """``check`` goes through the driver (``open_direct``, ``service.current_findings``): on a
    SQLite file, stored findings and a ``--recompute`` alike, SQLAlchemy (~0.5 s of CPU to
    import, more than the rest of ``check`` on stored findings) is never imported. (A SQLite
    file of its own: on the other dialects the driver is opened through SQLAlchemy.)"""
    import sys

    db = tmp_path / "plain.db"
    CASES["jsonrpc.unknown_tool"][0]().record("sqlite:///" + str(db), name="warned")
    code = (
        "import sys\n"
        "from mcp_proxy.cli import main\n"
        "for extra in ([], ['--recompute']):\n"
        f"    sys.argv = ['mcptape', 'check', 'warned', '--db', {str(db)!r}, *extra]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), exc.code\n"
        "print('SQLALCHEMY', 'sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.count("jsonrpc.unknown_tool") == 2
    assert out.stdout.strip().endswith("SQLALCHEMY False"), out.stdout[-300:]
