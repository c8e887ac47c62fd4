"""Every limit of ``mcp_proxy/limits.py`` is documented in docs/reliability.md ("Limits"), with
what happens at it: a new buffer that nobody sized, or sized without saying so, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _limits() -> list[tuple[str, bool]]:
    """``(name, has_reason)`` for each constant of limits.py, in order."""
    lines = (ROOT / "mcp_proxy" / "limits.py").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^([A-Z][A-Z0-9_]+)\s*(?::[^=]*)?=", line)
        if m:
            out.append((m.group(1), i > 0 and lines[i - 1].startswith("#:")))
    return out


def test_every_limit_has_a_reason_and_a_row_in_the_reliability_doc() -> None:
    limits = _limits()
    assert len(limits) > 40
    assert [name for name, reason in limits if not reason] == []
    doc = (ROOT / "docs" / "reliability.md").read_text()
    section = doc[doc.index("## Limits") :]
    assert [name for name, _ in limits if f"`{name}`" not in section] == []
