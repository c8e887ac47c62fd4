"""A fork server for the suite's Python test servers: ``import mcp`` once per worker, not per server.

Every SDK test server (``python -m mcp_proxy.testing.server …``, ``tests/relay/upstream_server.py``,
``tests/forward/tls_servers.py`` …) spends ~0.7 s of CPU importing ``mcp`` (pydantic building the
models of both protocol versions) before it serves a byte; the default run starts dozens. Here
one process per xdist worker (the *zygote*) imports them once, and a *launcher* — an executable
file that stands where the interpreter would (``server_argv(python=…)``, the environment variable
``MCPTAPE_TEST_SERVER_PYTHON``) — hands it its standard streams; the zygote forks a child that
runs the module or script on exactly those pipes. The relay under test reads and writes the
server's own pipes: the bytes are the server's, unchanged.

What the launcher stands in for is the server's process: it forwards the signals a relay sends
(SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to the child, and exits as the child did
(the same code, or killed by the same signal). Killed itself (SIGKILL), the zygote kills the
child. Anything it cannot serve (other interpreter options, no zygote) it runs with the real
interpreter (``os.execv``), so a test never depends on the zygote being there. The tests of
process start-up and exit (``mcptape record``'s own start, a server's exit status) start real
processes: the launcher is only for the servers of tests about something else.

The zygote leaves when its worker does: when the worker's pipe to it closes, or when the worker
itself exits (a pidfd), since a worker killed outright may leave that pipe open in its other
children. The zygote is single-threaded (a selector over its socket, its connections and a SIGCHLD
wake-up pipe), so forking it is safe.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import stat
import sys
from pathlib import Path

#: Preloaded by the zygote: what the test servers import.
PRELOAD = ("mcp_proxy.testing.server",)
#: The most one launch request may carry (argv, environment, cwd): bounded like everything else.
MAX_REQUEST = 1 << 20
#: Seconds a launcher gets to send its request once connected.
RECEIVE_TIMEOUT = 10.0
#: Signals a relay sends to its server, forwarded by the launcher to the forked child.
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")

LAUNCHER = """#!{python} -IS
# A test server's launcher (tests/helpers/forkserver.py): hand fds 0-2, argv, environment and
# cwd to the zygote at {sock!r}; forward signals; exit as the forked child exits.
import array, json, os, signal, socket, sys
REAL = {python!r}
args = sys.argv[1:]
served = (len(args) >= 2 and args[0] == "-m") or (bool(args) and args[0].endswith(".py"))
conn = None
if served:
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect({sock!r})
    except OSError:
        conn = None
if conn is None:
    os.execv(REAL, [REAL, *args])
body = json.dumps({{"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}}).encode() + b"\\n"
conn.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)  # the child holds the pipes now: their ends close when it exits
reader = conn.makefile("rb")
pid = int(reader.readline().split()[1])
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
for name in {forwarded!r}:
    signal.signal(getattr(signal, name), forward)
line = reader.readline()
status = int(line.split()[1]) if line else 0x7F00
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(os.waitstatus_to_exitcode(status) if line else 1)
"""


def write_launcher(path: Path, sock: Path) -> Path:
    """An executable launcher at ``path`` for the zygote listening on ``sock``."""
    path.write_text(
        LAUNCHER.format(python=sys.executable, sock=str(sock), forwarded=FORWARDED),
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    fds = array.array("i")
    data, ancdata, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    while data and not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        more = conn.recv(65536)
        if not more:
            break
        data += more
    if len(fds) != 3 or not data.endswith(b"\n"):
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(data), list(fds)


def _child(request: dict[str, object], fds: list[int]) -> int:
    """In the forked child: become the server (stdio, environment, cwd, argv) and run it."""
    import runpy

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, 4096)
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    cwd = str(request["cwd"])
    os.chdir(cwd)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = cwd
            sys.modules.pop(argv[1], None)  # preloaded: run afresh as __main__, as python -m does
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _flush()
    return code


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def serve(sock: Path) -> None:
    """The zygote: preload, then fork one child per launch request until stdin closes."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "chld")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")  # the worker's pipe: closes with it
    try:  # the worker itself: killed outright, its pipe may live on in its other children
        sel.register(os.pidfd_open(os.getppid()), selectors.EVENT_READ, "stdin")
    except OSError:
        pass  # no pidfd (an old kernel): the pipe alone tells
    children: dict[int, socket.socket] = {}
    by_conn: dict[socket.socket, int] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return
            if key.data == "accept":
                conn, _ = listener.accept()
                conn.settimeout(RECEIVE_TIMEOUT)  # a launcher stopped mid-request stalls no one
                try:
                    got = _receive(conn)
                except (OSError, ValueError):
                    got = None
                if got is None:
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    os._exit(_child(*got))
                for fd in got[1]:
                    os.close(fd)
                children[pid] = conn
                by_conn[conn] = pid
                sel.register(conn, selectors.EVENT_READ, "conn")
                try:
                    conn.sendall(f"pid {pid}\n".encode())
                except OSError:
                    pass  # the launcher is gone already: its end of file comes next
            elif key.data == "conn":
                conn = key.fileobj  # type: ignore[assignment]
                try:
                    gone = not conn.recv(1)
                except OSError:  # reset: a launcher killed before it read its pid
                    gone = True
                if gone:  # the launcher is gone (killed): so is its server
                    sel.unregister(conn)
                    pid = by_conn.pop(conn)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                os.read(wake_r, 4096)
                _reap(children, by_conn, sel)


def _reap(
    children: dict[int, socket.socket],
    by_conn: dict[socket.socket, int],
    sel: selectors.BaseSelector,
) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        if by_conn.pop(conn, None) is not None:
            sel.unregister(conn)
            try:
                conn.sendall(f"exit {status}\n".encode())
            except OSError:
                pass
        conn.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))


def server_python() -> str:
    """The interpreter a test starts a Python test server with: this worker's launcher (the
    session fixture in ``tests/conftest.py``), else this interpreter."""
    from mcp_proxy.testing.process import SERVER_PYTHON_ENV

    return os.environ.get(SERVER_PYTHON_ENV) or sys.executable
