"""Moved: recording files live in :mod:`mcp_proxy.recording` (model, formats, registry).

This module only forwards the old names so that a branch written against it keeps importing
while the move is merged; import from :mod:`mcp_proxy.recording` and its submodules instead.
It is to be deleted once nothing imports it (``grep -rn mcp_proxy.export``).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import mcp_proxy.recording as recording

    return getattr(recording, name)
