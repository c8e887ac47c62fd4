"""The host's request as it arrives at the front (``front.py``): its headers.

:class:`Headers` is a case-insensitive view of the raw header pairs the relay forwards as they
came; the body is a :class:`~mcp_proxy.relay.http.chunks.Chunks`, as an upstream's response's.
"""

from __future__ import annotations

__all__ = ["Headers"]


class Headers:
    """A case-insensitive, read-only view of the host's headers (first value wins).

    A linear scan per lookup: the relay asks for two or three names per request, cheaper than
    decoding every header into a mapping.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower().encode("latin-1")
        n = len(key)
        for k, v in self._raw:
            if len(k) == n and k.lower() == key:
                return v.decode("utf-8", "surrogateescape")
        return default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None
