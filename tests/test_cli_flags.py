"""Flags, files and messages of the CLI (issue 22, item 13): every bad value is one line on
stderr and a stable exit code (docs/cli-exit-codes.md), never a traceback and never a silent
"ok" — before anything starts listening, running or creating a database.

Every case runs in-process through the console script's entry point (``mcp_proxy.entry.main``,
the same parser and messages without a Python start-up each), except one ``record`` case run as
the installed console script (:data:`AS_A_PROCESS`: before the fix, it started a relay and
listened on a port of its own choosing): the usage error of a real process, its exit code and
its one line. Were a ``record`` flag accepted again, the in-process case would start its relay
here and fail on its own assertions or on the timeout.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.commands.common import seconds_value
from mcp_proxy.entry import main as entry_main
from mcp_proxy.faults.rules import FaultRuleError, parse_rule
from mcp_proxy.limits import MAX_FAULT_COUNT, MAX_FLAG_SECONDS
from mcp_proxy.recording.database import import_file
from mcp_proxy.redact import Redactor
from tests.conftest import mcptape_cmd

pytestmark = pytest.mark.timeout(60)

RECORDING = Path(__file__).resolve().parents[1] / "recordings" / "basic-legacy.mcptape.jsonl"
UPSTREAM = "http://127.0.0.1:9/mcp"  # never reached: every case fails before connecting
SERVER = [sys.executable, "-c", "pass"]
USAGE, NOT_FOUND = 2, 4


def _run(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch, *, process: bool = False
) -> tuple[int, str]:
    """``mcptape ARGV``: (exit code, stderr), in-process unless ``process``."""
    monkeypatch.delenv("MCPTAPE_ERROR_FORMAT", raising=False)
    if process:
        proc = subprocess.run(
            [*mcptape_cmd(), *argv],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        return proc.returncode, proc.stderr
    monkeypatch.setattr(sys, "argv", ["mcptape", *argv])
    with pytest.raises(SystemExit) as exited:
        entry_main()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def _one_line(err: str, expected: str) -> None:
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("mcptape: "), err
    assert expected in err, err


NTH = str(10**25)

BAD_FLAGS = {
    "record-upstream-port": (
        ["record", "--upstream", UPSTREAM, "--port", "99999"],
        "--port 99999: not a TCP port (0-65535; 0 picks a free one)",
    ),
    "record-forward-port": (
        ["record", "--forward", "--port", "99999"],
        "--port 99999: not a TCP port (0-65535; 0 picks a free one)",
    ),
    "connect-timeout": (
        ["record", "--upstream", UPSTREAM, "--connect-timeout", "-1"],
        "Invalid value for '--connect-timeout': -1 is not a number of seconds",
    ),
    "response-timeout": (
        ["record", "--upstream", UPSTREAM, "--response-timeout", "-3"],
        "Invalid value for '--response-timeout': -3 is not a number of seconds (0 or more",
    ),
    "idle-cut": (
        ["record", "--upstream", UPSTREAM, "--idle-cut", "-5"],
        "Invalid value for '--idle-cut': -5 is not a number of seconds",
    ),
    "idle-cut-nan": (
        ["record", "--upstream", UPSTREAM, "--idle-cut", "nan"],
        "Invalid value for '--idle-cut': nan is not a number of seconds",
    ),
    "redact-path": (
        ["record", "--redact-path", "[[[", "--", *SERVER],
        "Invalid value for '--redact-path': '[[[' is not a redaction path",
    ),
    "fault-empty-method": (
        ["record", "--fault", "delay ms=10 method=", "--", *SERVER],
        "method= is empty",
    ),
    "fault-empty-name": (
        ["record", "--upstream", UPSTREAM, "--fault", "drop name="],
        "name= is empty",
    ),
    "fault-huge-nth": (
        ["record", "--fault", f"delay ms=10 nth={NTH}", "--", *SERVER],
        f"is more than {MAX_FAULT_COUNT:,}",
    ),
    "mock-timeout": (
        ["mock", str(RECORDING), "--timeout", "-5"],
        "Invalid value for '--timeout': -5 is not a number of seconds",
    ),
    "mock-timeout-huge": (
        ["mock", str(RECORDING), "--timeout", "1e300"],
        "Invalid value for '--timeout': 1e+300 is not a number of seconds",
    ),
    "replay-timeout": (
        ["replay", str(RECORDING), "--timeout", "-1", "--", *SERVER],
        "Invalid value for '--timeout': -1 is not a number of seconds",
    ),
    "dashboard-port": (
        ["dashboard", "--port", "70000"],
        "--port 70000: not a TCP port (0-65535; 0 picks a free one)",
    ),
}


#: The case run as the installed console script (the others run in-process).
AS_A_PROCESS = "record-upstream-port"


@pytest.mark.parametrize(("argv", "expected"), BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_a_bad_flag_value_is_one_line_and_exit_2(
    argv: list[str], expected: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    db = tmp_path / "flags.db"
    process = argv is BAD_FLAGS[AS_A_PROCESS][0]
    code, err = _run([*argv[:1], "--db", str(db), *argv[1:]], capsys, monkeypatch, process=process)
    _one_line(err, expected)
    assert code == USAGE, err
    assert not db.exists()  # nothing started, nothing recorded


MISSING = {
    "export": ["export", "abc", "-o", "{out}"],
    "diff-sessions": ["diff", "abc", "def"],
    "diff-session-and-file": ["diff", str(RECORDING), "abc"],
    "db-status": ["db", "status"],
    "mock-session": ["mock", "abc"],
}


@pytest.mark.parametrize("argv", MISSING.values(), ids=MISSING.keys())
def test_a_missing_database_is_not_found_and_not_created(
    argv: list[str], tmp_path: Path, capsys, monkeypatch
) -> None:
    missing = tmp_path / "typo" / "x.db"
    args = [a.replace("{out}", str(tmp_path / "out.jsonl")) for a in argv]
    code, err = _run([*args, "--db", str(missing)], capsys, monkeypatch)
    _one_line(err, f"no database at {missing}")
    assert code == NOT_FOUND, err
    assert not missing.parent.exists()  # neither the database nor its folder
    assert not (tmp_path / "out.jsonl").exists()


def test_export_to_a_full_device_fails_in_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """``export -o /dev/full``: no space left is an error (it said "exported N frames", and as
    root the rename replaced the device node itself). The test writes through a symlink to
    /dev/full, so that even the old code cannot replace the real device."""
    db = tmp_path / "x.db"
    _, result = import_file(RECORDING, f"sqlite:///{db}")
    ((_, sid),) = result.sessions
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    code, err = _run(["export", sid[:12], "-o", str(full), "--db", str(db)], capsys, monkeypatch)
    _one_line(err, f"cannot write {full}: No space left on device")
    assert code == USAGE, err
    assert full.is_symlink() and full.resolve() == Path("/dev/full")
    assert Path("/dev/full").is_char_device()


def test_export_to_stdout_on_a_full_device_fails_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    _, result = import_file(RECORDING, f"sqlite:///{db}")
    ((_, sid),) = result.sessions
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [*mcptape_cmd(), "export", sid[:12], "-o", "-", "--db", str(db)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    _one_line(proc.stderr, "cannot write stdout: No space left on device")
    assert proc.returncode == USAGE, proc.stderr


def test_a_session_file_needs_no_database(tmp_path: Path, capsys, monkeypatch) -> None:
    """Two FILEs: ``diff`` reads no database, so a missing ``--db`` is fine (and not created)."""
    code, err = _run(
        ["diff", str(RECORDING), str(RECORDING), "--db", str(tmp_path / "none.db")],
        capsys,
        monkeypatch,
    )
    assert code == 0, err
    assert not (tmp_path / "none.db").exists()


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_seconds_are_finite_positive_and_at_most_a_week(value: float) -> None:
    ok = math.isfinite(value) and 0 < value <= MAX_FLAG_SECONDS
    for check, zero_ok in ((seconds_value(), False), (seconds_value(zero="waits"), True)):
        try:
            assert check(value) == value
            accepted = True
        except typer.BadParameter as exc:
            accepted = False
            assert "\n" not in str(exc)
        assert accepted == (ok or (zero_ok and value == 0))


def test_the_bounds_take_real_values() -> None:
    """The limits refuse slips, not real values."""
    assert parse_rule(f"drop nth={MAX_FAULT_COUNT} times=3 method=tools/*").match.nth == (
        MAX_FAULT_COUNT
    )
    with pytest.raises(FaultRuleError, match="is more than"):
        parse_rule(f"drop times={MAX_FAULT_COUNT + 1}")
    with pytest.raises(FaultRuleError, match="name= is empty"):
        parse_rule("drop name='  '")
    assert Redactor.from_options(paths=["**.ssn", "result.content.*.text", "$.params.x"]).paths
    for bad in ("a[0]", "$['x']", "params.argu*", "]"):
        with pytest.raises(ValueError, match="is not a redaction path"):
            Redactor.from_options(paths=[bad])
