"""Bounded helpers: the means by which the limits of :mod:`mcp_proxy.limits` are kept.

A peer's bytes are never trusted to be small. Each helper here holds at most a stated number of
bytes or entries, whatever the peer sends, and says when it had to stop (so the caller can
record what fits and add a finding). Core: imports nothing of the project but ``limits``.
"""

from __future__ import annotations

# --- Bounded decoding of bodies (inflate) ---


# --- Bounded maps and pools (LRU, idle sweep) ---
