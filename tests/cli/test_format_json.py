"""Issue #29: every command that prints a result takes ``--format json`` and prints one JSON
document on stdout (a long-running one: one JSON line once it is ready); with it, an error is
one JSON line on stderr and the exit code is the text format's.

The short commands run in-process through the real entry point (``tests/helpers/cli.py``);
``dashboard`` and ``mock --port`` run as processes, their first line read and the process
stopped by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.travel.conftest import RECORDINGS

#: Commands whose output has no ``--format json``, each with the reason. A new command that
#: prints a result is expected to take ``--format text|json`` (the test below fails otherwise).
WITHOUT_JSON = {
    # The output is the data itself: --format names the recording format written.
    "export": "--format names the recording format written",
    # --format names the recording format read; its result (the new session ids) is JSON with
    # --json (test_import_json below).
    "import": "--format names the recording format read; --json prints the result",
}


def _leaf_commands() -> dict[str, Any]:
    """Every command of the typer app, by its path after ``mcptape`` (``db status``)."""
    from mcp_proxy.cli import build_command

    out: dict[str, Any] = {}

    def walk(command: Any, path: str) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}".strip())
        else:
            out[path] = command

    walk(build_command(), "")
    return out


def _format_choices(command: Any) -> list[str] | None:
    for param in command.params:
        if "--format" in getattr(param, "opts", ()):
            # typer's own option class (what cli._metavar reads), else click's Choice
            desc = getattr(param, "type_descriptor", None)
            choices = desc.choices if desc is not None and desc.is_choice else None
            if desc is None:
                choices = getattr(getattr(param, "type", None), "choices", None)
            return [str(getattr(c, "value", c)) for c in choices or ()]
    return None


def test_every_command_that_prints_a_result_takes_format_json() -> None:
    commands = _leaf_commands()
    assert {"demo", "formats", "mock", "dashboard", "db status", "install"} <= set(commands)
    missing = {
        path: _format_choices(command)
        for path, command in commands.items()
        if path not in WITHOUT_JSON and "json" not in (_format_choices(command) or [])
    }
    assert not missing, f"commands without --format json: {missing}"
    assert set(WITHOUT_JSON) <= set(commands), "an exception names a command that is gone"


def _json(proc: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    assert proc.returncode == code, (proc.args, proc.returncode, proc.stderr)
    return json.loads(proc.stdout)


def _json_error(proc: subprocess.CompletedProcess[str], code: int) -> dict[str, Any]:
    """The one JSON line an error is with --format json."""
    assert proc.returncode == code, (proc.args, proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    error = json.loads(line)["error"]
    assert error["code"] == code and error["message"]
    return error


def test_formats_json() -> None:
    rows = _json(run_mcptape("formats", "--format", "json"))
    by_name = {r["name"]: r for r in rows}
    assert by_name["jsonl"]["can"] == ["export", "import"]
    assert by_name["otlp"]["can"] == ["export", "send"]
    assert ".har" in by_name["har"]["suffixes"] and by_name["har"]["title"]
    assert set(by_name["junit"]) == {"name", "title", "suffixes", "media_type", "can", "transports"}


def test_db_status_upgrade_copy_json(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    missing = run_mcptape("db", "status", "--db", str(db), "--format", "json")
    assert "no database at" in _json_error(missing, 4)["message"]
    assert missing.stdout == ""

    first = _json(run_mcptape("db", "upgrade", "--db", str(db), "--format", "json"))
    assert first["before"] is None and first["after"] and first["upgraded"] is True
    again = _json(run_mcptape("db", "upgrade", "--db", str(db), "--format", "json"))
    assert again == {**first, "before": first["after"], "upgraded": False}

    status = _json(run_mcptape("db", "status", "--db", str(db), "--format", "json"))
    assert status["state"] == "current" and status["revision"] == first["after"]
    assert status["dialect"] == "sqlite" and status["message"] == "up to date"
    # --json stays, hidden, as an alias of --format json
    assert _json(run_mcptape("db", "status", "--db", str(db), "--json")) == status
    assert "--json" not in run_mcptape("db", "status", "--help").stdout

    imported = run_mcptape(
        "import", str(RECORDINGS / "basic-legacy.mcptape.jsonl"), "--db", str(db)
    )
    assert imported.returncode == 0, imported.stderr
    copied = _json(run_mcptape("db", "copy", str(db), str(tmp_path / "b.db"), "--format", "json"))
    assert copied["copied"] == 1 and copied["frames"] == 34 and len(copied["session_ids"]) == 1
    assert copied["from"].endswith("a.db") and copied["to"].endswith("b.db")


@pytest.fixture
def host_env(tmp_path: Path) -> dict[str, str]:
    """HOME and the data dir inside ``tmp_path``, with one Cursor config of one stdio server."""
    home = tmp_path / "home"
    cfg = home / ".cursor" / "mcp.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('{"mcpServers": {"a": {"command": "/no/such/mcp-server"}}}')
    return {
        "HOME": str(home),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "MCPTAPE_DB": str(tmp_path / "data" / "rec.db"),
    }


def test_install_uninstall_doctor_json(host_env: dict[str, str], tmp_path: Path) -> None:
    cfg = Path(host_env["HOME"]) / ".cursor" / "mcp.json"
    before = cfg.read_bytes()
    dry = _json(run_mcptape("install", "--dry-run", "--format", "json", env=host_env))
    assert dry["op"] == "install" and dry["dry_run"] is True and dry["written"] == 0
    (target,) = dry["targets"]
    assert target["host"] == "cursor" and target["config"] == str(cfg)
    assert target["servers"] == [
        {"server": "a", "status": "wrapped", "message": target["servers"][0]["message"]}
    ]
    assert target["changed"] is True and target["written"] is False
    assert target["diff"].startswith("---") and '+        "record",' not in before.decode()
    assert "record" in target["diff"] and cfg.read_bytes() == before
    assert dry["db"] == host_env["MCPTAPE_DB"]

    done = _json(run_mcptape("install", "--format", "json", env=host_env))
    (target,) = done["targets"]
    assert done["written"] == 1 and target["written"] is True and target["diff"] is None
    assert target["backup"] == f"{cfg}.mcptape-backup" and target["next"]
    assert json.loads(cfg.read_text())["mcpServers"]["a"]["args"][0] == "record"

    doctor = run_mcptape("doctor", "--format", "json", env=host_env)
    report = _json(doctor, 1)  # the wrapped command is gone: a problem, exit 1 as in text
    assert report["problems"] == sum(1 for c in report["checks"] if c["level"] == "problem") >= 1
    assert all(set(c) == {"level", "subject", "message", "fix"} for c in report["checks"])
    assert any(c["subject"].startswith("database ") for c in report["checks"])

    undo = _json(run_mcptape("uninstall", "--format", "json", env=host_env))
    (target,) = undo["targets"]
    assert undo["op"] == "uninstall" and target["restored"] == "backup"
    assert [s["status"] for s in target["servers"]] == ["unwrapped"]
    assert cfg.read_bytes() == before

    ghost = run_mcptape("uninstall", "--server", "ghost", "--format", "json", env=host_env)
    assert _json_error(ghost, 4)["message"].startswith("no server named 'ghost'")
    assert json.loads(ghost.stdout)["missing"] == ["ghost"]  # the report still parses


def test_install_json_reports_a_broken_config_and_goes_on(
    host_env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(host_env["HOME"])
    vscode = home / ".config" / "Code" / "User" / "mcp.json"
    vscode.parent.mkdir(parents=True)
    vscode.write_text('{"servers": {"a": ')  # cut short
    proc = run_mcptape("install", "--format", "json", env=host_env)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    by_host = {t["host"]: t for t in doc["targets"]}
    assert by_host["cursor"]["written"] is True and by_host["cursor"]["error"] is None
    assert by_host["vscode"]["error"] and by_host["vscode"]["exit_code"] == 2
    (line,) = proc.stderr.strip().splitlines()
    assert json.loads(line)["error"]["message"].startswith("VS Code: ")


# --full only: a second `mcptape demo` (~8 s of CPU: three recorded sessions and their SDK
# servers). The default run records the demo once, as text (tests/test_demo.py: the README's
# quick start); the other commands' --format json run here in the default run.
@pytest.mark.full
@pytest.mark.timeout(120)
def test_demo_json(tmp_path: Path) -> None:
    """As a process: the SDK's stdio client hands the server this process's stderr (a fd)."""
    db = tmp_path / "demo.db"
    argv = [*mcptape_cmd(), "demo", "--db", str(db), "--format", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=110, check=False)
    doc = _json(proc)
    assert [s["name"] for s in doc["sessions"]] == ["demo", "demo-legacy", "demo-http"]
    assert {s["id"] for s in doc["sessions"]} == {s["id"] for s in rdb.sessions(db)}
    assert doc["sessions"][2]["transport"] == "http"
    assert doc["database"].endswith("demo.db") and doc["dashboard"].endswith(f"--db {db}")
    assert "tools/call" in proc.stderr  # the frames, for a person, on stderr


def _first_line(argv: list[str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [*mcptape_cmd(), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the command is ready (or ends)
    if not line:
        proc.wait(10)
        pytest.fail(f"{argv[0]} printed nothing: {proc.stderr.read() if proc.stderr else ''}")
    return proc, json.loads(line)


def _stop(proc: subprocess.Popen[str]) -> str:
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    return err


def test_dashboard_prints_its_url_as_one_json_line(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    assert run_mcptape("db", "upgrade", "--db", str(db)).returncode == 0
    proc, ready = _first_line(["dashboard", "--db", str(db), "--port", "0", "--format", "json"])
    try:
        assert set(ready) == {"url"} and "/?token=" in ready["url"]
        base, token = ready["url"].split("/?token=")
        req = urllib.request.Request(
            base + "/sessions.json", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=20) as page:  # it serves where it said
            assert json.loads(page.read())["sessions"] == []
    finally:
        err = _stop(proc)
    assert "Traceback" not in err


def test_mock_prints_where_it_listens_as_one_json_line() -> None:
    source = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
    proc, ready = _first_line(["mock", source, "--port", "0", "--format", "json"])
    try:
        assert ready["source"] == source and ready["mode"] == "none"
        assert ready["url"].startswith("http://127.0.0.1:") and ready["url"].endswith("/mcp")
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        req = urllib.request.Request(
            ready["url"],
            data=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        with urllib.request.urlopen(req, timeout=20) as answer:  # it serves what it said
            assert answer.status == 200
    finally:
        err = _stop(proc)
    assert "Traceback" not in err


def test_stdio_mock_refuses_format_json_in_one_line() -> None:
    source = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
    proc = run_mcptape("mock", source, "--format", "json")
    assert "--format json needs --port" in _json_error(proc, 2)["message"]
    assert proc.stdout == ""


def test_hosts_json_is_one_document(host_env: dict[str, str]) -> None:
    rows = _json(run_mcptape("hosts", "--format", "json", env=host_env))
    assert {r["host"]: r["state"] for r in rows}["cursor"] == "found"


def test_import_json(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    source = RECORDINGS / "basic-legacy.mcptape.jsonl"
    doc = _json(run_mcptape("import", str(source), "--db", str(db), "--json"))
    (session,) = doc["sessions"]
    assert doc["frames"] == session["frames"] == 34 and session["was"] and session["id"]
    assert [s["id"] for s in rdb.sessions(db)] == [session["id"]]
    missing = run_mcptape("import", str(tmp_path / "nope.jsonl"), "--db", str(db), "--json")
    assert _json_error(missing, missing.returncode)["message"] and missing.stdout == ""


def _record(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*mcptape_cmd(), "record", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_record_stdio_ends_with_a_json_summary_on_stderr(tmp_path: Path) -> None:
    """stdout is the server's channel: the summary is the last line of stderr, and in text mode
    a stdio relay still says nothing at its end."""
    db = tmp_path / "r.db"
    server = [sys.executable, "-m", "mcp_proxy.testing.rawecho"]
    line = '{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    proc = _record(["--db", str(db), "--format", "json", "--", *server])
    out, err = proc.communicate(line, timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out) == {"jsonrpc": "2.0", "id": 1, "result": {}}  # only the server's
    summary = json.loads(err.strip().splitlines()[-1])
    (session,) = rdb.sessions(db)
    assert summary == {
        "event": "stopped",
        "transport": "stdio",
        "recorded": True,
        "exchanges": None,
        "sessions": None,
        "session_id": session["id"],
        "exit_code": 0,
        "exit_signal": None,
        "problem": None,
    }
    plain = _record(["--db", str(db), "--", *server])
    _, err = plain.communicate(line, timeout=60)
    assert plain.returncode == 0 and "stopped" not in err


def test_record_upstream_ends_with_a_json_summary_on_stderr(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    args = ["--db", str(db), "--upstream", "http://127.0.0.1:9/mcp", "--port", "0"]
    proc = _record([*args, "--format", "json"])
    assert proc.stderr is not None
    ready = proc.stderr.readline()
    assert ready.startswith("mcptape: relaying"), ready
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    summary = json.loads(rest.strip().splitlines()[-1])
    assert summary["event"] == "stopped" and summary["transport"] == "http"
    assert (summary["exchanges"], summary["sessions"], summary["recorded"]) == (0, 0, True)


def test_format_json_asks_for_json_errors_for_its_own_command_only(tmp_path: Path) -> None:
    """``--format json`` sets MCPTAPE_ERROR_FORMAT for its command; a process that runs commands
    one after another (an embedding, the in-process tests) gets it back as it was — before, a
    later command's error came out as JSON."""
    from typer.testing import CliRunner

    from mcp_proxy.cli import _register_commands, app

    _register_commands()
    os.environ.pop("MCPTAPE_ERROR_FORMAT", None)
    missing = str(tmp_path / "none.db")
    first = CliRunner().invoke(app, ["db", "status", "--db", missing, "--format", "json"])
    assert first.exit_code == 4 and json.loads(first.stderr)["error"]["code"] == 4
    assert "MCPTAPE_ERROR_FORMAT" not in os.environ
    second = CliRunner().invoke(app, ["db", "status", "--db", missing])
    assert second.exit_code == 4 and second.stderr.startswith("mcptape: no database at")
