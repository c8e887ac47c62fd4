"""Shared helpers for the travel tests (export/import, diff, replay, mock, plugin)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers.cli import run_mcptape
from tests.helpers.forkserver import server_python

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
GOLDEN = Path(__file__).resolve().parent / "golden"
PY = sys.executable


#: Commands that read a recording (a file or the database) and print or write a file,
#: ``import`` (a file into a database, in one transaction) and ``replay`` (it drives the relay
#: and the server as processes of its own, and waits for them): run in-process through the real
#: entry point (tests/helpers/cli.py), not a Python start-up each. ``mock`` serves until it is
#: stopped and runs as the console script.
IN_PROCESS = frozenset({"diff", "sessions", "show", "stats", "check", "export", "import", "replay"})


def run_cli(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``mcptape ARGS`` as a user would; never a shell (read-only commands: in-process)."""
    if args and args[0] in IN_PROCESS and not kw:
        return run_mcptape(*args)
    return subprocess.run(
        [*mcptape_cmd(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kw,  # type: ignore[arg-type]
    )


def server(presets: str, module: str = "mcp_proxy.testing.server") -> list[str]:
    argv = ["-m", module, "--preset", presets, "--transport", "stdio", "--name", "mcptape-test"]
    return [server_python(), *argv]


def child_env() -> dict[str, str] | None:
    """Environment for SDK-launched children (the SDK passes only a few variables on)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None


@pytest.fixture
def recordings() -> Path:
    return RECORDINGS
