"""Replay and mock for every HTTP flavour mcptape records (issue 16), each from a real recording.

For each flavour — Streamable HTTP stateful, stateless and JSON-response, each in both eras
(the SDK client's ``legacy`` handshake mode and ``auto``, which settles on 2026-07-28), and the
legacy HTTP+SSE transport — an SDK client runs the scripted session through the real relay
(``mcptape record --upstream URL --port 0``), the session is exported, and then, all through
the ``mcptape`` command line:

1. ``replay FILE --upstream URL`` against the same server: no differences, exit 0;
2. ``replay`` against the changed server (``echo`` shouts): exit 1, the echo result named;
3. ``mock FILE --port 0``: an SDK client gets the same answers as from the real server.

The two eras of a flavour share one server and one changed server (module scope): a server
serves both handshakes, and every process not started is time the suite does not spend.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.recording.database import load_source
from mcp_proxy.recording.jsonl import dumps_jsonl
from mcp_proxy.recording.model import Recording, write_file
from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
)
from mcp_proxy.testing.process import READY_PREFIX, server_argv
from tests.conftest import matrix, mcptape_cmd
from tests.helpers import db as rdb
from tests.travel.conftest import PY, run_cli

pytestmark = pytest.mark.timeout(240)

#: flavour → (server transport, server flags, SDK client mode)
FLAVOURS: dict[str, tuple[str, list[str], str]] = {
    "stateful-initialize": ("http", [], "legacy"),
    "stateful-2026": ("http", [], "auto"),
    "stateless-initialize": ("http", ["--stateless"], "legacy"),
    "stateless-2026": ("http", ["--stateless"], "auto"),
    "json-initialize": ("http", ["--json-response"], "legacy"),
    "json-2026": ("http", ["--json-response"], "auto"),
    "legacy-sse": ("sse", [], "legacy"),
}


def _ready(prefix: str) -> object:
    def find(line: str) -> str | None:
        return line[len(prefix) :].split()[0] if line.startswith(prefix) else None

    return find


@contextlib.contextmanager
def announced(argv: list[str], prefix: str, what: str) -> Iterator[str]:
    """Run ``argv`` until the block ends (stopped by pid); yield the word after ``prefix``."""
    child = AnnouncedChild(argv, _ready(prefix), what)  # type: ignore[arg-type]
    try:
        yield child.start(60.0)
    finally:
        child.stop()


def _server(transport: str, flags: list[str], changed: bool = False) -> list[str]:
    if changed:
        presets = "basic_changed,slow,failing"
        base = [PY, "-m", "mcp_proxy.testing.presets_changed", "--preset", presets]
        base += ["--transport", transport, "--port", "0", "--name", "mcptape-test"]
    else:
        base = server_argv(SCRIPTED_PRESETS, transport, name="mcptape-test")  # type: ignore[arg-type]
        base += ["--port", "0"]
    return [*base, *flags]


def _mock_url(url: str, transport: str) -> str:
    return url.rsplit("/", 1)[0] + "/sse" if transport == "sse" else url


class Servers:
    """Real test servers, started on first use and kept for the module."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, tuple[str, ...], bool], str] = {}
        self.children: list[AnnouncedChild] = []

    def url(self, transport: str, flags: list[str], changed: bool = False) -> str:
        key = (transport, tuple(flags), changed)
        if key not in self.running:
            argv = _server(transport, flags, changed)
            child = AnnouncedChild(argv, _ready(READY_PREFIX + " "), "server")  # type: ignore[arg-type]
            self.children.append(child)
            self.running[key] = child.start(60.0)
        return self.running[key]

    def stop(self) -> None:
        for child in self.children:
            child.stop()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    running = Servers()
    try:
        yield running
    finally:
        running.stop()


async def export(name: str, db: Path, file: Path) -> None:
    """What ``mcptape export NAME -o FILE`` writes (in-process: a process saved per flavour)."""
    recording, session = await load_source(name, str(db))
    write_file(file, [dumps_jsonl(Recording([session], origin=recording.origin))])


async def _scripted(url: str, mode: str) -> dict[str, object]:
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        return await run_scripted_session(client, rec)


# The default run: one Streamable HTTP flavour (replay and mock of legacy SSE run in the default
# run in tests/mock/test_modes_by_transport.py); --full: every flavour.
@pytest.mark.parametrize("flavour", matrix(FLAVOURS, keep={"stateful-2026"}))
async def test_replay_and_mock(flavour: str, tmp_path: Path, servers: Servers) -> None:
    transport, flags, mode = FLAVOURS[flavour]
    db = tmp_path / "rec.db"
    file = tmp_path / f"{flavour}.mcptape.jsonl"
    url = servers.url(transport, flags)
    relay = [*mcptape_cmd(), "record", "--upstream", url, "--port", "0", "--db", str(db)]
    with announced([*relay, "--name", flavour], "mcptape: relaying ", "relay") as local:
        direct = await _scripted(_mock_url(local, transport), mode)
    await export(flavour, db, file)
    same = run_cli("replay", str(file), "--db", str(db), "--upstream", url)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no differences" in same.stdout

    changed_url = servers.url(transport, flags, changed=True)
    changed = run_cli(
        "replay", str(file), "--db", str(db), "--upstream", changed_url, "--format", "json"
    )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    report = json.loads(changed.stdout)
    differing = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
    # The changed echo tool is a new function: its tools/list entry may differ too.
    assert {e["title"] for e in differing} <= {"→ tools/call echo", "→ tools/list"}, differing
    echo = next(e for e in differing if e["title"] == "→ tools/call echo")
    assert {
        "path": "$.result.content[0].text",
        "kind": "changed",
        "a": "hello, wire",
        "b": "HELLO, WIRE",
    } in echo["changes"]
    # Both replays are sessions of their own, recorded by the relay and linked to the original.
    sessions = rdb.sessions(db)
    original = next(s for s in sessions if s["name"] == flavour)
    linked = [s for s in sessions if "replay_of" in json.loads(s["meta"] or "{}")]
    assert len(linked) == 2, sessions
    assert all(json.loads(s["meta"])["replay_of"]["session_id"] == original["id"] for s in linked)
    assert all(s["transport"] == original["transport"] for s in linked)

    mock = [*mcptape_cmd(), "mock", str(file), "--port", "0"]
    child = AnnouncedChild(
        mock,
        lambda line: line.rsplit(" at ", 1)[1] if " at http://" in line else None,
        "mock",
    )
    try:
        mocked = await _scripted(_mock_url(child.start(60.0), transport), mode)
    finally:
        child.stop()
    assert mocked == direct
