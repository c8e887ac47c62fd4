"""Replay: re-send a recorded conversation to a live server, record it, diff it.

``mcptape replay SOURCE -- COMMAND…`` plays the host: it sends the recorded host→server frames
in their order, waits where the host waited (a frame recorded after some responses is sent only
after the live server has given those responses), answers the server's own requests (sampling,
elicitation, roots) with the answers the recording holds, and records everything through the
same relay ``mcptape record`` uses — so the replay is a normal session, linked to the original
in ``meta["replay_of"]``. Then it diffs the two conversations.

``mcptape replay SOURCE --upstream URL`` does the same against a Streamable HTTP server (or a
legacy HTTP+SSE one), through a ``mcptape record --upstream`` child.

What cannot be re-sent verbatim is rewritten, and only that:
- a response to a server request gets the live request's id (server ids are the server's);
- an MRTR retry's ``requestState`` is the live server's sealed state, not the recorded one
  (the SDK seals it with a per-process key; the recorded value would be rejected).
A field the recording redacted is sent as ``[REDACTED]`` and listed in ``ReplayResult.redacted``.

The package: :mod:`.plan` (what to send and wait for, pure), :mod:`.drive` (following the plan
over any transport), :mod:`.stdio` and :mod:`.http` (the transports).
"""

from __future__ import annotations

from mcp_proxy.normalize import canonical
from mcp_proxy.replay.drive import DEFAULT_TIMEOUT, ReplayResult
from mcp_proxy.replay.http import replay_http
from mcp_proxy.replay.plan import Action, plan
from mcp_proxy.replay.stdio import replay_stdio

__all__ = [
    "DEFAULT_TIMEOUT",
    "Action",
    "ReplayResult",
    "canonical",
    "plan",
    "replay_http",
    "replay_stdio",
]
