"""A changed server: the test presets with one deliberate behaviour change, for replay tests.

``mcptape replay`` must report a difference when the server under test answers differently from
the recording. ``basic_changed`` is the ``basic`` preset whose ``echo`` tool now shouts (returns
its text upper-cased) — one result differs, everything else is identical, so a test can check
that exactly that exchange is reported.

It plugs in without touching :mod:`mcp_proxy.testing.presets` or the server entry point: this
module, run as a program, adds its presets to ``PRESETS`` in its own process and then hands
over to :func:`mcp_proxy.testing.server.main`, so every server option works unchanged::

    python -m mcp_proxy.testing.presets_changed --preset basic_changed,slow,failing
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mcp.server.mcpserver import MCPServer

from mcp_proxy.testing.presets import PRESETS, Preset, preset_basic


def preset_basic_changed(server: MCPServer) -> None:
    """``basic``, except that ``echo`` upper-cases its text."""
    preset_basic(server)
    server._tool_manager.remove_tool("echo")

    @server.tool(description="Return the text unchanged.")
    def echo(text: str) -> str:
        return text.upper()


CHANGED_PRESETS: dict[str, Preset] = {"basic_changed": preset_basic_changed}


def server_argv(presets: str, python: str | None = None) -> list[str]:
    """The command line of a changed stdio server (what a replay test runs)."""
    return [python or sys.executable, "-m", __name__, "--preset", presets, "--transport", "stdio"]


def main(argv: Sequence[str] | None = None) -> int:
    PRESETS.update(CHANGED_PRESETS)
    from mcp_proxy.testing import server

    return server.main(argv)


if __name__ == "__main__":
    sys.exit(main())
