"""Address helpers shared by everything that listens (relays, mock, dashboard): one rule each.

Stdlib only and importing nothing of the project (part of the core).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


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
