"""Address helpers shared by everything that listens (relays, mock, dashboard): one rule each.

Stdlib only and importing nothing of the project (part of the core).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "port_problem"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a name, maybe ``[v6]``) reaches this machine only.

    ``localhost`` (any case, with or without the root dot) and every loopback address
    (127.0.0.0/8, ``::1``) are; ``0.0.0.0`` and ``::`` are not — they listen on every interface.
    Other names are not resolved: a name that *might* point at loopback is not loopback.
    """
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def port_problem(port: int | None) -> str | None:
    """Why ``port`` cannot be listened on as given (None when it can): 0 (any) to 65535.

    One rule and one message for every command that takes ``--port``.
    """
    if port is not None and not 0 <= port <= 65535:
        return f"--port {port}: not a TCP port (0-65535; 0 picks a free one)"
    return None
