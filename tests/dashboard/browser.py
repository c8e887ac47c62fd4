"""Debian's Chromium driven by Playwright, and a real ``mcptape dashboard`` process to point it at.

Never ``playwright install``: the browser is the distribution's (``apt-get install chromium``,
which ``.ci/run`` does). If it is missing, a browser test is skipped locally with that
instruction as its one-line reason, and fails in CI (``CI`` set), as the PostgreSQL half does.
``MCPTAPE_CHROMIUM`` points the lookup at another binary.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import in_ci, mcptape_cmd

CHROMIUM_ENV = "MCPTAPE_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Where the browser is looked for (read at each call, so a test can move it)."""
    return os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM


def require_chromium() -> str:
    """The browser's path; skipped locally (failed in CI) with the install command if missing."""
    path = chromium_path()
    if not Path(path).exists():
        message = (
            f"Chromium not found at {path}: install it with "
            "`apt-get install chromium` (.ci/run does this)"
        )
        if in_ci():
            pytest.fail(message + " (CI requires the browser tests)", pytrace=False)
        pytest.skip(message)
    return path


def launch(playwright):  # type: ignore[no-untyped-def]
    return playwright.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS)


@contextmanager
def dashboard_process(db: Path | str) -> Iterator[str]:
    """Run ``mcptape dashboard --port 0`` on ``db`` (a file or a URL); yield the printed URL (with the token)."""
    proc = subprocess.Popen(
        [*mcptape_cmd(), "dashboard", "--db", str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("mcptape dashboard: http://127.0.0.1:"):
            proc.kill()
            raise AssertionError(f"dashboard did not start: {line!r} {proc.stderr.read()!r}")
        yield line.split(": ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
