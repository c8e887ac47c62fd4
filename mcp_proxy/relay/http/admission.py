"""The cap on host connections, for both front ends (the reverse relay and the lean forward
engine share :class:`~mcp_proxy.relay.http.front.FrontServer`).

Past ``MAX_HOST_CONNECTIONS`` a new connection is answered ``503`` with ``Connection: close``
and ``Retry-After`` — an answer the host can show (an SDK client prints the JSON-RPC error's
message), where a silent close would look like a crash of the relay and invite an immediate
retry — then closed. Refusals are counted, and stderr says so: the first at once, then at most
one line per ``REFUSED_REPORT_EVERY`` s with the running count.
"""

from __future__ import annotations

import os
import sys
import time

from mcp_proxy.limits import MAX_HOST_CONNECTIONS, REFUSED_REPORT_EVERY
from mcp_proxy.relay.http.common import jsonrpc_error_body

__all__ = ["ENV_MAX_HOST_CONNECTIONS", "FULL_RESPONSE", "Admission", "host_connection_cap"]

#: Overrides ``MAX_HOST_CONNECTIONS`` at start-up (tests set a small cap).
ENV_MAX_HOST_CONNECTIONS = "MCPTAPE_MAX_HOST_CONNECTIONS"

_FULL_BODY = jsonrpc_error_body(
    "mcptape: too many host connections; retry shortly",
    {"mcptape": "too-many-connections"},
)
#: The whole answer to a connection past the cap.
FULL_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"X-Mcptape-Error: too-many-connections\r\nRetry-After: 1\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(_FULL_BODY), _FULL_BODY)
)


def host_connection_cap() -> int:
    """``MAX_HOST_CONNECTIONS``, or ``MCPTAPE_MAX_HOST_CONNECTIONS`` when set (at least 1)."""
    raw = os.environ.get(ENV_MAX_HOST_CONNECTIONS, "").strip()
    if not raw:
        return MAX_HOST_CONNECTIONS
    try:
        return max(1, int(raw))
    except ValueError:
        return MAX_HOST_CONNECTIONS


class Admission:
    """Whether one more host connection is served; the refusals counted and reported."""

    __slots__ = ("_report_at", "_reported", "cap", "refused", "what")

    def __init__(self, cap: int | None = None, what: str = "relay") -> None:
        """``cap``: None takes :func:`host_connection_cap`; ``what``: how the stderr line names
        the listener (``relay``, ``forward proxy``)."""
        self.cap = host_connection_cap() if cap is None else cap
        self.what = what
        #: Connections refused since the start.
        self.refused = 0
        self._reported = 0
        self._report_at = 0.0

    def admit(self, open_now: int) -> bool:
        """With ``open_now`` connections served, may one more be? False: it is refused."""
        if open_now < self.cap:
            return True
        self.refused += 1
        now = time.monotonic()
        if self._reported == 0 or now >= self._report_at:
            self._report_at = now + REFUSED_REPORT_EVERY
            new = self.refused - self._reported
            self._reported = self.refused
            print(
                f"mcptape: {self.what}: {self.cap} host connections open, the most it serves "
                f"at once (MAX_HOST_CONNECTIONS); refused {new} new connection"
                f"{'' if new == 1 else 's'} with 503 ({self.refused} since the start)",
                file=sys.stderr,
                flush=True,
            )
        return False
