"""Whether a session's recorder still runs: what every reader of a session's status asks.

No SQLAlchemy here, so that the recorder process's settle (``analysis.service.settle``) and
``render.py`` can ask without importing the async store (``store/queries.py`` re-exports them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["duration", "is_live", "session_status"]


def is_live(session: Mapping[str, Any], *, now: float | None = None) -> bool:
    """A session is live while its recorder runs; a ``live`` row whose recorder died is not.

    Only checkable for recorders on this machine (same hostname); others count as live.
    """
    if session.get("status") != "live":
        return False
    import os
    import socket

    pid = session.get("pid")
    if pid and session.get("hostname") == socket.gethostname():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    del now
    return True


def session_status(session: Mapping[str, Any]) -> str:
    """live | ended | crashed | abandoned (the recorder died without closing the session)."""
    status = str(session.get("status") or "")
    if status == "live" and not is_live(session):
        return "abandoned"
    return status


def duration(session: Mapping[str, Any]) -> float | None:
    start = session.get("started_at")
    end = session.get("ended_at") or session.get("updated_at")
    if start is None:
        return None
    if end is None and session.get("status") == "live":
        end = time.time()
    return (end - start) if end else None
