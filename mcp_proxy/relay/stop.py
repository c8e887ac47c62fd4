"""``mcptape record``'s last line: what was relayed and what was recorded, as text or JSON.

Every transport ends the same way: one line on stderr (stdout is the MCP channel of a stdio
relay, so stderr is the one stream every transport can write its summary to). With
``record --format json`` the line is one JSON object a script can read from the last line of
stderr; the text and the object are built from the same :class:`StopSummary`, so they never
disagree.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class StopSummary:
    """How a recording ended. ``recorded``: every exchange relayed was handed to a recorder
    process that ended cleanly (losses the recorder counted are its own last line and a
    finding); ``problem``: why not, in words."""

    transport: str  # stdio | http | forward
    recorded: bool
    exchanges: int | None = None
    sessions: int | None = None
    session_id: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    problem: str | None = None

    def text(self) -> str:
        where = f" in {self.sessions} session(s)" if self.sessions is not None else ""
        what = (
            f"{self.exchanges} exchange(s)"
            if self.exchanges is not None
            else f"session {self.session_id or '-'}"
        )
        if self.recorded:
            return f"mcptape: stopped; {what}{where} recorded"
        return (
            f"mcptape: stopped; {what} relayed{where}; the recording is incomplete: {self.problem}"
        )

    def document(self) -> dict[str, object]:
        return {"event": "stopped", **asdict(self)}


def print_stop(summary: StopSummary, output: str = "text", *, text: bool = True) -> None:
    """Print the summary as the last line on stderr: JSON with ``output == "json"``, else the
    text line (``text=False``: a transport that says nothing at its end in text mode)."""
    if output == "json":
        print(json.dumps(summary.document()), file=sys.stderr, flush=True)
    elif text:
        print(summary.text(), file=sys.stderr, flush=True)
