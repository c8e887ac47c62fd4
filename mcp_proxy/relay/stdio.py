"""The stdio relay: host ⇄ mcptape ⇄ server, byte for byte.

One thread per stream (host stdin → server stdin, server stdout → host stdout, server stderr →
our stderr), each doing a blocking ``read`` then an immediate ``write`` of exactly what it read —
no line buffering, no decoding, no waiting for the database. Only after the bytes went out does
the thread hand the chunk, as read, to the recorder (one ``put_chunk``); the recorder cuts it
into frames, off the relay's path.

With fault rules (``mcptape record --fault``, docs/faults.md) and only then, the frame-aware
pumps of :mod:`~mcp_proxy.relay.stdio_faults` replace the two JSON-RPC pumps: they cut lines,
ask the fault engine about each and break the wire as the rule says. Without rules nothing here
looks inside the bytes.

Lifecycle, as a host expects of the server it launched:
- the server gets our argv, environment and working directory unchanged;
- the server runs in its own process group; SIGINT/SIGTERM/SIGHUP sent to mcptape are forwarded
  to it exactly once (a host that kills our process group does not hit the server twice);
- on host EOF we close the server's stdin and let it finish — replies still in flight reach the
  host and the recording;
- when the server's stdout ends, the host's stdout ends too, at once (``mcptape record`` does not
  hold it open while the recorder drains);
- the server never outlives us: on Linux it gets SIGKILL when we die (``PR_SET_PDEATHSIG``), and
  the recorder process ends its whole process group if we vanish without closing;
- we exit with the server's status (128+N when it died of signal N), after the recorder has
  written everything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction
from mcp_proxy.limits import STDIO_READ as READ_SIZE
from mcp_proxy.osutil import write_all
from mcp_proxy.recorder.contract import Producer

if TYPE_CHECKING:  # imported when rules exist: the plain relay's start-up stays as it was
    from mcp_proxy.relay.stdio_faults import FaultDecider, FaultPumps, Holder

#: Signals forwarded to the server (SIGHUP does not exist on Windows).
FORWARDED_SIGNALS = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)


class CommandNotFound(UserError):
    exit_code = 127


class CommandNotExecutable(UserError):
    exit_code = 126


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the server when its relay dies (Linux).

    The server runs in its own process group, so a host that kills ours (or ``kill -9``s us)
    would otherwise leave a server that ignores SIGTERM and stdin EOF running for ever.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # we died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _which(exe: str) -> str | None:
    """``shutil.which`` without importing shutil (and its archive modules) on POSIX."""
    if sys.platform == "win32":
        import shutil

        return shutil.which(exe)
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or os.curdir, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


@dataclass
class StdioResult:
    exit_code: int
    exit_signal: int | None
    session_id: str | None
    host_gone: bool = False
    server_stdin_broken: bool = False


class StdioRelay:
    """Relays one server process over stdio and records it."""

    def __init__(
        self,
        argv: list[str],
        *,
        recorder: Producer | None,
        name: str | None = None,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
        on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
        release_stdout_at_eof: bool = False,
        session_meta: dict[str, Any] | None = None,
        faults: FaultDecider | None = None,
        intercepts: Holder | None = None,
    ) -> None:
        if not argv:
            raise UserError("no server command given (usage: mcptape record -- COMMAND [ARGS…])")
        self.argv = argv
        self.recorder = recorder
        self.name = name
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.on_start = on_start
        #: Point ``stdout_fd`` at /dev/null when the server's stdout ends, so the host sees EOF
        #: then (not when we exit, after the recorder drained). For ``mcptape record``'s fd 1.
        self.release_stdout_at_eof = release_stdout_at_eof
        self.session_meta = session_meta
        #: A fault engine (``mcp_proxy.faults.FaultEngine``): with one, the frame-aware pumps
        #: of :mod:`~mcp_proxy.relay.stdio_faults` replace the raw ones (docs/faults.md).
        self.faults = faults
        #: Intercept (docs/intercept.md): where a message an ``intercept`` rule of ``faults``
        #: matched is held until a person decides.
        self.intercepts = intercepts
        self._fault_pumps: FaultPumps | None = None
        self.session_id: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._forwarded_signal: int | None = None
        #: The host stopped reading (a write to its stdout failed): what the server says is
        #: still recorded, no longer forwarded. Read and set by the fault pumps too.
        self.host_gone = False
        #: The server's stdin refused a write (it closed it or exited).
        self.stdin_broken = False
        #: Held by the host→server pump from its write until the chunk is handed to the
        #: recorder: the session ends only after what was forwarded is recorded (that pump is
        #: never joined — it may block reading the host for ever).
        self.handover = threading.Lock()
        #: The host→server stream's end was handed to the recorder: by its pump at the host's
        #: EOF, or by :meth:`run` when the server ended first (the session's end must come after
        #: it; an end handed over after the recorder closed was reported as a lost record).
        self._host_stream_ended = False

    # ------------------------------------------------------------------ helpers
    def tee(
        self, direction: Direction, channel: Channel, data: bytes, mono: int, wall: float
    ) -> None:
        """Hand what crossed the wire to the recorder (the pumps call it after forwarding)."""
        if self.recorder is not None and self.session_id is not None:
            if direction is Direction.C2S and self._host_stream_ended:
                return  # written after the session ended, to a server that is gone
            self.recorder.put_chunk(self.session_id, direction, channel, data, mono, wall)

    def _eos(self, direction: Direction, channel: Channel) -> None:
        if self.recorder is not None and self.session_id is not None:
            self.recorder.end_stream(self.session_id, direction, channel)

    def _end_host_stream(self) -> None:
        """Hand over the end of the host→server stream, once: at the host's EOF, or when the
        session ends first (the host may keep its stdin open, or close it only after seeing the
        server's stdout end — by then the recorder may be closed). Waits (a little) for a chunk
        being forwarded to be handed over first."""
        held = self.handover.acquire(timeout=2)
        try:
            if not self._host_stream_ended:
                self._host_stream_ended = True
                self._eos(Direction.C2S, Channel.STDIO)
        finally:
            if held:
                self.handover.release()

    def _spawn(self) -> subprocess.Popen[bytes]:
        exe = self.argv[0]
        found = _which(exe) if os.sep not in exe else exe
        if found is None:
            raise CommandNotFound(f"command not found: {exe}")
        argv = list(self.argv)
        if sys.platform == "win32":
            # CreateProcess does not search PATHEXT: `npx` must become the `npx.cmd` found.
            argv[0] = found
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                process_group=0,
                preexec_fn=_die_with_parent(),
            )
        except FileNotFoundError as exc:
            raise CommandNotFound(f"command not found: {exe}") from exc
        except PermissionError as exc:
            raise CommandNotExecutable(f"command not executable: {exe}") from exc
        except OSError as exc:
            raise CommandNotExecutable(f"cannot start {exe}: {exc.strerror or exc}") from exc

    # ------------------------------------------------------------------ pumps
    def _pump_host_to_server(self, server_stdin: int) -> None:
        broken = False
        try:
            while True:
                try:
                    chunk = os.read(self.stdin_fd, READ_SIZE)
                    mono, wall = time.monotonic_ns(), time.time()  # when it was read
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                with self.handover:
                    if not broken:
                        try:
                            write_all(server_stdin, chunk)
                        except OSError:
                            # The server closed its stdin or died: keep recording the host.
                            broken = True
                            self.stdin_broken = True
                    self.tee(Direction.C2S, Channel.STDIO, chunk, mono, wall)
        finally:
            self._end_host_stream()
            with contextlib.suppress(OSError):
                os.close(server_stdin)

    def _pump_server_to_host(self, server_stdout: int) -> None:
        while True:
            try:
                chunk = os.read(server_stdout, READ_SIZE)
                mono, wall = time.monotonic_ns(), time.time()  # when it was read
            except OSError:
                chunk = b""
            if not chunk:
                break
            if not self.host_gone:
                try:
                    write_all(self.stdout_fd, chunk)
                except OSError:
                    # The host went away; keep draining the server so the recording is whole.
                    self.host_gone = True
            self.tee(Direction.S2C, Channel.STDIO, chunk, mono, wall)
        if self.release_stdout_at_eof:
            self.release_stdout()
        self._eos(Direction.S2C, Channel.STDIO)

    def _faulted_host_to_server(self, pumps: FaultPumps) -> None:
        try:
            pumps.pump(Direction.C2S, self.stdin_fd)
        finally:
            self._end_host_stream()
            pumps.close_server_stdin()

    def _faulted_server_to_host(self, pumps: FaultPumps, server_stdout: int) -> None:
        pumps.pump(Direction.S2C, server_stdout)
        if self.release_stdout_at_eof:
            self.release_stdout()
        self._eos(Direction.S2C, Channel.STDIO)

    def release_stdout(self) -> None:
        """The server's stdout ended: end the host's now (the fd number stays valid)."""
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        with contextlib.suppress(OSError):
            os.dup2(devnull, self.stdout_fd)
        os.close(devnull)

    def _pump_stderr(self, server_stderr: int) -> None:
        tee = True
        while True:
            try:
                chunk = os.read(server_stderr, READ_SIZE)
                mono, wall = time.monotonic_ns(), time.time()  # when it was read
            except OSError:
                chunk = b""
            if not chunk:
                break
            if tee:
                try:
                    write_all(self.stderr_fd, chunk)
                except OSError:
                    tee = False
            self.tee(Direction.S2C, Channel.STDERR, chunk, mono, wall)
        self._eos(Direction.S2C, Channel.STDERR)

    # ------------------------------------------------------------------ run
    def _forward_signal(self, signum: int, _frame: Any) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self._forwarded_signal = signum
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)

    def run(self, proc: subprocess.Popen[bytes] | None = None) -> StdioResult:
        proc = proc or self._spawn()
        self.proc = proc
        if self.on_start is not None:
            self.on_start(proc)
        if self.recorder is not None:
            extra: dict[str, Any] = {"meta": self.session_meta} if self.session_meta else {}
            self.session_id = self.recorder.new_session(
                transport="stdio", name=self.name, command=list(self.argv), cwd=os.getcwd(), **extra
            )
        old_handlers: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED_SIGNALS:
                old_handlers[sig] = signal.signal(sig, self._forward_signal)
        assert proc.stdin and proc.stdout and proc.stderr
        # Detach the fds from the Popen file objects: the pumps own them now.
        stdin_fd = os.dup(proc.stdin.fileno())
        proc.stdin.close()
        if self.faults is None:  # the raw pumps: bytes in, bytes out, nothing looked at
            t_in = threading.Thread(
                target=self._pump_host_to_server, args=(stdin_fd,), name="c2s", daemon=True
            )
            t_out = threading.Thread(
                target=self._pump_server_to_host,
                args=(proc.stdout.fileno(),),
                name="s2c",
                daemon=True,
            )
        else:
            from mcp_proxy.relay.stdio_faults import FaultPumps

            pumps = self._fault_pumps = FaultPumps(self, self.faults, stdin_fd, self.intercepts)
            t_in = threading.Thread(
                target=self._faulted_host_to_server, args=(pumps,), name="c2s", daemon=True
            )
            t_out = threading.Thread(
                target=self._faulted_server_to_host,
                args=(pumps, proc.stdout.fileno()),
                name="s2c",
                daemon=True,
            )
        t_err = threading.Thread(
            target=self._pump_stderr, args=(proc.stderr.fileno(),), name="stderr", daemon=True
        )
        for t in (t_in, t_out, t_err):
            t.start()
        try:
            status = proc.wait()
        finally:
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            if self.intercepts is not None:  # a message held for a gone server is let go
                self.intercepts.close()
        # The server is gone: take what its pipes still hold (a grandchild may keep them open;
        # do not wait on it forever).
        t_out.join(5)
        t_err.join(5)
        exit_code, exit_signal = (128 - status, -status) if status < 0 else (status, None)
        # What the host sent is handed over, and its stream ended, before the session ends.
        self._end_host_stream()
        if self.recorder is not None and self.session_id is not None:
            # A signal we forwarded, or one a fault rule sent, is no crash of the server's own.
            injected = self._fault_pumps is not None and self._fault_pumps.killed_with is not None
            crashed = exit_code != 0 and self._forwarded_signal is None and not injected
            self.recorder.end_session(
                self.session_id,
                status="crashed" if crashed else "ended",
                exit_code=status if status >= 0 else None,
                exit_signal=exit_signal,
            )
        return StdioResult(
            exit_code=exit_code,
            exit_signal=exit_signal,
            session_id=self.session_id,
            host_gone=self.host_gone,
            server_stdin_broken=self.stdin_broken,
        )


def record_stdio(
    argv: list[str],
    *,
    db_url: str,
    name: str | None = None,
    redact: bool | None = None,
    redact_headers: list[str] | tuple[str, ...] = (),
    redact_paths: list[str] | tuple[str, ...] = (),
    faults: FaultDecider | None = None,
    intercepts: Holder | None = None,
    output: str = "text",
) -> int:
    """``mcptape record -- COMMAND``: relay and record; returns the exit status to use.

    ``output``: ``json`` ends the run with a JSON summary as the last line on stderr
    (:mod:`mcp_proxy.relay.stop`; in text mode a stdio relay says nothing at its end).

    ``db_url`` is a database URL, or what ``--db`` takes (a path; empty for ``MCPTAPE_DB`` or
    the default location): the recorder process resolves it.

    ``faults`` (a :class:`mcp_proxy.faults.FaultEngine`, or None for none) makes the relay
    break the wire on purpose, as docs/faults.md describes; without it nothing changes.

    The recorder runs in a child process (:mod:`mcp_proxy.recorder.worker`) so that the relay
    threads never wait for the GIL while a batch is being written. Redaction is on unless
    ``redact`` is False or ``MCPTAPE_REDACT`` turns it off (``redact=None``): one policy for
    every transport, applied in the recorder process to the recorded copy only.
    """
    from mcp_proxy.recorder.client import RecorderClient

    env_value = os.environ.get("MCPTAPE_REDACT", "").strip()
    if redact is None:
        if env_value.lower() in ("", "1", "on", "true", "yes"):
            redact = True
        else:
            from mcp_proxy.redact import env_allows_redaction

            redact = env_allows_redaction()
    if redact and not redact_headers and not redact_paths:
        # The recorder process builds the policy (the relay compiles no redaction rules): the
        # default, or the user's own policy from MCPTAPE_REDACT, passed on as it is.
        policy = env_value if env_value.startswith("{") else "1"
    else:
        from mcp_proxy.redact import redactor_for_recording  # warns once when it is off

        policy = redactor_for_recording(redact, redact_headers, redact_paths).to_env()
    meta = None
    if not redact:
        meta = {"redaction": "off (--no-redact): credentials are recorded in clear"}
    recorder = RecorderClient(db_url, env={"MCPTAPE_REDACT": policy})
    relay = StdioRelay(
        argv,
        recorder=recorder,
        name=name,
        release_stdout_at_eof=True,
        session_meta=meta,
        faults=faults,
        intercepts=intercepts,
    )
    # Spawn (and fail on a missing command) before starting the recorder process.
    proc = relay._spawn()
    recorder.start()
    recorder.watch_process(proc.pid)  # the server is its own process group's leader
    try:
        result = relay.run(proc)
    finally:
        recorder.close()
    from mcp_proxy.relay.stop import StopSummary, print_stop

    death = getattr(recorder, "worker_death", None)
    summary = StopSummary(
        "stdio",
        death is None,
        session_id=result.session_id,
        exit_code=result.exit_code,
        exit_signal=result.exit_signal,
        problem=None if death is None else f"the recorder process died ({death})",
    )
    print_stop(summary, output, text=False)
    return result.exit_code
