"""The command line as other tools' users expect it: shell completion, an example in every
``--help``, no reStructuredText in help, and docs that say what the commands do (issue #29)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.cli import EXAMPLES, build_command, main
from tests.helpers.otlp import Receiver, otlp_receiver
from tests.travel.conftest import GOLDEN, run_cli

ROOT = Path(__file__).resolve().parent.parent


def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


COMMANDS = [path for path, _ in _walk(build_command())]


def test_the_tree_is_walked() -> None:
    assert ("show",) in COMMANDS and ("db", "copy") in COMMANDS and len(COMMANDS) > 20


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "mcptape")
def test_every_help_has_an_example_and_no_rst(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert "Example: mcptape" in out, out
    assert "``" not in out, out


@pytest.mark.parametrize("path", sorted(EXAMPLES), ids=lambda p: p or "mcptape")
def test_every_example_names_its_command_and_parses(path: str) -> None:
    words = shlex.split(EXAMPLES[path])
    depth = len(path.split())
    assert words[0] == "mcptape" and " ".join(words[1 : 1 + depth]) == path
    command = dict(_walk(build_command()))[tuple(path.split())]
    # A bad option, a bad value or a missing argument raises click's UsageError here.
    ctx = command.make_context(" ".join(words[: 1 + depth]), words[1 + depth :])
    assert ctx.command is command


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_generate_for_each_shell_without_the_shell(shell: str) -> None:
    """Click's ``_MCPTAPE_COMPLETE=source_SHELL`` protocol: the script is generated, not run."""
    env = {**os.environ, "_MCPTAPE_COMPLETE": f"source_{shell}"}
    out = run_cli(env=env)
    assert out.returncode == 0, out.stderr
    assert "_MCPTAPE_COMPLETE=complete_" + shell in out.stdout
    if shell != "fish":
        assert "_mcptape_completion" in out.stdout


def test_bash_completion_completes_command_names() -> None:
    env = {
        **os.environ,
        "_MCPTAPE_COMPLETE": "complete_bash",
        "COMP_WORDS": "mcptape sh",
        "COMP_CWORD": "1",
    }
    out = run_cli(env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["show"]


def test_top_level_help_offers_completion() -> None:
    out = run_cli("--help")
    assert "--install-completion" in out.stdout and "--show-completion" in out.stdout


@pytest.fixture
def otlp() -> Iterator[Receiver]:
    with otlp_receiver() as rec:
        yield rec


def test_export_to_an_http_url_sends_otlp_as_formats_says(tmp_path: Path, otlp: Receiver) -> None:
    """`mcptape formats` says `-o http://…/v1/traces` sends: without --format it must."""
    listed = run_cli("formats")
    assert "-o http://…/v1/traces sends" in listed.stdout
    db = str(tmp_path / "t.db")
    imported = run_cli("import", str(GOLDEN / "v2-http.jsonl"), "--db", db)
    assert imported.returncode == 0, imported.stderr
    sid = imported.stdout.split()[0]
    sent = run_cli("export", sid, "-o", otlp.url, "--db", db)
    assert sent.returncode == 0, sent.stderr
    assert "sent 3 span(s)" in sent.stderr  # the session, CLIENT and SERVER
    assert [path for path, _, _ in otlp.received] == ["/v1/traces"]
    named = run_cli("export", sid, "--format", "jsonl", "-o", otlp.url, "--db", db)
    assert named.returncode == 2 and "cannot be sent" in named.stderr


def test_the_exit_code_doc_names_only_commands_that_exist() -> None:
    """`hosts doctor` was named; the command is `mcptape doctor` (hosts has no sub-commands)."""
    doc = (ROOT / "docs" / "cli-exit-codes.md").read_text()
    groups = {p[0] for p in COMMANDS if len(p) == 2}
    leaves = {p[0] for p in COMMANDS if len(p) == 1} - groups
    for first, second in re.findall(r"`(?:mcptape )?([a-z]+) ([a-z]+)", doc):
        assert not (first in leaves and second in leaves), f"`{first} {second}` is no command"
    assert "Inspector" not in doc  # the claim about its exit codes nobody could confirm


def test_the_pytest_doc_says_async_tests_need_a_runner() -> None:
    doc = (ROOT / "docs" / "pytest.md").read_text()
    assert "async def" in doc
    assert 'asyncio_mode = "auto"' in doc and "pytest-asyncio" in doc


def test_import_progress_bar_has_the_files_size_as_its_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "reading" bar showed an unknown total for a file whose size is known."""
    import contextlib

    import mcp_proxy.commands.recording as recording_commands

    bars: dict[str, list[Any]] = {}

    @contextlib.contextmanager
    def bar(label: str, total: int | None, unit: str = "frames") -> Iterator[Any]:
        seen = bars[label] = [total, unit, 0]

        def advance(n: int) -> None:
            seen[2] += n

        yield advance

    build_command()  # registers the commands (imports their modules)
    monkeypatch.setattr(recording_commands, "progress_bar", bar)
    source = GOLDEN / "v2-http.jsonl"
    with pytest.raises(SystemExit) as exited:
        main(["import", str(source), "--db", str(tmp_path / "p.db")])
    assert exited.value.code == 0, capsys.readouterr().err
    size = source.stat().st_size
    assert bars["reading"] == [size, "bytes", size]
    har = tmp_path / "s.har"  # a format read whole (not streamed): its bytes count too
    sid = capsys.readouterr().out.split()[0]
    with pytest.raises(SystemExit) as exited:
        main(["export", sid, "-o", str(har), "--db", str(tmp_path / "p.db")])
    assert exited.value.code == 0
    with pytest.raises(SystemExit) as exited:
        main(["import", str(har), "--db", str(tmp_path / "q.db")])
    assert exited.value.code == 0, capsys.readouterr().err
    assert bars["reading"] == [har.stat().st_size, "bytes", har.stat().st_size]
