"""Host integration: real config files in temporary homes, real launches, byte-exact undo.

Every host and OS layout gets its own temporary home with a realistic config (tests/hosts/);
install rewrites it, the rewritten entry is launched by the official SDK client exactly as a
host would (argv, env and cwd from the file), the recording is checked in SQLite, and uninstall
must give the original bytes back. The bad-input cases check the one promise that matters most:
whatever goes wrong, the user's file is as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mcp_proxy.errors import UserError
from mcp_proxy.hosts import (
    HOSTS,
    ConfigChanged,
    ConfigError,
    ConfigNotFound,
    ConfigTarget,
    HostEnv,
    apply_plan,
    backup_paths,
    parse_jsonc,
    plan_install,
    plan_uninstall,
    resolve_targets,
)
from mcp_proxy.hosts.doctor import _ephemeral, check_targets, find_mcptape
from mcp_proxy.hosts.document import parse_config
from mcp_proxy.hosts.edits import apply_edits, prefix_args, unwrap_edits
from mcp_proxy.hosts.entries import Wrapped, other_wrapper
from mcp_proxy.hosts.jsonc import JsonSyntaxError, line_col
from tests.conftest import matrix

FIXTURES = Path(__file__).parent / "hosts"
MCPTAPE = str(Path(sys.executable).parent / "mcptape")
SERVER_ARGS = ["-m", "mcp_proxy.testing.server", "--preset", "basic", "--transport", "stdio"]

#: Where each host keeps its config, relative to the home directory (the documented table).
LOCATIONS: dict[tuple[str, str], str] = {
    ("claude-desktop", "macos"): "Library/Application Support/Claude/claude_desktop_config.json",
    ("claude-desktop", "windows"): "AppData/Roaming/Claude/claude_desktop_config.json",
    ("claude-desktop", "linux"): ".config/Claude/claude_desktop_config.json",
    ("claude-code", "macos"): ".claude.json",
    ("claude-code", "windows"): ".claude.json",
    ("claude-code", "linux"): ".claude.json",
    ("cursor", "macos"): ".cursor/mcp.json",
    ("cursor", "windows"): ".cursor/mcp.json",
    ("cursor", "linux"): ".cursor/mcp.json",
    ("vscode", "macos"): "Library/Application Support/Code/User/mcp.json",
    ("vscode", "windows"): "AppData/Roaming/Code/User/mcp.json",
    ("vscode", "linux"): ".config/Code/User/mcp.json",
    ("windsurf", "macos"): ".codeium/windsurf/mcp_config.json",
    ("windsurf", "windows"): ".codeium/windsurf/mcp_config.json",
    ("windsurf", "linux"): ".codeium/windsurf/mcp_config.json",
}
FIXTURE_FILE = {
    "claude-desktop": "claude-desktop.json",
    "claude-code": "claude-code.json",
    "cursor": "cursor.json",
    "vscode": "vscode.jsonc",
    "windsurf": "windsurf.json",
}
LAYOUTS = sorted(LOCATIONS)


def _each_host_and_os_once() -> set[tuple[str, str]]:
    """The default run's layouts: every host once, on the systems in turn (every system at
    least once); --full: every host on every system it has a layout for."""
    systems = sorted({os_name for _, os_name in LAYOUTS})
    kept = set()
    for i, host in enumerate(sorted({host for host, _ in LAYOUTS})):
        mine = [os_name for h, os_name in LAYOUTS if h == host]
        wanted = systems[i % len(systems)]
        kept.add((host, wanted if wanted in mine else mine[0]))
    return kept


def render(host_id: str, *, mark: str = "m", cwd: Path | None = None, crlf: bool = False) -> bytes:
    """A fixture with this machine's interpreter (and a marker, and a cwd) filled in."""
    text = (FIXTURES / FIXTURE_FILE[host_id]).read_text("utf-8")
    text = text.replace("@PYTHON@", json.dumps(sys.executable)[1:-1])
    text = text.replace("@MARK@", mark).replace("@CWD@", json.dumps(str(cwd or "/"))[1:-1])
    if crlf or host_id == "windsurf":  # one host keeps Windows line endings
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8")


def servers_of(host_id: str, raw: bytes) -> dict[str, Any]:
    """The server table, read by an independent parser where the format allows it."""
    text = raw.decode("utf-8")
    data = parse_jsonc(text).to_python() if HOSTS[host_id].jsonc else json.loads(text)
    return data[HOSTS[host_id].servers_key]


