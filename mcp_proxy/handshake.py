"""What a session's handshake tells: era, protocol version, client and server identity.

Pure: fed classified frames in order, it returns the session fields they establish. Both eras:

- initialize era: ``initialize`` request (clientInfo, requested version, client capabilities)
  and its response (negotiated version, serverInfo, server capabilities, instructions);
- 2026-07-28 era: every request's ``_meta`` envelope (``io.modelcontextprotocol/…`` keys) and the
  ``server/discover`` result (supported versions, capabilities, ttl, cache scope).
"""

from __future__ import annotations

from typing import Any

from mcp_proxy.frames import Classified, Direction, Kind
from mcp_proxy.protocol import ERA_INITIALIZE, META_PREFIX, era_of


def _impl(info: Any) -> tuple[str | None, str | None]:
    if not isinstance(info, dict):
        return None, None
    name = info.get("name")
    version = info.get("version")
    return (str(name) if name is not None else None, str(version) if version is not None else None)


class HandshakeTracker:
    """Follows one session's frames and reports new session facts as they appear."""

    __slots__ = ("_envelope_seen", "_meta_dirty", "_pending", "facts", "meta")

    def __init__(self) -> None:
        #: Pending handshake requests by (direction, id) → method.
        self._pending: dict[str, str] = {}
        self._envelope_seen = False
        self._meta_dirty = False
        self.facts: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}

    def observe(self, direction: Direction, c: Classified) -> dict[str, Any] | None:
        """Feed one classified frame; return the session columns it changes (with ``meta``)."""
        msg = c.message
        if not isinstance(msg, dict):
            return None
        changes: dict[str, Any] = {}
        if direction == Direction.C2S and c.kind == Kind.REQUEST:
            self._request(c, msg, changes)
        elif direction == Direction.S2C and c.kind in (Kind.RESPONSE, Kind.ERROR):
            self._response(c, msg, changes)
        # Keep only what is new or different.
        new = {k: v for k, v in changes.items() if v is not None and self.facts.get(k) != v}
        self.facts.update(new)
        if self._meta_dirty:
            new["meta"] = dict(self.meta)
            self._meta_dirty = False
        return new or None

    def request_matters(self, method: str | None, msg: object) -> bool:
        """False when :meth:`observe` of this message (any but a server response) could change
        nothing: it is no handshake request, and it carries no ``_meta`` while the envelope is
        still unseen. Lets the recorder skip the tracker for nearly every request."""
        if not isinstance(msg, dict):
            return False
        if method in ("initialize", "server/discover"):
            return True
        if self._envelope_seen:
            return False
        params = msg.get("params")
        return isinstance(params, dict) and isinstance(params.get("_meta"), dict)

    def response_matters(self, msg_id: str | None, msg: dict[str, Any]) -> bool:
        """False when :meth:`observe` of this server response could change nothing: it answers
        no pending handshake request, and its result has no ``_meta`` while the server's name
        is still unknown. Lets the recorder skip the tracker for nearly every response."""
        if self._pending and (msg_id or "") in self._pending:
            return True
        if "server_name" in self.facts:
            return False
        result = msg.get("result")
        return isinstance(result, dict) and isinstance(result.get("_meta"), dict)

    def _request(self, c: Classified, msg: dict[str, Any], changes: dict[str, Any]) -> None:
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if c.method in ("initialize", "server/discover") and c.msg_id is not None:
            self._pending[c.msg_id] = c.method
        if c.method == "initialize":
            name, version = _impl(params.get("clientInfo"))
            changes.update(client_name=name, client_version=version)
            self._meta_dirty = True
            self.meta["initialize_request"] = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": params.get("capabilities"),
                "clientInfo": params.get("clientInfo"),
            }
        meta = params.get("_meta")
        if self._envelope_seen or not isinstance(meta, dict):
            return
        version = meta.get(META_PREFIX + "protocolVersion")
        if not isinstance(version, str):
            return
        self._envelope_seen = True
        self._meta_dirty = True
        self.meta["envelope"] = {k: v for k, v in meta.items() if k.startswith(META_PREFIX)}
        name, cver = _impl(meta.get(META_PREFIX + "clientInfo"))
        changes.update(
            protocol_version=version, era=era_of(version), client_name=name, client_version=cver
        )

    def _response(self, c: Classified, msg: dict[str, Any], changes: dict[str, Any]) -> None:
        method = self._pending.pop(c.msg_id or "", None)
        result = msg.get("result")
        if method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            name, sver = _impl(result.get("serverInfo"))
            changes.update(
                protocol_version=version if isinstance(version, str) else None,
                era=ERA_INITIALIZE,
                server_name=name,
                server_version=sver,
            )
            self._meta_dirty = True
            self.meta["initialize_result"] = {
                "protocolVersion": version,
                "capabilities": result.get("capabilities"),
                "serverInfo": result.get("serverInfo"),
                "instructions": result.get("instructions"),
            }
        elif method == "server/discover":
            self._meta_dirty = True
            if not isinstance(result, dict):
                self.meta["discover"] = {"error": msg.get("error")}
                return
            self.meta["discover"] = {k: v for k, v in result.items() if k != "_meta"}
            self._server_from_meta(result, changes)
        elif isinstance(result, dict) and "server_name" not in self.facts:
            self._server_from_meta(result, changes, only_named=True)

    @staticmethod
    def _server_from_meta(
        result: dict[str, Any], changes: dict[str, Any], *, only_named: bool = False
    ) -> None:
        rmeta = result.get("_meta")
        if not isinstance(rmeta, dict):
            return
        name, sver = _impl(rmeta.get(META_PREFIX + "serverInfo"))
        if name or not only_named:
            changes.update(server_name=name, server_version=sver)
