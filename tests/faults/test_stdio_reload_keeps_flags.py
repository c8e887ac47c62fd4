"""``--fault`` rules survive an edit of the ``--faults`` file (found by the mock's author).

The engine used to replace *all* its rules with the file's when the file changed, so a rule
given on the command line silently stopped firing at the first edit. Through the real
``mcptape record`` with both options: the command-line rule fires before and after the edit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_proxy.testing.client import stdio_params
from mcp_proxy.testing.faulty import LiveClient, outcome
from tests.faults.test_stdio_faults import through_mcptape

pytestmark = pytest.mark.timeout(120)


def test_command_line_rules_stay_when_the_rules_file_changes(tmp_path: Path) -> None:
    rules = tmp_path / "faults.toml"
    rules.write_text("")
    params = through_mcptape(
        stdio_params("basic"),
        tmp_path / "r.sqlite",
        "reload",
        "--fault",
        "tool-error text=from-the-flag method=tools/call",
        "--faults",
        str(rules),
    )
    with LiveClient(params) as client:

        def echo() -> tuple[object, ...]:
            return client.run(lambda c: outcome(c.call_tool("echo", {"text": "hi"})))

        assert echo() == ("result", True, "from-the-flag")
        # An edit that adds an unrelated rule (re-read within 0.25 s, at the next message).
        rules.write_text('[[fault]]\naction = "delay"\nms = 1\nmethod = "resources/list"\n')
        time.sleep(0.4)
        client.run(lambda c: c.send_ping())
        assert echo() == ("result", True, "from-the-flag")
