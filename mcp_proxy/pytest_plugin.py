"""pytest plugin (registered by the ``pytest11`` entry point ``mcptape``): recordings in tests.

Two uses, both driven by a recording file committed next to the tests:

- **Test a host (client) against a mock server.** Mark the test with
  ``@pytest.mark.mcptape_recording("recordings/x.mcptape.jsonl")`` and ask for the
  ``mcptape_mock`` fixture: it yields a :class:`MockHandle` whose ``command`` (stdio) or ``url``
  (``http=True``) is the mock serving that recording — point the client under test at it.
- **Test a server against a recorded conversation.** Mark the test with
  ``@pytest.mark.mcptape_replay("recordings/x.mcptape.jsonl", command=[...])`` (or
  ``upstream="http://…"``, or a ``mcptape_server`` fixture returning either): after the test body
  the recording is replayed against that server and the test fails with the diff if the server
  answers differently.

``--mcptape-record-mode`` (or the ``mcptape_record_mode`` ini value) is the VCR record mode:
``none`` (the default, and what CI should run), ``once``, ``new_episodes``, ``all``. Locally,
``--mcptape-record-mode=all`` refreshes recordings: the mock forwards to the real server given
in the marker and rewrites the file; a replay test saves the replayed conversation as the new
recording instead of failing.

The module imports nothing heavy at import time: pytest loads it in every run of any project
that has mcptape installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

RECORD_MODES = ("none", "once", "new_episodes", "all")
MOCK_START_TIMEOUT = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcptape", "MCP recordings (mcptape)")
    group.addoption(
        "--mcptape-record-mode",
        choices=RECORD_MODES,
        default=None,
        help="VCR record mode for mcptape mocks and replays: none (default), once,"
        " new_episodes, all (refresh recordings from the real server).",
    )
    parser.addini("mcptape_record_mode", "default --mcptape-record-mode", default="none")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mcptape_faults(*rules, faults_file=None): the fault rules the mcptape_faults fixture"
        " puts between the test's client and its server (docs/faults.md)",
    )
    config.addinivalue_line(
        "markers",
        "mcptape_recording(path, *, http=False, command=None, upstream=None, ignore=()):"
        " the recording the mcptape_mock fixture serves (command/upstream: the real server that"
        " recording modes forward to)",
    )
    config.addinivalue_line(
        "markers",
        "mcptape_replay(path, *, command=None, upstream=None, ignore=(), timeout=15):"
        " after the test, replay the recording against this server and fail on a difference",
    )


def record_mode(config: pytest.Config) -> str:
    """The effective record mode: the command line wins over the ini value."""
    value = config.getoption("--mcptape-record-mode") or config.getini("mcptape_record_mode")
    mode = str(value or "none")
    if mode not in RECORD_MODES:
        raise pytest.UsageError(f"mcptape_record_mode must be one of {', '.join(RECORD_MODES)}")
    return mode


def _resolve(path: str | os.PathLike[str], node: pytest.Item) -> Path:
    """A recording path as given: absolute, else beside the test file, else from the rootdir."""
    p = Path(path)
    if p.is_absolute():
        return p
    beside = Path(node.path).parent / p
    if beside.exists():
        return beside
    return Path(node.config.rootpath) / p


@dataclass
class MockHandle:
    """A running mock: hand ``command`` (stdio) or ``url`` (HTTP) to the client under test."""

    path: Path
    record_mode: str
    command: list[str] | None = None
    url: str | None = None
    stderr_lines: list[str] = field(default_factory=list)

    def stdio_params(self, **kwargs: Any) -> Any:
        """``mcp.StdioServerParameters`` for the SDK client (stdio mocks only)."""
        from mcp import StdioServerParameters

        if self.command is None:
            raise RuntimeError("this mock serves HTTP; use .url")
        env = dict(kwargs.pop("env", None) or {})
        if os.environ.get("PYTHONPATH"):
            env.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
        return StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=env or None, **kwargs
        )


def mock_argv(
    path: Path,
    *,
    mode: str = "none",
    port: int | None = None,
    command: list[str] | None = None,
    upstream: str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """The command line that runs ``mcptape mock`` with this interpreter."""
    argv = [sys.executable, "-m", "mcp_proxy", "mock", str(path), "--record-mode", mode]
    if port is not None:
        argv += ["--port", str(port)]
    for path_expr in ignore:
        argv += ["--ignore", path_expr]
    if upstream:
        argv += ["--upstream", upstream]
    if command:
        argv += ["--", *command]
    return argv


@pytest.fixture
def mcptape_mock(request: pytest.FixtureRequest) -> Iterator[MockHandle]:
    """A mock server from the ``mcptape_recording`` marker's file (stdio command or HTTP URL)."""
    marker = request.node.get_closest_marker("mcptape_recording")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            "the mcptape_mock fixture needs @pytest.mark.mcptape_recording('path/to/file')"
        )
    mode = record_mode(request.config)
    path = _resolve(marker.args[0], request.node)
    if mode == "none" and not path.exists():
        raise pytest.UsageError(
            f"recording {path} does not exist (record it with --mcptape-record-mode=once)"
        )
    kwargs = marker.kwargs
    forward = {"command": kwargs.get("command"), "upstream": kwargs.get("upstream")}
    if mode != "none" and not (forward["command"] or forward["upstream"]):
        mode = "none" if path.exists() else mode
    ignore = tuple(kwargs.get("ignore", ()))  # the mock reads mcptape.toml beside the file itself
    if not kwargs.get("http"):
        yield MockHandle(path, mode, command=mock_argv(path, mode=mode, ignore=ignore, **forward))
        return
    argv = mock_argv(path, mode=mode, port=0, ignore=ignore, **forward)
    from mcp_proxy.childproc import AnnouncedChild
    from mcp_proxy.errors import UserError

    child = AnnouncedChild(argv, _announced_url, "mcptape mock")
    handle = MockHandle(path, mode)
    handle.stderr_lines = child.lines
    try:
        handle.url = child.start(MOCK_START_TIMEOUT)
    except UserError as exc:
        why = "\n".join(child.lines[-5:]) or str(exc)
        pytest.fail(f"mcptape mock did not start: {why}", pytrace=False)
    try:
        yield handle
    finally:
        child.stop(grace=10.0)


