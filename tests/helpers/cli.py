"""Read-only ``mcptape`` commands (show, sessions, stats, check, export …) run in-process through
the real entry point (``mcp_proxy.cli.main``): the same parsing, output and exit codes as the
console script, without a Python start-up (~0.3 s of CPU) per call. Process start-up stays
covered by the tests that start ``mcptape record`` and ``mcptape dashboard`` as processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import subprocess
import sys
from collections.abc import Callable, Mapping


def run_mcptape(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mcptape ARGS`` in this process: a ``CompletedProcess`` as ``subprocess.run(...,
    capture_output=True, text=True)`` gives it. ``env`` is added to the environment for the
    call (and taken back, with whatever the command set in it)."""
    from mcp_proxy.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", newline="", write_through=True)
    saved_env, saved_streams = dict(os.environ), (sys.stdout, sys.stderr)
    os.environ.update(env or {})
    sys.stdout, sys.stderr = stdout, stderr
    try:
        code = _in_a_plain_thread(lambda: _exit_code(main, list(args)))
    finally:
        stdout.flush()
        stderr.flush()
        sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(
        ["mcptape", *args], code, out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8")
    )


def _exit_code(main: Callable[[list[str]], None], argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def _in_a_plain_thread(call: Callable[[], int]) -> int:
    """``call()`` here, or in a thread of its own when an event loop runs here (an async test):
    a command may run its own loop (``asyncio.run``), which cannot nest."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()
