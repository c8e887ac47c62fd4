"""``mcptape intercept list|resolve`` on a real store (both dialects): held rows listed,
resolved once, every user error one line and a stable exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.store.intercepts import InterceptTable
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.both_dialects

CALL = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a text long enough to be cut in the list"}}}\n'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}\n'


@pytest.fixture
def table(db_path: Path | str) -> InterceptTable:
    t = InterceptTable(rdb.url_of(db_path))
    yield t
    t.close()


def cli(db: Path | str, *args: str):  # type: ignore[no-untyped-def]
    return run_mcptape("intercept", *args, "--db", str(db))


def test_list_shows_what_is_held_oldest_first(db_path: Path | str, table: InterceptTable) -> None:
    assert cli(db_path, "list").stdout == "nothing is held\n"
    a = table.hold("s" * 32, "c2s", "request", "tools/call", "3", "method=tools/call", CALL)
    b = table.hold("t" * 32, "s2c", "notification", "notifications/message", None, "", NOTE)
    done = cli(db_path, "list", "--format", "json")
    doc = json.loads(done.stdout)
    assert [h["id"] for h in doc["held"]] == [a, b] and doc["count"] == 2
    assert doc["held"][0]["message"] == CALL.decode().rstrip("\n")
    text = cli(db_path, "list").stdout.splitlines()
    assert text[0].startswith(f"#{a}  c2s request tools/call  session ssssssssssss  held ")
    assert text[1] == "    " + CALL.decode().rstrip("\n")[:99] + "…"


def test_resolve_once_then_already_resolved(db_path: Path | str, table: InterceptTable) -> None:
    iid = table.hold("s" * 32, "c2s", "request", "tools/call", "3", "", CALL)
    done = cli(db_path, "resolve", str(iid), "--set", "params.arguments.text=bye", "--by", "ada")
    assert (done.returncode, done.stdout) == (0, f"#{iid}: edit (by ada)\n")
    row = table.get(iid)
    assert row is not None and row.state == "resolved" and row.resolved_by == "ada"
    assert json.loads(row.payload or b"")["params"]["arguments"] == {"text": "bye"}
    again = cli(db_path, "resolve", str(iid), "--drop")
    assert (again.returncode, again.stderr) == (
        6,
        f"mcptape: message #{iid} was already resolved: edit by ada\n",
    )
    assert cli(db_path, "list", "--format", "json").stdout.count('"id"') == 0


@pytest.mark.parametrize("typed", ["NaN", "Infinity", "-Infinity"])
def test_a_set_value_python_would_read_as_a_number_stays_text(
    db_path: Path | str, table: InterceptTable, typed: str
) -> None:
    """``NaN`` and the infinities are not JSON: ``--set x=NaN`` put a bare ``NaN`` in the
    message, which a strict peer cannot parse. They are the text the person typed."""
    iid = table.hold("s" * 32, "c2s", "request", "tools/call", "3", "", CALL)
    done = cli(db_path, "resolve", str(iid), "--set", f"params.arguments.text={typed}")
    assert done.returncode == 0, done.stderr
    row = table.get(iid)
    assert row is not None and row.payload is not None
    strict = json.loads(row.payload, parse_constant=lambda c: pytest.fail(f"{c} on the wire"))
    assert strict["params"]["arguments"] == {"text": typed}


def test_user_errors_are_one_line(
    db_path: Path | str, table: InterceptTable, tmp_path: Path
) -> None:
    note = table.hold("s" * 32, "s2c", "notification", "notifications/message", None, "", NOTE)
    answer = tmp_path / "answer.json"
    answer.write_text('{"result": {}}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"jsonrpc": "2.0"}')
    cases = [
        (("resolve", str(note)), 2, "choose one of --forward, --edit FILE, --set PATH=VALUE,"
         " --answer FILE, --drop"),
        (("resolve", str(note), "--forward", "--drop"), 2, "choose one of --forward, --edit FILE,"
         " --set PATH=VALUE, --answer FILE, --drop (not --forward and --drop)"),
        (("resolve", "999", "--forward"), 4, "no held message #999 (see: mcptape intercept list)"),
        (("resolve", str(note), "--answer", str(answer)), 2,
         "only a held request can be answered (use --edit or --drop)"),
        (("resolve", str(note), "--edit", str(bad)), 2,
         "the edited message needs a method, or exactly one of result and error"),
        (("resolve", str(note), "--edit", str(tmp_path / "none.json")), 4,
         f"--edit {tmp_path / 'none.json'}: No such file or directory"),
    ]  # fmt: skip
    for args, code, line in cases:
        done = cli(db_path, *args)
        assert (done.returncode, done.stderr) == (code, f"mcptape: {line}\n"), args
    row = table.get(note)
    assert row is not None and row.state == "held"  # nothing was decided by a mistake


def test_no_database_is_exit_4(tmp_path: Path) -> None:
    done = run_mcptape("intercept", "list", "--db", str(tmp_path / "none.sqlite"))
    assert done.returncode == 4 and done.stderr.count("\n") == 1
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--intercept", "drop method=x"),
            "--intercept 'drop method=x' column 1: 'drop' is not key=value (an intercept rule"
            " has no action)",
        ),
        (
            ("--intercept", "mthod=tools/call"),
            "--intercept 'mthod=tools/call' column 1: 'mthod' is not a matcher (one of:"
            " direction, method, name, kind, id, path, nth, times, p, seed)",
        ),
        (
            ("--intercept", "method=x", "--forward"),
            "--forward records what hosts send through it: give no --upstream or COMMAND",
        ),
        (("--fault", "intercept method=x"), "--fault 'intercept method=x' column 1: hold"
         " messages with --intercept, not a fault"),
        (("--intercept-timeout", "-1", "--intercept", "method=x"), "Invalid value for"
         " '--intercept-timeout': -1 is not a number of seconds (0 or more, at most 604800;"
         " 0 waits for ever) (see: mcptape record --help)"),
    ],
)  # fmt: skip
def test_record_refuses_a_bad_intercept_in_one_line(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    db = tmp_path / "never.sqlite"
    done = run_mcptape("record", "--db", str(db), *args, "--", "true")
    assert (done.returncode, done.stderr) == (2, f"mcptape: {line}\n")
    assert not db.exists()


def test_an_intercepts_file_is_read_and_checked(tmp_path: Path) -> None:
    from mcp_proxy.faults.load import load_intercepts

    rules = tmp_path / "intercepts.toml"
    rules.write_text('[[intercept]]\nmethod = "tools/call"\nname = "deploy"\n')
    engine = load_intercepts([], rules)
    assert engine is not None and [r.text for r in engine.rules] == [
        "method=tools/call name=deploy"
    ]
    rules.write_text('[[intercept]]\naction = "drop"\n')
    done = run_mcptape(
        "record", "--intercepts", str(rules), "--db", str(tmp_path / "x"), "--", "true"
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"mcptape: {rules}: intercept #1: action 'drop' does not belong in [[intercept]]\n",
    )


def test_the_tables_columns_are_the_schemas() -> None:
    """``store/intercepts.py`` names the columns itself (its SQL goes to the driver)."""
    from mcp_proxy.store.intercepts import COLUMNS
    from mcp_proxy.store.schema import intercepts

    assert COLUMNS == tuple(c.name for c in intercepts.columns)
