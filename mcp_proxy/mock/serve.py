"""``mcptape mock``: load the recording, serve it over stdio or HTTP, write new episodes back.

Record modes as VCR has them: ``none`` (serve only; the CI default), ``once`` (record
everything when the file does not exist yet, else serve only), ``new_episodes`` (serve what
matches, forward misses to the real server and add them to the file), ``all`` (forward
everything and rewrite the file). Forwarding goes to ``-- COMMAND`` or ``--upstream URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.framing import LineFramer
from mcp_proxy.mock.faults import REORDER_WAIT, MockFaults
from mcp_proxy.mock.http import encode, serve_http
from mcp_proxy.mock.index import MockIndex
from mcp_proxy.mock.session import MockSession
from mcp_proxy.mock.upstream import Upstream, make_upstream
from mcp_proxy.netutil import port_problem
from mcp_proxy.normalize import safe_loads
from mcp_proxy.osutil import write_all
from mcp_proxy.recording.model import Recording, SessionRecording

RECORD_MODES = ("none", "once", "new_episodes", "all")


async def serve_stdio(
    session: MockSession,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    faults: MockFaults | None = None,
) -> None:
    """Serve one client over stdio until it closes its end (EOF), with fault rules if given."""
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    gate = faults.gate() if faults else None
    out_open = True
    frames_left: int | None = None  # end-stream: frames still to send before the output ends

    async def write(data: bytes) -> None:
        nonlocal frames_left
        if frames_left is not None:
            if frames_left <= 0:
                close_output()
            frames_left -= 1
        if out_open:
            async with lock:
                await loop.run_in_executor(None, _write_quietly, stdout_fd, data)

    def close_output() -> None:
        # The server went away: the client reads EOF, as from a server that closed stdout.
        nonlocal out_open
        if out_open:
            out_open = False
            with contextlib.suppress(OSError):
                os.close(stdout_fd)

    async def flush_later() -> None:
        await asyncio.sleep(REORDER_WAIT)
        if gate is not None:
            for payload in gate.flush():
                await write(payload + b"\n")

    async def send(msg: dict[str, Any]) -> None:
        nonlocal frames_left
        data = encode(msg)
        if gate is None:
            await write(data + b"\n")
            return
        verdict = await gate.out(data)
        if verdict.disconnect == "end-stream":
            frames_left = verdict.after
        elif verdict.disconnect:
            close_output()
            return
        for payload in verdict.sends(data):
            await write(payload + b"\n")
        if gate.held:
            keep(asyncio.create_task(flush_later()))

    def keep(task: asyncio.Task[None]) -> None:
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    async def handle(line: bytes) -> None:
        nonlocal frames_left
        if faults is not None:
            verdict = await faults.inbound(line)
            if verdict is not None and verdict.disconnect == "end-stream" and not verdict.consumed:
                frames_left = verdict.after  # over stdio the one stream is the whole output
            elif verdict is not None and verdict.disconnect:
                close_output()
                return
            if verdict is not None and verdict.consumed:
                for payload in verdict.payloads or []:
                    await write(payload + b"\n")
                return
            if verdict is not None and verdict.payloads:  # an intercepted message, edited
                line = verdict.payloads[0]
        msg = safe_loads(line)  # not JSON, or too deep to parse: ignored, as the SDK does
        if msg is not None:
            await session.on_client_message(msg, send)

    framer = LineFramer()
    while chunk := await loop.run_in_executor(None, _read, stdin_fd):
        for line in framer.feed(chunk):
            keep(asyncio.create_task(handle(bytes(line))))
    if session.tasks:
        await asyncio.wait(session.tasks, timeout=session.ask_timeout + 5)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _write_quietly(fd: int, data: bytes) -> None:
    """The host went away: nothing to answer, and no traceback either."""
    write_all(fd, data, quiet_on_epipe=True)


@dataclass
class MockOptions:
    """What ``mcptape mock`` was asked for."""

    source: str
    port: int | None = None
    host: str = "127.0.0.1"
    mode: str = "none"
    command: list[str] | None = None
    upstream: str | None = None
    ignores: Sequence[str] = ()
    repeat_last: bool = True
    timeout: float = 30.0
    db: str | None = None
    #: Fault rules (``--fault``) and a rules file re-read when it changes (``--faults``).
    faults: Sequence[str] = ()
    faults_file: str | None = None
    seed: int | None = None
    #: Intercept (``--intercept``): the rules' engine and the desk held messages wait at.
    intercepts: Any = None
    holder: Any = None


def check_port(port: int | None) -> None:
    """A port is 0 (any) to 65535; anything else is a usage error, not a traceback."""
    problem = port_problem(port)
    if problem is not None:
        raise UserError(problem)


def _load_for_mock(opts: MockOptions) -> tuple[list[SessionRecording], Path | None]:
    """The sessions to serve, and the file to write new episodes to (recording modes)."""
    from mcp_proxy.recording.database import load_source, split_source
    from mcp_proxy.recording.registry import read_recording

    file_ref = split_source(opts.source)
    path = Path(file_ref[0]) if file_ref else None
    if opts.mode != "none" and path is None:
        raise UserError(f"record mode {opts.mode!r} needs a recording FILE to write, not a session")
    if opts.mode != "none" and not (opts.command or opts.upstream):
        raise UserError(
            f"record mode {opts.mode!r} forwards to a real server: give -- COMMAND… or --upstream URL"
        )
    if path is not None and opts.mode in ("once", "all") and not path.exists():
        return [], path
    if opts.mode == "all":
        return [], path
    if path is not None and file_ref is not None and file_ref[1] is None:
        return read_recording(path).sessions, path
    _, one = asyncio.run(load_source(opts.source, opts.db))
    return [one], path


def _say(message: str) -> None:
    print(f"mcptape mock: {message}", file=sys.stderr, flush=True)


def run_mock(opts: MockOptions, *, ready: Callable[[str], None] | None = None) -> int:
    """``mcptape mock``: serve until the client leaves (stdio) or a signal arrives (HTTP)."""
    if opts.mode not in RECORD_MODES:
        raise UserError(f"unknown record mode {opts.mode!r} (one of {', '.join(RECORD_MODES)})")
    check_port(opts.port)
    faults = MockFaults.build(
        opts.faults,
        opts.faults_file,
        http=opts.port is not None,
        seed=opts.seed,
        warn=_say,
        intercepts=opts.intercepts,
        holder=opts.holder,
    )
    sessions, path = _load_for_mock(opts)
    mode = opts.mode
    if mode == "once" and sessions:
        mode = "none"  # the cassette exists: serve it, never touch it
    forwarding = mode in ("once", "new_episodes", "all")
    upstreams: list[Upstream] = []
    probe = MockIndex(sessions, ignores=opts.ignores)
    if probe.redacted:
        shown = ", ".join(sorted(set(probe.redacted))[:10])
        _say(
            f"{len(probe.redacted)} recorded request field(s) were redacted and match any value: {shown}"
        )

    def new_session() -> MockSession:
        up = make_upstream(opts.command, opts.upstream, opts.timeout) if forwarding else None
        if up is not None:
            upstreams.append(up)
        index = MockIndex(sessions, ignores=opts.ignores, repeat_last=opts.repeat_last)
        return MockSession(index, mode=mode, upstream=up, ask_timeout=opts.timeout)

    async def main() -> list[MockSession]:
        try:
            if opts.port is None:
                s = new_session()
                await serve_stdio(s, faults=faults)
                return [s]
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop.set)
            return await serve_http(
                new_session, host=opts.host, port=opts.port, ready=ready, stop=stop, faults=faults
            )
        finally:
            for up in upstreams:
                with contextlib.suppress(Exception):
                    await up.close()

    served = asyncio.run(main())
    if forwarding and path is not None:
        _write_episodes(path, sessions if mode == "new_episodes" else [], upstreams)
    misses = sum(s.misses for s in served)
    if misses:
        _say(f"{misses} request(s) had no recorded answer")
    return 0


def _write_episodes(path: Path, keep: list[SessionRecording], upstreams: list[Upstream]) -> None:
    """Append (``new_episodes``) or write (``once``/``all``) what was forwarded."""
    from mcp_proxy.recording.jsonl import dumps_jsonl
    from mcp_proxy.recording.model import write_file

    new = [
        up.captured.session(f"{path.stem} (recorded by mock)")
        for up in upstreams
        if up.captured.frames
    ]
    if new:
        write_file(path, [dumps_jsonl(Recording([*keep, *new], origin=str(path)))])
        _say(f"wrote {len(new)} new session(s) to {path}")


__all__ = ["RECORD_MODES", "MockOptions", "check_port", "run_mock", "serve_stdio"]
