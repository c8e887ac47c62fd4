"""``mcptape replay DIR``: every recording of a directory, one command, one report, one exit code.

Why a directory and not a shell loop: a CI job wants one step that replays everything, keeps
going after the first difference (so one run shows them all), and publishes one JUnit report —
and recordings of different servers name their server in the ``mcptape.toml`` beside them
(``[replay."GLOB"]``, see :mod:`.config`) instead of a ``case`` statement in the workflow.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp_proxy.errors import UserError

#: What a directory replay picks up (the JSON Lines recordings ``mcptape export`` writes).
PATTERN = "*.mcptape.jsonl"


@dataclass(frozen=True)
class Target:
    """One session of one recording file, and the server it is replayed against."""

    source: str  # FILE or FILE#N (1-based, when the file holds several sessions)
    file: Path
    command: list[str] | None
    upstream: str | None


def targets(directory: Path, command: Sequence[str] | None, upstream: str | None) -> list[Target]:
    """Every session of every recording in ``directory``, with its server (config or CLI)."""
    from mcp_proxy.recording.registry import read_recording
    from mcp_proxy.replay.config import server_for

    files = sorted(directory.glob(PATTERN))
    if not files:
        raise UserError(f"{directory}: no recordings ({PATTERN}) to replay")
    out: list[Target] = []
    for file in files:
        cmd, url = server_for(file)
        if cmd is None and url is None:
            cmd, url = (list(command) if command else None), upstream
        if cmd is None and url is None:
            raise UserError(
                f"{file.name}: no server to replay against: give -- COMMAND… or --upstream URL,"
                f' or a [replay."GLOB"] table in {directory / "mcptape.toml"}'
            )
        count = len(read_recording(file).sessions)
        for n in range(1, count + 1):
            source = str(file) if count == 1 else f"{file}#{n}"
            out.append(Target(source, file, cmd, url))
    return out


def merge_junit(documents: Sequence[bytes], name: str = "mcptape replay") -> bytes:
    """One JUnit document holding the test suites of several (one per replayed recording)."""
    root = ET.Element("testsuites", {"name": name})
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for doc in documents:
        for suite in ET.fromstring(doc).iter("testsuite"):
            root.append(suite)
            for key in totals:
                totals[key] += int(suite.get(key, "0") or 0)
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


__all__ = ["PATTERN", "Target", "merge_junit", "targets"]