def _announced_url(line: str) -> str | None:
    """The URL on ``mcptape mock: serving FILE at URL``."""
    return line.rsplit(" at ", 1)[1].strip() if " at http://" in line else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run the test body, then the replay its ``mcptape_replay`` marker asks for."""
    result = yield
    marker = item.get_closest_marker("mcptape_replay")
    if marker is not None:
        _replay_for(item, marker)
    return result


def _replay_for(item: pytest.Item, marker: pytest.Mark) -> None:
    from mcp_proxy.errors import McptapeError

    if not marker.args:
        raise pytest.UsageError("mcptape_replay needs the recording path as its first argument")
    path = _resolve(marker.args[0], item)
    mode = record_mode(item.config)
    command = marker.kwargs.get("command")
    upstream = marker.kwargs.get("upstream")
    server = getattr(item, "funcargs", {}).get("mcptape_server")
    if not command and not upstream and server is not None:
        if isinstance(server, str):
            upstream = server
        else:
            command = list(server)
    if not command and not upstream:
        raise pytest.UsageError(
            "mcptape_replay needs command=[...], upstream='http://…' or a mcptape_server fixture"
        )
    if not path.exists():
        pytest.fail(f"recording {path} does not exist; a replay needs recorded traffic", False)
    try:
        result = _run_replay(path, command, upstream, dict(marker.kwargs))
    except McptapeError as exc:
        pytest.fail(f"mcptape replay of {path.name} could not run: {exc}", pytrace=False)
    if mode in ("all", "new_episodes") and result.replayed is not None:
        from mcp_proxy.recording.jsonl import dumps_jsonl
        from mcp_proxy.recording.model import Recording, write_file

        write_file(path, [dumps_jsonl(Recording([result.replayed], origin=str(path)))])
        return
    if not result.equal:
        from mcp_proxy.diff import render_text

        text = render_text(result.diff) if result.diff else ""
        problems = "".join(f"\nproblem: {n}" for n in result.notes)
        pytest.fail(f"the server answered differently from {path.name}:\n{text}{problems}", False)


def _run_replay(
    path: Path, command: list[str] | None, upstream: str | None, kwargs: dict[str, Any]
) -> Any:
    from mcp_proxy.diff import diff_sessions
    from mcp_proxy.recording.registry import read_recording

    recording = read_recording(path)
    session = recording.one(kwargs.get("session"))
    timeout = float(kwargs.get("timeout", 15.0))
    with tempfile.TemporaryDirectory(prefix="mcptape-replay-") as tmp:
        db_url = "sqlite:///" + str(Path(tmp) / "replay.db")
        if upstream:
            from mcp_proxy.replay import replay_http

            result = replay_http(session, upstream, db_url, timeout=timeout, origin=str(path))
        else:
            from mcp_proxy.replay import replay_stdio

            result = replay_stdio(
                session, list(command or []), db_url, timeout=timeout, origin=str(path)
            )
    from mcp_proxy.replay.config import ignores_for

    ignore = [*kwargs.get("ignore", ()), *ignores_for(path)]
    if ignore and result.replayed is not None:
        result.diff = diff_sessions(session, result.replayed, ignores=ignore)
    return result


# ---------------------------------------------------------------------------------------------
# Faults: run the server under test behind `mcptape record --fault …`


@dataclass
class FaultRun:
    """Launch a stdio server through ``mcptape record`` with fault rules, recording to ``db``.

    ``rules`` come from the ``mcptape_faults`` marker; each call may add more. The recording
    (the frames both peers really sent, the injected bytes, the ``inject.*`` findings) is in
    ``db`` for ``mcptape check --db …`` or ``show``.
    """

    db: Path
    rules: list[str] = field(default_factory=list)
    faults_file: Path | None = None

    def command(self, server: list[str], *rules: str, name: str = "faults") -> list[str]:
        """The command line a host launches instead of ``server``."""
        argv = [sys.executable, "-m", "mcp_proxy", "record", "--db", str(self.db), "--name", name]
        for rule in [*self.rules, *rules]:
            argv += ["--fault", rule]
        if self.faults_file is not None:
            argv += ["--faults", str(self.faults_file)]
        return [*argv, "--", *server]

    def stdio_params(self, params: Any, *rules: str, name: str = "faults") -> Any:
        """A copy of ``mcp.StdioServerParameters`` that launches the server under the faults."""
        argv = self.command([params.command, *params.args], *rules, name=name)
        return params.model_copy(update={"command": argv[0], "args": argv[1:]})


@pytest.fixture
def mcptape_faults(request: pytest.FixtureRequest, tmp_path: Path) -> FaultRun:
    """Run the server under test behind fault rules (``@pytest.mark.mcptape_faults(...)``)."""
    marker = request.node.get_closest_marker("mcptape_faults")
    rules = [str(r) for r in marker.args] if marker else []
    faults_file = marker.kwargs.get("faults_file") if marker else None
    if faults_file is not None:
        faults_file = _resolve(faults_file, request.node)
    if rules or faults_file is not None:
        from mcp_proxy.faults.load import load_engine

        load_engine(rules, faults_file, transport="stdio")  # a bad rule fails here, in one line
    return FaultRun(tmp_path / "mcptape-faults.sqlite", rules, faults_file)
