"""``python -m mcp_proxy.mock``: the mock's own entry point, run as hosts run it.

It used to go through the CLI's console-script entry (``mcp_proxy.entry`` → typer), which broke
the rule that the mock room never imports the CLI (docs/architecture.md). Now it parses the
options of ``mcptape mock`` itself; these tests run the real module in a child process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.travel.conftest import PY, RECORDINGS, child_env, run_cli

pytestmark = pytest.mark.timeout(60)

BASIC = RECORDINGS / "basic-legacy.mcptape.jsonl"


def _mock(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "mcp_proxy.mock", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_module_entry_never_loads_the_cli() -> None:
    """The mock served from stdin to EOF without importing typer or a CLI module."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['mcp_proxy.mock', {str(BASIC)!r}]\n"
        "try:\n"
        "    runpy.run_module('mcp_proxy.mock', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "cli = sorted(m for m in sys.modules if m == 'typer' or m.startswith(\n"
        "    ('mcp_proxy.cli', 'mcp_proxy.commands', 'mcp_proxy.entry')))\n"
        "print(code, cli, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [PY, "-c", probe], input="", capture_output=True, text=True, timeout=30, check=False
    )
    assert done.stderr.strip().splitlines()[-1] == "0 []", done.stderr


async def test_the_module_entry_serves_a_recording() -> None:
    params = StdioServerParameters(command=PY, args=["-m", "mcp_proxy.mock", str(BASIC)])
    params.env = child_env()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
    assert tools.tools


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        ((str(BASIC), "--port", "70000"), 2, "--port 70000: not a TCP port"),
        ((str(BASIC), "--record-mode", "sometimes"), 2, "invalid choice: 'sometimes'"),
        ((str(BASIC), "--timeout", "0"), 2, "is not a number of seconds"),
        ((str(BASIC), "--upstream", "http://127.0.0.1:9/mcp", "--", PY), 2, "not both"),
        ((str(BASIC), "--ignore", "$[[["), 2, "$[[["),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args: tuple[str, ...], code: int, says: str) -> None:
    done = _mock(*args)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mcptape: "), done.stderr
    assert says in lines[0]


@pytest.mark.parametrize(
    "source",
    ["gone.mcptape.jsonl", "some-session"],
    ids=["missing recording file", "session without a database"],
)
def test_the_errors_match_the_cli(tmp_path: Path, source: str) -> None:
    """The same one line and exit code as ``mcptape mock``; a missing ``--db`` is not created."""
    db = tmp_path / "nope.db"
    target = str(tmp_path / source) if source.endswith(".jsonl") else source
    ours = _mock(target, "--db", str(db))
    theirs = run_cli("mock", target, "--db", str(db))
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)
    assert ours.returncode in (2, 4) and len(ours.stderr.strip().splitlines()) == 1
    assert not db.exists()
