"""Start test servers as subprocesses and know when they are ready.

Stdlib only, so a harness (or a benchmark) can import it without paying for ``import mcp``.
HTTP servers announce readiness with one stderr line, ``MCPTAPE_TEST_SERVER_READY <url>``,
printed only after uvicorn has finished its startup (lifespan included); waiting for that line
is faster and less flaky than polling the port.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Literal

from mcp_proxy.osutil import stop_process

__all__ = [
    "READY_PREFIX",
    "SERVER_PYTHON_ENV",
    "ServerStartError",
    "server_argv",
    "start_http_server",
    "stop_process",
]

READY_PREFIX = "MCPTAPE_TEST_SERVER_READY"
"""The first word of the line an HTTP test server prints on stderr once it accepts connections."""

SERVER_PYTHON_ENV = "MCPTAPE_TEST_SERVER_PYTHON"
"""The interpreter ``server_argv`` runs test servers with when none is given (default: this
process's): a test suite may name a launcher that starts them faster (mcptape's own suite forks
them from a process that imported ``mcp`` once, ``tests/helpers/forkserver.py``)."""

Transport = Literal["stdio", "http", "sse"]


class ServerStartError(RuntimeError):
    """The test server exited or stayed silent instead of announcing readiness."""


def server_argv(
    presets: str | Iterable[str],
    transport: Transport = "stdio",
    *,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    stateless: bool = False,
    json_response: bool = False,
    startup_noise: str | None = None,
    log_level: str | None = None,
    state_key: str | None = None,
    python: str | None = None,
    extra_args: Iterable[str] = (),
) -> list[str]:
    """The command line that runs ``mcp_proxy.testing.server`` with these options.

    Proxy tests wrap exactly this command (``mcptape run -- <argv>``), so it lives here rather
    than being re-typed in every test.
    """
    spec = presets if isinstance(presets, str) else ",".join(presets)
    python = python or os.environ.get(SERVER_PYTHON_ENV) or sys.executable
    argv = [python, "-m", "mcp_proxy.testing.server", "--preset", spec]
    argv += ["--transport", transport]
    if transport != "stdio":
        argv += ["--host", host, "--port", str(port)]
    if stateless:
        argv.append("--stateless")
    if json_response:
        argv.append("--json-response")
    if name:
        argv += ["--name", name]
    if startup_noise is not None:
        argv += ["--startup-noise", startup_noise]
    if log_level:
        argv += ["--log-level", log_level]
    if state_key:
        argv += ["--state-key", state_key]
    argv += list(extra_args)
    return argv


@contextmanager
def start_http_server(
    presets: str | Iterable[str],
    transport: Literal["http", "sse"] = "http",
    *,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    stateless: bool = False,
    json_response: bool = False,
    log_level: str | None = None,
    state_key: str | None = None,
    extra_args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    stdout: int | IO[bytes] | None = subprocess.DEVNULL,
    on_stderr_line: Callable[[str], None] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run an HTTP (Streamable HTTP or legacy SSE) test server; yield ``(url, process)``.

    The URL ends in ``/mcp`` or ``/sse``. Stderr is drained by a thread for the server's whole
    life (a full pipe would stall it); lines after the ready line go to ``on_stderr_line``.
    On exit the process is stopped by its pid.

    Raises:
        ServerStartError: the server exited, or printed no ready line within ``timeout``.
    """
    argv = server_argv(
        presets,
        transport,
        name=name,
        host=host,
        port=port,
        stateless=stateless,
        json_response=json_response,
        log_level=log_level,
        state_key=state_key,
        extra_args=extra_args,
    )
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    ready = threading.Event()
    url: list[str] = []
    tail: collections.deque[str] = collections.deque(maxlen=50)

    def drain() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not ready.is_set() and line.startswith(READY_PREFIX + " "):
                url.append(line.split(" ", 1)[1].strip())
                ready.set()
                continue
            tail.append(line)
            if ready.is_set() and on_stderr_line is not None:
                on_stderr_line(line)

    reader = threading.Thread(target=drain, name=f"test-server-stderr-{proc.pid}", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                reader.join(1.0)
                if ready.is_set():
                    break
                why = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
                raise ServerStartError(
                    f"test server {why} before it was ready: {' '.join(argv)}\n" + "\n".join(tail)
                )
        yield url[0], proc
    finally:
        stop_process(proc)
        reader.join(5.0)
        if proc.stderr is not None:
            proc.stderr.close()
