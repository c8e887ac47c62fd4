"""Mock record modes for every transport mcptape records (issue 16): VCR.py's ``once``,
``none``, ``new_episodes`` and ``all``, forwarding to a real upstream of each kind.

Per transport — stdio (``-- COMMAND``), Streamable HTTP stateful, stateless and JSON-response,
and legacy HTTP+SSE (``--upstream …/sse``) — one real SDK test server is the upstream, the mock
is the real ``mcptape mock`` command (served over stdio for a stdio upstream, over HTTP — at
``/sse`` for a legacy one — otherwise), and an SDK client talks to it:

1. ``once`` with no file: everything is forwarded and the file written (a real recording,
   made by the mock's capture of real traffic);
2. ``none``: served from that file; a request never recorded gets the nearest-miss error
   (JSON-RPC -32050, ``data.nearest`` naming the recorded request and how it differs);
3. ``new_episodes``: what matches is served, the miss forwarded and appended as a new session;
4. ``all``: everything forwarded (even what matches), the file rewritten with the live traffic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.recording.registry import read_recording
from mcp_proxy.testing.client import SCRIPTED_PRESETS, make_client, tool_text
from mcp_proxy.testing.process import start_http_server
from tests.conftest import matrix, mcptape_cmd
from tests.travel.conftest import PY, child_env, server

pytestmark = pytest.mark.timeout(240)

#: transport → (server transport, server flags); None: stdio
TRANSPORTS: dict[str, tuple[str, dict[str, bool]] | None] = {
    "stdio": None,
    "http-stateful": ("http", {}),
    "http-stateless": ("http", {"stateless": True}),
    "http-json-response": ("http", {"json_response": True}),
    "legacy-sse": ("sse", {}),
}


@contextlib.contextmanager
def upstream_of(transport: str) -> Iterator[list[str]]:
    """The mock's forwarding arguments: ``-- COMMAND…`` or ``--upstream URL``."""
    spec = TRANSPORTS[transport]
    if spec is None:
        yield ["--", *server(",".join(SCRIPTED_PRESETS))]
        return
    kind, flags = spec
    with start_http_server(SCRIPTED_PRESETS, kind, name="mcptape-test", **flags) as (url, _):  # type: ignore[arg-type]
        yield ["--upstream", url]


class Mock:
    """``mcptape mock ARGS`` as the client under test reaches it (stdio or HTTP)."""

    def __init__(self, transport: str, args: list[str]) -> None:
        self.transport = transport
        self.args = args
        self.child: AnnouncedChild | None = None

    @contextlib.contextmanager
    def target(self) -> Iterator[Any]:
        if self.transport == "stdio":
            env = child_env()
            yield StdioServerParameters(
                command=PY, args=["-m", "mcp_proxy", "mock", *self.args], env=env
            )
            return
        argv = [*mcptape_cmd(), "mock", "--port", "0", *self.args]
        self.child = AnnouncedChild(
            argv,
            lambda line: line.rsplit(" at ", 1)[1].strip() if " at http://" in line else None,
            "mock",
        )
        try:
            url = self.child.start(60.0)
            yield url.rsplit("/", 1)[0] + "/sse" if self.transport == "legacy-sse" else url
        finally:
            self.child.stop()  # SIGINT by pid: the mock writes the file as it exits


async def echo(transport: str, args: list[str], *texts: str) -> list[Any]:
    """Call ``echo`` once per text through the mock; an error comes back as the MCPError."""
    out: list[Any] = []
    with Mock(transport, args).target() as target:
        async with make_client(target, mode="legacy") as client:
            for text in texts:
                try:
                    out.append(tool_text(await client.call_tool("echo", {"text": text})))
                except MCPError as exc:
                    out.append(exc)
    return out


def echoed(session: Any) -> list[str]:
    """The echo texts a recorded session's host asked for, in order."""
    import json

    found = []
    for f in session.frames:
        if f["direction"] != "c2s":
            continue
        try:
            msg = json.loads(f["raw"])
        except ValueError:
            continue
        params = msg.get("params") if isinstance(msg, dict) else None
        if isinstance(params, dict) and params.get("name") == "echo":
            found.append(params["arguments"]["text"])
    return found


# The default run: stdio and legacy SSE (a stateful Streamable HTTP mock runs in the default run
# in tests/replay/test_http_transports.py and tests/mock/test_record_modes.py); --full: every
# transport.
@pytest.mark.parametrize("transport", matrix(TRANSPORTS, keep={"stdio"}))
async def test_record_modes(transport: str, tmp_path: Path) -> None:
    file = tmp_path / f"{transport}.mcptape.jsonl"
    want = "stdio" if transport == "stdio" else "http"
    with upstream_of(transport) as forward:
        # once, no cassette yet: everything reaches the real server and is written down.
        got = await echo(transport, [str(file), "--record-mode", "once", *forward], "a", "b")
        assert got == ["a", "b"]
        (first,) = read_recording(file).sessions
        assert first.session["transport"] == want
        assert first.session["meta"]["recorded_by"] == "mcptape mock"
        assert echoed(first) == ["a", "b"]

        # new_episodes: "b" is served from the file, "c" is forwarded and appended.
        args = [str(file), "--record-mode", "new_episodes", *forward]
        assert await echo(transport, args, "b", "c") == ["b", "c"]
        kept, added = read_recording(file).sessions
        assert kept.id == first.id
        assert echoed(added) == ["c"]  # "b" never reached the server

        # all: even the recorded "a" goes to the server; the file holds only the live traffic.
        assert await echo(transport, [str(file), "--record-mode", "all", *forward], "a") == ["a"]
        (only,) = read_recording(file).sessions
        assert only.id not in (first.id, added.id) and echoed(only) == ["a"]

    # none: no server at all; what was recorded is served, the rest explained.
    answer, miss = await echo(transport, [str(file)], "a", "zzz")
    assert answer == "a"
    assert isinstance(miss, MCPError) and miss.code == -32050
    assert miss.message.startswith("mcptape mock: no recorded tools/call request matches")
    (nearest, *_) = miss.data["nearest"]
    assert {
        "path": "$.params.arguments.text",
        "kind": "changed",
        "a": "a",
        "b": "zzz",
    } in nearest["differences"]
