"""``mcptape record --fault/--faults`` on the command line: a bad rule is one line, exit 2.

A bad rule fails before anything starts, so those cases run in-process through the real entry
point (``tests/helpers/cli.run_mcptape``); a good rule runs the server as the installed console
script (:func:`test_faults_with_a_good_rule_run_the_server`), and a usage error of a real
``record`` process is ``tests/test_cli_flags.py``'s ``AS_A_PROCESS`` case."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mcp_proxy.entry import parse_plain_record
from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(60)


def record(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``mcptape record`` in-process: for rules that fail before anything starts."""
    return run_mcptape("record", "--db", str(tmp_path / "cli.sqlite"), *args, "--", "true")


def record_process(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    db = str(tmp_path / "cli.sqlite")
    return subprocess.run(
        [*mcptape_cmd(), "record", "--db", db, *args, "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--fault", "delay ms=fast"),
            "mcptape: --fault 'delay ms=fast' column 7: 'fast' is not a duration"
            " (use 250, 250ms or 2s)",
        ),
        (
            ("--fault", "drop", "--fault", "dely ms=5"),
            "mcptape: --fault 'dely ms=5' column 1: unknown action 'dely' (one of delay,"
            " throttle, drop, error, tool-error, http, corrupt, disconnect, duplicate, reorder)",
        ),
        (
            ("--fault", "http status=429"),
            "mcptape: 'http status=429': http (a status with headers) needs an HTTP transport,"
            " not stdio",
        ),
        (
            ("--fault", "disconnect mode=end-stream"),
            "mcptape: 'disconnect mode=end-stream': disconnect mode=end-stream ends an HTTP SSE"
            " stream, not stdio",
        ),
    ],
)
def test_a_bad_rule_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    done = record(tmp_path, *args)
    assert (done.returncode, done.stderr) == (2, line + "\n")


def test_a_bad_rules_file_names_the_rule(tmp_path: Path) -> None:
    rules = tmp_path / "faults.toml"
    rules.write_text('[[fault]]\naction = "drop"\n\n[[fault]]\naction = "delay"\nms = "soon"\n')
    done = record(tmp_path, "--faults", str(rules))
    assert done.returncode == 2
    assert done.stderr == (
        f"mcptape: {rules}: fault #2, key 'ms': 'soon' is not a duration (use 250, 250ms or 2s)\n"
    )
    missing = record(tmp_path, "--faults", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "cannot read fault rules" in missing.stderr


def test_fault_options_leave_the_fast_path() -> None:
    """The console script's fast path knows only --name/--db: --fault goes to the full CLI."""
    assert parse_plain_record(["record", "--db", "x", "--", "srv"]) == (None, "x", ["srv"])
    assert parse_plain_record(["record", "--fault", "drop", "--", "srv"]) is None
    assert parse_plain_record(["record", "--faults=f.toml", "--", "srv"]) is None


def test_faults_with_a_good_rule_run_the_server(tmp_path: Path) -> None:
    done = record_process(tmp_path, "--fault", "delay ms=10 method=tools/call")
    assert (done.returncode, done.stderr) == (0, "")