def leftovers(path: Path) -> list[str]:
    """Files mcptape may have left beside a config (temporary files, backups)."""
    return sorted(
        p.name
        for p in path.parent.iterdir()
        if p.name.startswith((path.name, f".{path.name}")) and p.name != path.name
    )


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated database, copied per test so launches skip the (slow) first migration."""
    from mcp_proxy.store.engine import ensure_schema

    path = tmp_path_factory.mktemp("db") / "template.db"
    ensure_schema("sqlite:///" + str(path))
    return path


@pytest.fixture
def tape_db(tmp_path: Path, template_db: Path) -> Path:
    path = tmp_path / "tape.db"
    shutil.copyfile(template_db, path)
    return path


def place(tmp_path: Path, host_id: str, os_name: str, raw: bytes) -> tuple[HostEnv, Path]:
    env = HostEnv(home=tmp_path / "home", os=os_name, environ={})  # type: ignore[arg-type]
    path = env.home / LOCATIONS[(host_id, os_name)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return env, path


# ------------------------------------------------------------------------------- locations


@pytest.mark.parametrize(("host_id", "os_name"), LAYOUTS)
def test_config_locations(tmp_path: Path, host_id: str, os_name: str) -> None:
    env = HostEnv(home=tmp_path, os=os_name, environ={})  # type: ignore[arg-type]
    assert HOSTS[host_id].config_path(env) == tmp_path / LOCATIONS[(host_id, os_name)]


def test_locations_follow_environment_variables(tmp_path: Path) -> None:
    xdg = HostEnv(tmp_path, "linux", {"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert HOSTS["claude-desktop"].config_path(xdg) == (
        tmp_path / "xdg/Claude/claude_desktop_config.json"
    )
    assert HOSTS["vscode"].config_path(xdg) == tmp_path / "xdg/Code/User/mcp.json"
    appdata = HostEnv(tmp_path, "windows", {"APPDATA": str(tmp_path / "roaming")})
    assert HOSTS["vscode"].config_path(appdata) == tmp_path / "roaming/Code/User/mcp.json"
    claude = HostEnv(tmp_path, "macos", {"CLAUDE_CONFIG_DIR": str(tmp_path / "cc")})
    assert HOSTS["claude-code"].config_path(claude) == tmp_path / "cc/.claude.json"
    # A relative XDG_CONFIG_HOME is invalid per the spec and ignored, as apps do.
    rel = HostEnv(tmp_path, "linux", {"XDG_CONFIG_HOME": "rel"})
    assert HOSTS["vscode"].config_path(rel) == tmp_path / ".config/Code/User/mcp.json"


def test_resolve_targets(tmp_path: Path) -> None:
    env, path = place(tmp_path, "cursor", "linux", render("cursor"))
    assert resolve_targets(None, env) == [ConfigTarget(path, HOSTS["cursor"])]
    assert resolve_targets("vscode", env)[0].path == env.home / LOCATIONS[("vscode", "linux")]
    assert resolve_targets(str(path), env) == [ConfigTarget(path, None)]
    with pytest.raises(UserError, match="unknown host 'notepad'"):
        resolve_targets("notepad", env)


# ------------------------------------------------------------------------------- end to end


HAVE_PROC = Path("/proc/self/environ").exists()


def processes_with(mark: str) -> list[tuple[list[str], str]]:
    """(argv, cwd) of every process whose environment carries ``MCPTAPE_TEST_MARK=mark``."""
    found = []
    needle = f"MCPTAPE_TEST_MARK={mark}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if needle not in env:
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            found.append((argv, os.readlink(f"/proc/{pid}/cwd")))
        except OSError:
            continue
    return found


async def launch_like_a_host(entry: dict[str, Any], mark: str) -> list[tuple[list[str], str]]:
    """Start the entry with the SDK client as hosts do (command, args, env, cwd from the file),
    call a tool, and return the processes that run with the entry's environment."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=entry.get("env"), cwd=entry.get("cwd")
    )
    async with Client(params) as client:
        result = await client.call_tool("echo", {"text": f"hello {mark}"})
        assert result.content[0].text == f"hello {mark}"  # type: ignore[union-attr]
        return processes_with(mark)


