"""The reading commands as a user runs them, on recordings made through the real relay.

Issue 10: what was recorded is always printable (items 3, 12), bad numbers and times are one
line and exit 2 (item 13), a missing database is an error and is never created (item 14), and
``--help`` reads like every other click CLI (the newcomer's first minutes).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import mcptape_cmd
from tests.dashboard.test_hardening import C2S, FUZZ_C2S, FUZZ_S2C, record_raw
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(120)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mcptape ARGS`` as a process, to a real pipe (the other calls run in-process through
    the real entry point: ``run_mcptape``, or ``cli`` where capsys reads the output)."""
    return subprocess.run(
        [*mcptape_cmd(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1,200-level-deep exchange and invalid UTF-8, plus a request id of 400 characters."""
    tmp = tmp_path_factory.mktemp("browse")
    db = tmp / "rec.db"
    record_raw(db, tmp)
    record_raw(db, tmp, "fuzz", FUZZ_C2S, FUZZ_S2C)
    long_id = json.dumps("x" * 400)
    script = {
        "capture": str(tmp / "cap2.bin"),
        "write": [
            base64.b64encode(
                ('{"jsonrpc":"2.0","id":' + long_id + ',"result":{}}\n').encode()
            ).decode()
        ],
    }
    (tmp / "long.json").write_text(json.dumps(script))
    req = ('{"jsonrpc":"2.0","id":' + long_id + ',"method":"ping"}\n').encode()
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", "long-id", "--"]
    argv += [sys.executable, "-m", "tests.helpers.wire", str(tmp / "long.json")]
    done = subprocess.run(argv, input=req, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return db


def test_every_reading_command_prints_fuzzed_frames(
    hostile_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lone surrogates decoded from JSON escapes could not be printed (show -x, text) nor
    stored in findings (stats, check): a traceback half-way through the output before."""
    for args in (
        ["show", "fuzz"],
        ["show", "fuzz", "--format", "json"],
        ["show", "fuzz", "-x"],
        ["show", "fuzz", "-x", "--format", "json"],
        ["stats", "fuzz"],
        ["check", "fuzz", "--format", "json"],
        ["tail", "fuzz", "--from-start", "--exit-on-end"],
    ):
        code, out, err = cli(capsys, *args, "--db", str(hostile_db))
        assert code in (0, 5), (args, err[-1500:])
        assert "Traceback" not in err and out, args
    done = run("show", "fuzz", "--db", str(hostile_db))  # to a real pipe, as a user runs it
    assert done.returncode == 0 and "\\ud800" in done.stdout, done.stderr[-1500:]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_show_prints_deep_and_undecodable_frames(hostile_db: Path, fmt: str) -> None:
    """Item 12: ``show`` (text) died of RecursionError on a frame nested 1,200 levels deep."""
    done = run_mcptape("show", "hostile-frames", "--db", str(hostile_db), "--format", fmt)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "Traceback" not in done.stderr
    if fmt == "json":
        frames = [json.loads(line) for line in done.stdout.splitlines()]
        assert len(frames) == 5
        assert frames[0]["text"] == C2S[0].decode()  # the exact text, deep as it came
        assert any("base64" in f for f in frames)
    else:
        assert "[[[[[[[[" in done.stdout


def test_show_json_with_a_long_id(hostile_db: Path) -> None:
    """Item 3 (viewer side): an id the store cut short was invalid JSON and crashed the JSON
    output; whatever is stored, every frame prints."""
    done = run_mcptape("show", "long-id", "--db", str(hostile_db), "--format", "json")
    assert done.returncode == 0, done.stderr[-1500:]
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert [f["kind"] for f in frames][:2] == ["request", "response"]
    assert all(isinstance(f["id"], str) and "x" * 100 in f["id"] for f in frames[:2])


BAD_VALUES = [
    (["--limit", str(2**64)], "--limit"),
    (["--limit", "-5"], "--limit"),
    (["--since", "1e999"], "out of range"),
    (["--since", "nan"], "out of range"),
    (["--since=-1e999"], "out of range"),
    (["--since", "yesterday-ish"], "cannot read time"),
]


def test_bad_numbers_and_times_are_one_line_and_exit_2(
    hostile_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 13: tracebacks (``--limit 1e23``, ``--limit 2**64``) or silent acceptance before."""
    done = run_mcptape("sessions", "--db", str(hostile_db), "--limit", str(2**64))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("mcptape: --limit must be between 0 (all) and")
    for args, message in BAD_VALUES:
        for command in ("sessions", "stats") if args[0] == "--limit" else ("sessions",):
            code, out, err = cli(capsys, command, "--db", str(hostile_db), *args)
            assert code == 2, (command, args, out, err)
            assert err.startswith("mcptape: ") and err.count("\n") == 1, err
            assert message in err and "Traceback" not in err


READING = [["sessions"], ["show", "x"], ["tail", "x"], ["check", "x"], ["stats"], ["dashboard"]]


def test_reading_commands_never_create_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 14: ``sessions --db /typo/x.db`` created the folder and an empty database."""
    db = tmp_path / "typo" / "x.db"
    done = run_mcptape("sessions", "--db", str(db))
    assert done.returncode == 4 and done.stderr.startswith("mcptape: no database at "), done
    for command in READING:
        code, _, err = cli(capsys, *command, "--db", str(db))
        assert code == 4, (command, err)
        assert err.startswith("mcptape: no database at ") and str(db) in err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "typo").exists()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The real entry point in-process (exit code, stdout, stderr): one import, many calls."""
    from mcp_proxy.cli import main

    saved = dict(os.environ)  # (--format json sets MCPTAPE_ERROR_FORMAT for its process)
    try:
        with pytest.raises(SystemExit) as done:
            main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out, err


def test_help_uses_click_metavars_not_python_types(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Newcomer: ``--help`` showed ``<bool>``, ``<str>`` and ``<list[str]>``."""
    import typer.main

    from mcp_proxy.cli import _register_commands, app

    monkeypatch.setenv("COLUMNS", "120")
    _register_commands()
    names = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert {"sessions", "show", "check", "record", "dashboard"} <= set(names), names
    for name in [None, *names]:
        code, out, _ = cli(capsys, *([name] if name else []), "--help")
        assert code == 0, name
        for tag in ("<bool>", "<str>", "<int>", "<list[", "<float>", "<text|"):
            assert tag not in out, (name, tag, out)
    _, show, _ = cli(capsys, "show", "--help")
    assert "Usage: mcptape show [OPTIONS] SESSION" in show
    assert "[text|json]" in show and "TEXT" in show


def test_parser_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for args, text in (
        (["sessions", "--bogus"], "No such option: --bogus"),
        (["show"], "Missing argument 'SESSION'"),
        (["check", "x", "--fail-on", "sometimes"], "'sometimes' is not one of"),
        (["sessions", "--limit", "1e23"], "Invalid value for '--limit'"),
        (["tail", "--interval", "0"], "--interval must be between 0 and 3600 seconds"),
        (["tail", "--interval", "nan"], "--interval must be between 0 and 3600 seconds"),
    ):
        code, _, err = cli(capsys, *args)
        assert code == 2, (args, err)
        assert err.startswith("mcptape: ") and err.count("\n") == 1, err
        assert text in err


def test_show_text_prints_the_same_text_to_a_stdout_of_another_encoding(
    hostile_db: Path,
) -> None:
    """``show`` writes its frame lines to the pipe as UTF-8 bytes; a stdout that writes another
    encoding (PYTHONIOENCODING) gets the same text in its own encoding, the session's head
    before the frames and the findings after them, as every other line it prints. (Without
    PYTHONUNBUFFERED, as a user runs it: the head then waits in the text layer's buffer.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    utf8 = subprocess.run(
        [*mcptape_cmd(), "show", "fuzz", "--db", str(hostile_db)],
        capture_output=True, timeout=60, env={**env, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip
    other = subprocess.run(
        [*mcptape_cmd(), "show", "fuzz", "--db", str(hostile_db)],
        capture_output=True, timeout=60, env={**env, "PYTHONIOENCODING": "utf-16-le"},
    )  # fmt: skip
    assert utf8.returncode == other.returncode == 0, other.stderr[-1500:]
    text = utf8.stdout.decode("utf-8")
    assert other.stdout.decode("utf-16-le") == text
    first = text.split("\n", 1)[0]
    assert " fuzz " in first and not first.startswith("#"), first  # the session's line first
    assert text.index("\n#1 ") < text.index("→") < text.index("indings")


def stored_session(
    db: Path, name: str, frames: list[tuple[str, str, str | None, str, bytes]]
) -> None:
    """A stdio session written straight into a new database, each frame as stored:
    ``(direction, kind, method, msg_id, raw)`` — whatever a store may hold, recorder or not."""
    import sqlite3

    from mcp_proxy.store.engine import ensure_schema

    ensure_schema(f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO sessions (id, name, transport, status, started_at, frame_count, gap_count)"
        " VALUES ('s1', ?, 'stdio', 'ended', 1796058497.25, ?, 0)",
        (name, len(frames)),
    )
    for seq, (direction, kind, method, msg_id, raw) in enumerate(frames, 1):
        partial = 0 if raw.endswith(b"}\n") else 1
        conn.execute(
            "INSERT INTO frames (session_id, seq, ts, mono_ns, direction, channel, kind, method,"
            " msg_id, size, complete, partial_parse, raw) VALUES ('s1', ?, ?, 0, ?, 'stdio',"
            " ?, ?, ?, ?, 1, ?, ?)",
            (seq, 1796058497.25 + seq, direction, kind, method, msg_id, len(raw), partial, raw),
        )
    conn.commit()
    conn.close()


def test_show_json_prints_an_id_holding_a_lone_surrogate_as_its_json_escape(
    tmp_path: Path,
) -> None:
    """An id stored as the JSON text ``"\\ud800"`` (what a peer sent) reads back as a lone
    surrogate, which UTF-8 cannot encode: the JSON lines, now bytes to the pipe, write it as the
    escape it came from (as stdout's error handler did for text), and it reads back the same."""
    db = tmp_path / "surrogate.db"
    raw = b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n'
    stored_session(db, "lone", [("c2s", "request", "ping", '"\\ud800"', raw)] * 2)
    done = run("show", "lone", "--db", str(db), "--format", "json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all('"id": "\\ud800", ' in line for line in lines), lines
    assert [json.loads(line)["id"] for line in lines] == ["\ud800", "\ud800"]


def test_show_x_json_with_a_stored_id_that_is_not_json(tmp_path: Path) -> None:
    """``show -x --format json`` died of a traceback when a frame's stored ``msg_id`` was not
    JSON text (a store that cut or mangled it; ``show`` alone prints it as text): the exchange's
    id prints as the text stored."""
    db = tmp_path / "mangled.db"
    cut = b'{"jsonrpc":"2.0","id":"ab\n'
    stored_session(
        db,
        "mangled",
        [("c2s", "request", "ping", '"ab', cut), ("s2c", "response", None, '"ab', cut)],
    )
    done = run("show", "mangled", "-x", "--db", str(db), "--format", "json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