def recorded(db: Path, name: str, timeout: float = 10.0) -> dict[str, Any]:
    """The session recorded under ``name`` once its frames are in (the recorder drains on exit)."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(db) as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute(
                "SELECT s.*, (SELECT count(*) FROM frames f WHERE f.session_id = s.id) AS n"
                " FROM sessions s"
            ).fetchall()
        if (rows and rows[0]["n"] >= 4 and rows[0]["status"] != "live") or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(0.05)
    assert [r["name"] for r in rows] == [name]
    return dict(rows[0])


@pytest.mark.parametrize(("host_id", "os_name"), matrix(LAYOUTS, _each_host_and_os_once()))
async def test_install_launch_uninstall(
    tmp_path: Path, tape_db: Path, host_id: str, os_name: str
) -> None:
    mark = uuid.uuid4().hex
    workdir = tmp_path / "work"
    workdir.mkdir()
    original = render(host_id, mark=mark, cwd=workdir)
    env, path = place(tmp_path, host_id, os_name, original)
    (target,) = resolve_targets(None, env)
    assert target.path == path and target.host is HOSTS[host_id]

    plan = plan_install(target, mcptape=MCPTAPE, db=str(tape_db))
    statuses = {o.server: o.status for o in plan.outcomes}
    assert statuses["echo"] == "wrapped"
    assert {"remote", "invalid"} & set(statuses.values())  # each fixture has one to skip
    apply_plan(plan)
    written = path.read_bytes()
    assert written == plan.new_raw and written != original

    before, after = servers_of(host_id, original), servers_of(host_id, written)
    entry = after["echo"]
    assert entry["command"] == MCPTAPE
    assert entry["args"] == [
        *["record", "--name", "echo", "--db", str(tape_db), "--"],
        sys.executable,
        *SERVER_ARGS,
    ]
    # Every other field of the entry, and every other entry but the wrapped ones, is untouched.
    assert {k: v for k, v in entry.items() if k not in ("command", "args")} == {
        k: v for k, v in before["echo"].items() if k not in ("command", "args")
    }
    for name, value in before.items():
        if statuses.get(name) != "wrapped":
            assert after[name] == value
    if host_id == "claude-code":  # project-scoped servers are not touched
        assert json.loads(written)["projects"] == json.loads(original)["projects"]

    procs = await launch_like_a_host(entry, mark)
    expected_cwd = entry.get("cwd") or os.getcwd()
    if HAVE_PROC:  # Linux: look at the live processes themselves
        recorder = [p for p in procs if "record" in p[0]]
        server = [p for p in procs if p[0] == [sys.executable, *SERVER_ARGS]]
        assert len(recorder) == 1 and recorder[0][0][-len(entry["args"]) :] == entry["args"]
        assert len(server) == 1, procs  # the server got the entry's env through mcptape
        assert server[0][1] == recorder[0][1] == expected_cwd

    session = recorded(tape_db, "echo")
    assert json.loads(session["command"]) == [sys.executable, *SERVER_ARGS]
    assert session["cwd"] == expected_cwd

    undo = plan_uninstall(target)
    assert undo.from_backup
    apply_plan(undo)
    assert path.read_bytes() == original
    assert leftovers(path) == []


# ------------------------------------------------------------------------------- formatting


VARIANTS = {
    "inline": '{"mcpServers": {"a": {"command": "npx", "args": ["-y", "pkg"], "env": {"K": "v"}}}}',
    "compact": '{"mcpServers":{"a":{"command":"npx","args":["-y","pkg"]}}}',
    "multiline": '{\n  "mcpServers": {\n    "a": {\n      "command": "npx",\n      "args": [\n'
    '        "-y",\n        "pkg"\n      ]\n    }\n  }\n}\n',
    "crlf-tabs": '{\r\n\t"mcpServers": {\r\n\t\t"a": {\r\n\t\t\t"command": "npx",\r\n'
    '\t\t\t"args": [\r\n\t\t\t\t"-y"\r\n\t\t\t]\r\n\t\t}\r\n\t}\r\n}',
    "no-args": '{\n  "mcpServers": {\n    "a": {\n      "command": "npx"\n    }\n  }\n}\n',
    "no-args-inline": '{"mcpServers": {"a": {"command": "npx", "env": {}}}}',
    "no-args-last-trailing": '{\n  "mcpServers": {\n    "a": {\n      "command": "npx",\n    },\n'
    "  },\n}\n",
    "empty-args": '{"mcpServers": {"a": {"command": "npx", "args": []}}}',
    "empty-args-multiline": '{"mcpServers": {"a": {"command": "npx", "args": [\n  ]}}}',
    "args-first": '{"mcpServers": {"a": {"args": ["x y"], "command": "C:\\\\Program Files\\\\n.exe"}}}',
    "comments": '{\n  // servers\n  "mcpServers": {\n    "a": {\n      "command": "npx", // c\n'
    '      "args": [ // x\n        "-y", /* y */\n        "pkg",\n      ],\n    },\n  },\n}\n',
    "comment-before-first": '{"mcpServers": {"a": {"command": "npx", "args": [\n /* c */ "-y"]}}}',
    "spaced-inline": '{"mcpServers": {"a": {"command" : "npx" , "args" : [ "-y" , "pkg" ] }}}',
    "escapes": '{"mcpServers": {"a": {"command": "n\\u0070x", "args": ["\\"q\\"", "\\u00e9\\n"]}}}',
    "unicode": '{"mcpServers": {"ünï": {"command": "/opt/dé/bin", "args": ["☃"]}}}',
}


def is_strict_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_wrap_and_unwrap_keep_formatting(tmp_path: Path, variant: str) -> None:
    original = VARIANTS[variant]
    target = ConfigTarget(tmp_path / "mcp.json")
    target.path.write_bytes(original.encode())
    name = next(iter(parse_jsonc(original).to_python()["mcpServers"]))
    before = parse_jsonc(original).to_python()["mcpServers"][name]

    plan = plan_install(target, mcptape="/opt/mcp tape/mcptape", db="/data/t.db")
    apply_plan(plan)
    text = target.path.read_bytes().decode("utf-8")
    after = parse_jsonc(text).to_python()["mcpServers"][name]
    assert after["command"] == "/opt/mcp tape/mcptape"
    assert after["args"] == [
        *prefix_args(name, "/data/t.db"),
        before["command"],
        *before.get("args", []),
    ]
    if "\r\n" in original:
        assert "\n" not in text.replace("\r\n", "")  # no bare LF crept in
    if is_strict_json(original):
        json.loads(text)  # strict JSON stays strict JSON

    # Entry by entry (what uninstall does once others edited the file) is exact by itself …
    doc = parse_config(target, target.path.read_bytes())
    entry = doc.entries()[0]
    added = name in plan.args_added
    assert apply_edits(doc.text, unwrap_edits(doc.text, entry, args_added=added)) == original
    # … and the whole-file restore is the backup.
    undo = plan_uninstall(target)
    assert undo.from_backup
    apply_plan(undo)
    assert target.path.read_bytes() == original.encode()
    assert leftovers(target.path) == []


def test_unwrap_without_manifest_keeps_an_empty_args(tmp_path: Path) -> None:
    """Without the manifest nobody knows install added "args"; [] means the same to hosts."""
    target = ConfigTarget(tmp_path / "mcp.json")
    target.path.write_text('{"mcpServers": {"a": {"command": "npx"}}}')
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    for p in backup_paths(target.path):
        p.unlink()
    apply_plan(plan_uninstall(target))
    assert target.path.read_text() == '{"mcpServers": {"a": {"command": "npx", "args": []}}}'


def test_unwrap_by_hand_wrapped_with_trailing_comma(tmp_path: Path) -> None:
    target = ConfigTarget(tmp_path / "mcp.json")
    target.path.write_text(
        '{"servers": {"a": {"command": "mcptape", "args": ["record", "--", "x",]}}}'
    )
    apply_plan(plan_uninstall(target))
    assert target.path.read_text() == '{"servers": {"a": {"command": "x", "args": []}}}'


def test_bom_survives(tmp_path: Path) -> None:
    target = ConfigTarget(tmp_path / "mcp.json")
    original = b'\xef\xbb\xbf{"servers": {"a": {"command": "npx", "args": ["x"]}}}'
    target.path.write_bytes(original)
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    assert target.path.read_bytes().startswith(b'\xef\xbb\xbf{"servers"')
    apply_plan(plan_uninstall(target))
    assert target.path.read_bytes() == original


def test_parser_agrees_with_json() -> None:
    samples = [
        '{"a": [1, -2.5e3, 0, true, false, null, "x\\u00e9\\n\\"", {}, []], "b": {"c": "d"}}',
        "  [ ]  ",
        '"\\ud83d\\ude00"',
        '{"": 1, "a b": [[[]]]}',
    ]
    for s in samples:
        assert parse_jsonc(s, jsonc=False).to_python() == json.loads(s)
    node = parse_jsonc('{"k": [1, "two"]}')
    arr = node.get("k")
    assert arr is not None and '{"k": [1, "two"]}'[arr.start : arr.end] == '[1, "two"]'


@pytest.mark.parametrize(
    ("text", "message", "line", "col"),
    [
        ('{"a": 1,}', "a trailing comma", 1, 8),
        ('{\n  // c\n  "a": 1}', "a comment", 2, 3),
        ('{"a": [1 2]}', "expected ',' or ']'", 1, 10),
        ('{"a": "x', "an unterminated string", 1, 7),
        ("{'a': 1}", "expected a string key", 1, 2),
        ('{"a": 1} x', "unexpected text after", 1, 10),
        ('{"a": "\\q"}', "an invalid escape", 1, 7),
        ('{"a": 1 /* c', "a comment", 1, 9),
    ],
)
def test_syntax_errors_point_at_the_problem(text: str, message: str, line: int, col: int) -> None:
    with pytest.raises(JsonSyntaxError) as info:
        parse_jsonc(text, jsonc=False)
    assert info.value.message.startswith(message)
    assert line_col(text, info.value.pos) == (line, col)


# ------------------------------------------------------------------------------- bad input


@pytest.fixture
def desktop(tmp_path: Path) -> tuple[ConfigTarget, bytes]:
    """Claude Desktop on Linux with the fixture config."""
    raw = render("claude-desktop")
    env, _ = place(tmp_path, "claude-desktop", "linux", raw)
    return resolve_targets("claude-desktop", env)[0], raw


def assert_untouched(target: ConfigTarget, raw: bytes) -> None:
    assert target.path.read_bytes() == raw
    assert leftovers(target.path) == []


def test_missing_config(tmp_path: Path) -> None:
    env = HostEnv(tmp_path, "linux", {})
    (target,) = resolve_targets("claude-desktop", env)
    with pytest.raises(ConfigNotFound, match="no Claude Desktop config at") as info:
        plan_install(target, mcptape=MCPTAPE)
    assert info.value.exit_code == 4
    assert not target.path.parent.exists()  # nothing created on the way
    assert resolve_targets(None, env) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
        (b'{"mcpServers": {', "is not valid JSON: unexpected end of file at line 1, column 17"),
        (b"mcpServers = {}", "is not valid JSON: unexpected 'm' at line 1, column 1"),
        (b'{"mcpServers": {} // hi\n}', "has a comment at line 1, column 19, which is not JSON"),
        (b'{"mcpServers": {"a": {"command": "x",}}}', "has a trailing comma"),
        (b'["mcpServers"]', "is not a JSON object at the top level"),
        (b'{"mcpServers": []}', '"mcpServers" is not a JSON object'),
        (b'{"mcpServers": {"a": {"command": "x"}, "a": {}}}', "names the server 'a' twice"),
        (b'{"mcpServers": {"\xff": {}}}', "is not UTF-8 text"),
    ],
)
def test_bad_config_is_refused_and_untouched(
    desktop: tuple[ConfigTarget, bytes], content: bytes, message: str
) -> None:
    target, _ = desktop
    target.path.write_bytes(content)
    for plan in (
        lambda: plan_install(target, mcptape=MCPTAPE),
        lambda: plan_uninstall(target),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            plan()
    assert_untouched(target, content)


def test_jsonc_is_fine_where_the_host_reads_it(tmp_path: Path) -> None:
    raw = b'{\n  // mine\n  "mcpServers": {"a": {"command": "x",},},\n}\n'
    env, path = place(tmp_path, "windsurf", "macos", raw)
    (target,) = resolve_targets("windsurf", env)
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    assert b"// mine" in path.read_bytes()
    apply_plan(plan_uninstall(target))
    assert path.read_bytes() == raw


def test_read_only_config(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    target.path.chmod(0o444)
    plan = plan_install(target, mcptape=MCPTAPE)  # reading is fine; a --dry-run works
    assert plan.changed
    with pytest.raises(ConfigError, match="is read-only; nothing changed"):
        apply_plan(plan)
    assert_untouched(target, raw)
    assert target.path.stat().st_mode & 0o777 == 0o444


def test_config_changed_by_the_host_since_planning(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    plan = plan_install(target, mcptape=MCPTAPE)
    host_version = raw.replace(b"Ctrl+Space", b"Alt+Space")
    target.path.write_bytes(host_version)
    with pytest.raises(ConfigChanged, match="changed while mcptape was editing it"):
        apply_plan(plan)
    assert_untouched(target, host_version)


def test_config_changed_by_the_host_just_before_the_replace(
    desktop: tuple[ConfigTarget, bytes],
) -> None:
    target, raw = desktop
    host_version = raw.replace(b"Ctrl+Space", b"Alt+Space")
    plan = plan_install(target, mcptape=MCPTAPE)
    with pytest.raises(ConfigChanged):
        apply_plan(plan, before_replace=lambda: target.path.write_bytes(host_version))
    assert_untouched(target, host_version)


def test_config_changed_during_uninstall(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, _ = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    wrapped = target.path.read_bytes()
    host_version = wrapped.replace(b"Ctrl+Space", b"Alt+Space")
    with pytest.raises(ConfigChanged):
        apply_plan(
            plan_uninstall(target), before_replace=lambda: target.path.write_bytes(host_version)
        )
    assert target.path.read_bytes() == host_version
    assert all(p.exists() for p in backup_paths(target.path))  # still able to undo later


def test_failure_while_writing_leaves_nothing_behind(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop

    def disk_full() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(ConfigError, match=r"cannot write .*: No space left on device; nothing"):
        apply_plan(plan_install(target, mcptape=MCPTAPE), before_replace=disk_full)
    assert_untouched(target, raw)


def test_failed_install_keeps_an_earlier_backup(desktop: tuple[ConfigTarget, bytes]) -> None:
    """A later install that fails must not replace the backup of an earlier cycle."""
    target, raw = desktop
    backup, _ = backup_paths(target.path)
    backup.write_bytes(b"an old backup")
    with pytest.raises(ConfigChanged):
        apply_plan(
            plan_install(target, mcptape=MCPTAPE),
            before_replace=lambda: target.path.write_bytes(raw + b"\n"),
        )
    assert backup.read_bytes() == b"an old backup"


def test_entry_problems_are_skipped_with_a_reason(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    text = raw.decode().replace(
        '"no-command": {',
        '"bad-args": {"command": "x", "args": "-y pkg"},\n'
        '    "empty-command": {"command": ""},\n'
        '    "not-an-object": "npx foo",\n'
        '    "no-command": {',
    )
    target.path.write_text(text)
    plan = plan_install(target, mcptape=MCPTAPE)
    reasons = {o.server: (o.status, o.message) for o in plan.outcomes}
    assert reasons["no-command"] == ("invalid", "not wrapped: the entry has no command")
    assert reasons["bad-args"] == ("invalid", "not wrapped: its args are not a list of strings")
    assert reasons["empty-command"][0] == reasons["not-an-object"][0] == "invalid"
    assert reasons["echo"][0] == reasons["filesystem"][0] == "wrapped"
    apply_plan(plan)
    after = json.loads(target.path.read_text())["mcpServers"]
    before = json.loads(text)["mcpServers"]
    for name in ("no-command", "bad-args", "empty-command", "not-an-object"):
        assert after[name] == before[name]


def test_never_wraps_twice(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    once = target.path.read_bytes()
    again = plan_install(target, mcptape=MCPTAPE)
    assert not again.changed
    assert {o.server: o.status for o in again.outcomes}["echo"] == "already"
    assert apply_plan(again).written is False
    assert target.path.read_bytes() == once
    apply_plan(plan_uninstall(target))
    assert target.path.read_bytes() == raw


def test_stale_mcptape_path_is_updated_not_rewrapped(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    apply_plan(plan_install(target, mcptape="/old/venv/bin/mcptape"))
    plan = plan_install(target, mcptape=MCPTAPE)
    assert {o.server: o.status for o in plan.outcomes}["echo"] == "updated"
    apply_plan(plan)
    entry = json.loads(target.path.read_text())["mcpServers"]["echo"]
    assert entry["command"] == MCPTAPE and entry["args"].count("record") == 1
    undo = plan_uninstall(target)
    assert undo.from_backup  # only mcptape touched the file: the backup is exact
    apply_plan(undo)
    assert target.path.read_bytes() == raw


def test_hand_made_and_odd_mcptape_entries(tmp_path: Path) -> None:
    target = ConfigTarget(tmp_path / "mcp.json")
    target.path.write_text(
        '{"mcpServers": {\n'
        '  "by-hand": {"command": "mcptape", "args": ["record", "--", "npx", "-y", "pkg"]},\n'
        '  "http": {"command": "C:\\\\bin\\\\mcptape.EXE", "args": ["record", "--upstream", "u"]}\n'
        "}}"
    )
    checks = {(c.level, c.message.split(":")[0]) for c in check_targets([target], MCPTAPE)}
    assert ("info", "no --db") in checks  # a hand-made wrap records to an unpinned database
    plan = plan_install(target, mcptape=MCPTAPE)
    assert {o.server: o.status for o in plan.outcomes} == {"by-hand": "updated", "http": "already"}
    undo = plan_uninstall(target)
    assert {o.server: o.status for o in undo.outcomes} == {
        "by-hand": "unwrapped",
        "http": "invalid",
    }
    apply_plan(undo)
    assert json.loads(target.path.read_text())["mcpServers"]["by-hand"] == {
        "command": "npx",
        "args": ["-y", "pkg"],
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["mcp-recorder", "--", "node", "s.js"],
        ["/usr/local/bin/mcp-debugger.exe", "run", "node", "s.js"],
        ["npx", "-y", "@modelcontextprotocol/inspector@0.9", "node", "s.js"],
        ["uvx", "mcp-sniffer==1.0", "--", "python", "s.py"],
    ],
)
def test_other_wrappers_are_left_alone_unless_forced(tmp_path: Path, argv: list[str]) -> None:
    target = ConfigTarget(tmp_path / "mcp.json")
    raw = json.dumps({"mcpServers": {"w": {"command": argv[0], "args": argv[1:]}}}).encode()
    target.path.write_bytes(raw)
    plan = plan_install(target, mcptape=MCPTAPE)
    assert [o.status for o in plan.outcomes] == ["wrapper"]
    assert "another wrapper" in plan.outcomes[0].message and not plan.changed
    forced = plan_install(target, mcptape=MCPTAPE, force=True)
    assert [o.status for o in forced.outcomes] == ["wrapped"]


def test_names_that_look_like_options(tmp_path: Path) -> None:
    """A server named "-v" must not turn into an option of `mcptape record`."""
    assert prefix_args("-v", "/d.db") == ["record", "--name=-v", "--db", "/d.db", "--"]
    target = ConfigTarget(tmp_path / "mcp.json")
    target.path.write_text('{"mcpServers": {"-v": {"command": "npx", "args": ["x"]}}}')
    apply_plan(plan_install(target, mcptape=MCPTAPE, db="/d.db"))
    (entry,) = parse_config(target, target.path.read_bytes()).entries()
    assert entry.wrapped == Wrapped(MCPTAPE, "-v", "/d.db", ["npx", "x"], 5)


def test_launchers_are_not_wrappers() -> None:
    for argv in (["npx", "-y", "@modelcontextprotocol/server-memory"], ["uvx", "mcp-server-git"]):
        assert other_wrapper(argv) is None


def test_symlinked_config_stays_a_symlink(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude.json"
    dotfiles.parent.mkdir()
    raw = render("claude-code")
    dotfiles.write_bytes(raw)
    env = HostEnv(tmp_path / "home", "linux", {})
    env.home.mkdir()
    (env.home / ".claude.json").symlink_to(dotfiles)
    (target,) = resolve_targets("claude-code", env)
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    assert target.path.is_symlink() and dotfiles.read_bytes() != raw
    assert sorted(p.name for p in dotfiles.parent.iterdir()) == ["claude.json"]  # repo stays clean
    apply_plan(plan_uninstall(target))
    assert target.path.is_symlink() and dotfiles.read_bytes() == raw


def test_mode_is_kept(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, _ = desktop
    target.path.chmod(0o640)
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    assert target.path.stat().st_mode & 0o777 == 0o640
    backup, manifest = backup_paths(target.path)
    assert backup.stat().st_mode & 0o777 == manifest.stat().st_mode & 0o777 == 0o600


# ------------------------------------------------------------------------------- uninstall


def test_uninstall_entry_by_entry_keeps_later_edits(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    # The user edits another entry and the host adds a setting after install.
    edited = target.path.read_text().replace("/Users/ada/Desktop", "/Users/ada/Documents")
    edited = edited.replace('"globalShortcut"', '"theme": "dark",\n  "globalShortcut"')
    target.path.write_text(edited)
    undo = plan_uninstall(target)
    assert not undo.from_backup
    done = apply_plan(undo)
    expected = raw.decode().replace("/Users/ada/Desktop", "/Users/ada/Documents")
    expected = expected.replace('"globalShortcut"', '"theme": "dark",\n  "globalShortcut"')
    assert target.path.read_text() == expected
    backup, manifest = backup_paths(target.path)
    assert done.backup_kept and done.backup == backup and backup.read_bytes() == raw
    assert not manifest.exists()


def test_uninstall_keeps_edits_to_the_wrapped_entry(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, _ = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    data = json.loads(target.path.read_text())
    data["mcpServers"]["echo"]["env"]["EXTRA"] = "1"
    data["mcpServers"]["echo"]["args"].append("--verbose")
    target.path.write_text(json.dumps(data, indent=4))  # the host re-wrote it in its own style
    apply_plan(plan_uninstall(target))
    echo = json.loads(target.path.read_text())["mcpServers"]["echo"]
    assert echo["command"] == sys.executable
    assert echo["args"] == [*SERVER_ARGS, "--verbose"]
    assert echo["env"]["EXTRA"] == "1"


def test_partial_uninstall_then_the_rest(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE))
    first = plan_uninstall(target, servers=["echo", "nope"])
    assert {o.server: o.status for o in first.outcomes} == {"nope": "missing", "echo": "unwrapped"}
    assert not first.from_backup
    apply_plan(first)
    rest = json.loads(target.path.read_text())["mcpServers"]
    assert rest["echo"]["command"] == sys.executable and rest["filesystem"]["command"] == MCPTAPE
    last = plan_uninstall(target)
    assert last.from_backup
    apply_plan(last)
    assert_untouched(target, raw)


def test_second_install_after_user_edit_falls_back_to_entries(
    desktop: tuple[ConfigTarget, bytes],
) -> None:
    target, raw = desktop
    apply_plan(plan_install(target, mcptape=MCPTAPE, servers=["echo"]))
    target.path.write_text(target.path.read_text().replace("Ctrl+Space", "F1"))
    apply_plan(plan_install(target, mcptape=MCPTAPE, servers=["filesystem"]))
    undo = plan_uninstall(target)
    assert not undo.from_backup  # the backup would undo the user's F1
    apply_plan(undo)
    assert target.path.read_bytes() == raw.replace(b"Ctrl+Space", b"F1")


def test_install_select_servers(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, _ = desktop
    plan = plan_install(target, mcptape=MCPTAPE, servers=["filesystem", "ghost"])
    assert {o.server: o.status for o in plan.outcomes} == {
        "ghost": "missing",
        "filesystem": "wrapped",
    }
    apply_plan(plan)
    servers = json.loads(target.path.read_text())["mcpServers"]
    assert servers["echo"]["command"] == sys.executable
    assert servers["filesystem"]["args"][:4] == ["record", "--name", "filesystem", "--"]


def test_dry_run_diff(desktop: tuple[ConfigTarget, bytes]) -> None:
    target, raw = desktop
    diff = plan_install(target, mcptape=MCPTAPE).diff()
    assert f'-      "command": "{sys.executable}",' in diff
    assert f'+      "command": "{MCPTAPE}",' in diff
    assert_untouched(target, raw)


# ------------------------------------------------------------------------------- mcptape path


def test_find_mcptape(tmp_path: Path) -> None:
    found = find_mcptape()
    assert os.path.isabs(found) and os.path.samefile(found, MCPTAPE)
    exe = tmp_path / "mcptape"
    exe.write_text("#!/bin/sh\n")
    assert find_mcptape(str(exe)) == str(exe)
    with pytest.raises(UserError, match="no such file"):
        find_mcptape(str(tmp_path / "nope"))
    assert _ephemeral(Path("/home/a/.cache/uv/archive-v0/x/bin/mcptape"))
    assert not _ephemeral(Path("/home/a/.local/bin/mcptape"))


# ------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run ``mcptape …`` in-process with HOME and the data dir inside ``tmp_path``."""
    from mcp_proxy.cli import _register_commands, app

    _register_commands()
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("MCPTAPE_DB", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(app, list(args))
        assert "Traceback" not in result.output + result.stderr
        return result

    run.home = home  # type: ignore[attr-defined]
    run.db = tmp_path / "data" / "mcptape" / "mcptape.db"  # type: ignore[attr-defined]
    return run


def test_cli_install_hosts_doctor_uninstall(cli: Any, tmp_path: Path) -> None:
    code_cfg = cli.home / ".claude.json"
    code_raw = render("claude-code")
    code_cfg.write_bytes(code_raw)
    vscode_cfg = cli.home / ".config/Code/User/mcp.json"
    vscode_cfg.parent.mkdir(parents=True)
    vscode_raw = render("vscode", cwd=tmp_path)
    vscode_cfg.write_bytes(vscode_raw)

    dry = cli("install", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert '+        "record",' in dry.output and "dry run: nothing was written" in dry.output
    assert code_cfg.read_bytes() == code_raw and leftovers(code_cfg) == []

    done = cli("install", "--host", "claude-code", "--all")
    assert done.exit_code == 0, done.output
    assert f"backup: {code_cfg}.mcptape-backup" in done.output
    assert "next: start a new `claude` session" in done.output
    assert f"recordings go to {cli.db}" in done.output
    echo = json.loads(code_cfg.read_text())["mcpServers"]["echo"]
    assert echo["args"][:6] == ["record", "--name", "echo", "--db", str(cli.db), "--"]
    assert vscode_cfg.read_bytes() == vscode_raw  # only the host asked for

    listing = cli("hosts", "--format", "json")
    rows = {r["host"]: r for r in json.loads(listing.output)}
    assert rows["claude-code"]["state"] == "found" and rows["cursor"]["state"] == "no config"
    states = {s["name"]: s["state"] for s in rows["claude-code"]["servers"]}
    assert states == {"echo": "wrapped", "sentry": "remote"}
    assert {s["name"]: s["state"] for s in rows["vscode"]["servers"]}["echo"] == "stdio"
    text = cli("hosts").output
    assert "Claude Code [claude-code]: " in text and "wrapped  echo" in text

    doctor = cli("doctor")
    assert doctor.exit_code == 0, doctor.output
    assert "not recorded: echo, project" in doctor.output
    assert f"ok       database {cli.db}: schema" in doctor.output  # install migrated it

    again = cli("install", "--host", "claude-code")
    assert "already  echo" in again.output and "nothing to change" in again.output

    undo = cli("uninstall", "--host", "claude-code")
    assert undo.exit_code == 0, undo.output
    assert "back to its exact bytes" in undo.output
    assert code_cfg.read_bytes() == code_raw and leftovers(code_cfg) == []


def test_cli_doctor_finds_problems_and_migrates(cli: Any, tmp_path: Path) -> None:
    tool = tmp_path / "my-server"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    cfg = cli.home / ".cursor" / "mcp.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"mcpServers": {"mine": {"command": str(tool)}}}, indent=2))
    stale_db = tmp_path / "old.db"
    assert cli("install", "--db", str(stale_db)).exit_code == 0
    with sqlite3.connect(stale_db) as conn:  # install created and migrated it …
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone()
    stale_db.unlink()  # … now replace it by a database mcptape never migrated
    sqlite3.connect(stale_db).execute("CREATE TABLE unrelated (x)").connection.close()

    tool.unlink()  # the wrapped server is gone
    data = json.loads(cfg.read_text())
    data["mcpServers"]["mine"]["command"] = "/gone/bin/mcptape"  # and mcptape moved
    cfg.write_text(json.dumps(data))
    sick = cli("doctor", "--db", str(stale_db))
    assert sick.exit_code == 1
    assert f"the wrapped command '{tool}' is not found" in sick.output
    assert "mcptape at /gone/bin/mcptape is gone" in sick.output
    assert "fix: mcptape install --host cursor" in sick.output
    assert "no mcptape schema yet" in sick.output and "fix: mcptape doctor --fix" in sick.output

    repaired = cli("install", "--host", "cursor")
    assert "updated  mine" in repaired.output
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    healed = cli("doctor", "--db", str(stale_db), "--fix")
    assert healed.exit_code == 0, healed.output
    assert "migrated: schema" in healed.output

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    bad = cli("doctor", "--db", str(garbage))
    assert bad.exit_code == 1 and "file is not a database" in bad.output


def test_cli_install_with_an_unusable_database_still_wraps(cli: Any) -> None:
    """mcptape record relays without a database, so install warns instead of refusing."""
    cfg = cli.home / ".cursor" / "mcp.json"
    cfg.parent.mkdir()
    cfg.write_text('{"mcpServers": {"a": {"command": "node", "args": ["s.js"]}}}')
    done = cli("install", "--db", "/proc/no/such/dir/t.db")
    assert done.exit_code == 0
    assert "warning: database /proc/no/such/dir/t.db" in done.stderr
    assert json.loads(cfg.read_text())["mcpServers"]["a"]["command"] == MCPTAPE


def test_cli_dry_run_notes_a_read_only_file(cli: Any) -> None:
    cfg = cli.home / ".cursor" / "mcp.json"
    cfg.parent.mkdir()
    cfg.write_text('{"mcpServers": {"a": {"command": "node"}}}')
    cfg.chmod(0o444)
    dry = cli("install", "--dry-run")
    assert dry.exit_code == 0 and "note: " in dry.output and "is read-only" in dry.output
    real = cli("install")
    assert real.exit_code == 2 and "is read-only; nothing changed" in real.stderr
    assert cfg.read_text() == '{"mcpServers": {"a": {"command": "node"}}}'


def test_cli_errors_are_one_line(cli: Any, tmp_path: Path) -> None:
    cases = [
        (("install", "--host", "notepad"), 2, "unknown host 'notepad'"),
        (("install", "--host", "claude-desktop"), 4, "no Claude Desktop config at"),
        (("install", "--server", "a", "--all"), 2, "either --server NAME or --all"),
        (("install",), 4, "no MCP host config found"),
        (("uninstall", "--host", str(tmp_path / "x.json")), 4, "no config file at"),
    ]
    for args, code, message in cases:
        result = cli(*args)
        assert result.exit_code == code, (args, result.output)
        assert message in result.stderr
    cfg = cli.home / ".cursor" / "mcp.json"
    cfg.parent.mkdir()
    cfg.write_text('{"mcpServers": {"a": {"command": "x"}}')
    broken = cli("install")
    assert broken.exit_code == 2
    assert broken.stderr.startswith("mcptape: Cursor: Cursor config ")
    assert "unexpected end of file at line 1" in broken.stderr
    assert cfg.read_text() == '{"mcpServers": {"a": {"command": "x"}}'
    missing = cli("install", "--server", "ghost")
    assert missing.exit_code == 4  # the broken Cursor config is reported too
    assert "no server named 'ghost'" in missing.stderr and "Cursor config" in missing.stderr


def test_cli_console_script_round_trip(tmp_path: Path) -> None:
    """The real ``mcptape`` executable, as a user runs it from a shell."""
    import subprocess

    cfg = tmp_path / "custom.json"
    raw = b'{\n  "servers": {\n    "a": {"command": "node", "args": ["s.js"]}\n  }\n}\n'
    cfg.write_bytes(raw)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "d")}
    env.pop("MCPTAPE_DB", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MCPTAPE, *args], env=env, capture_output=True, text=True, timeout=30, check=False
        )

    done = run("install", "--host", str(cfg))
    assert done.returncode == 0, done.stderr
    assert json.loads(cfg.read_text())["servers"]["a"]["command"] == MCPTAPE
    assert run("uninstall", "--host", str(cfg)).returncode == 0
    assert cfg.read_bytes() == raw
