"""Which recorded session an HTTP exchange belongs to.

One ``mcptape record --upstream`` listener serves any number of host conversations, and each
must become its own session. The rules, in the order they are tried for an exchange:

1. ``Mcp-Session-Id`` request header → the initialize-era session with that id
   (rule ``mcp-session-id``). The ``initialize`` POST itself carries no id: it joins the session
   that its *response's* ``Mcp-Session-Id`` creates, so the handshake opens its own session.
2. ``session_id`` (or ``sessionId``) query parameter → the legacy HTTP+SSE session
   (rule ``legacy-sse-session-id``). The ``GET /sse`` stream joins the session named by the
   ``endpoint`` event it delivers.
3. The client identity the body declares — 2026-07-28 requests carry
   ``_meta["io.modelcontextprotocol/clientInfo"]``, ``initialize`` carries ``clientInfo`` — plus
   the credential the request presents (compared in memory through a keyed hash, never stored):
   rule ``client-identity+idle``. The 2026-07-28 era has no session at all, so this is the
   grouping that keeps one client's conversation together. A group is cut when it has had no
   exchange in flight for ``idle_cut`` seconds (default 300): the next request starts a new
   session. Two hosts with the same client name, version and credential talking through one
   listener at the same time share a session; run one listener per host to keep them apart.
4. Anything else (OAuth discovery, ``/.well-known/*``, a bare ``curl``) → one ``unattributed``
   session per listener, cut on idle the same way (rule ``unattributed+idle``).

The rule that placed a session is stored in its metadata (``meta.grouping``) so the recording
says how it was cut. Pure bookkeeping: the router talks to a recorder-like object and a clock,
nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs

from orjson import loads as _fast_loads

from mcp_proxy.limits import IDENTITY_PARSE_LIMIT as PARSE_LIMIT

__all__ = [
    "RULE_CLIENT",
    "RULE_LEGACY_SSE",
    "RULE_MCP_SESSION",
    "RULE_UNATTRIBUTED",
    "BodyFacts",
    "SessionEntry",
    "SessionRouter",
    "body_facts",
    "query_session_id",
]

RULE_MCP_SESSION = "mcp-session-id"
RULE_LEGACY_SSE = "legacy-sse-session-id"
RULE_CLIENT = "client-identity+idle"
RULE_UNATTRIBUTED = "unattributed+idle"

CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"

_RULE_DOC = {
    RULE_MCP_SESSION: "one session per Mcp-Session-Id; the initialize exchange joins the"
    " session its response created",
    RULE_LEGACY_SSE: "one session per legacy HTTP+SSE session_id (from the endpoint event)",
    RULE_CLIENT: "2026-07-28 is sessionless: exchanges are grouped by the clientInfo in the"
    " request (_meta io.modelcontextprotocol/clientInfo, or initialize clientInfo) and the"
    " credential presented; the group is cut after idle_cut_s seconds with nothing in flight",
    RULE_UNATTRIBUTED: "exchanges that name no session and no client (discovery, OAuth,"
    " /.well-known, raw requests), cut after idle_cut_s seconds with nothing in flight",
}

_CLIENT_INFO_RE = re.compile(
    rb'"(?:io\.modelcontextprotocol/clientInfo|clientInfo)"\s*:\s*(\{[^{}]*\})'
)
_METHOD_RE = re.compile(rb'"method"\s*:\s*"([^"\\]{1,200})"')


class RecorderLike(Protocol):
    def new_session(self, *, transport: str, **fields: Any) -> str: ...

    def end_session(self, session_id: str, *, status: str = "ended", **fields: Any) -> None: ...


@dataclass(slots=True)
class BodyFacts:
    """What a request body says about who sent it (parsed once, on the relay path)."""

    method: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    is_initialize: bool = False
    is_jsonrpc: bool = False


def _client_of(msg: Any) -> tuple[str | None, str | None, str | None, bool]:
    if not isinstance(msg, dict):
        return None, None, None, False
    method = msg.get("method") if isinstance(msg.get("method"), str) else None
    params = msg.get("params")
    info: Any = None
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            info = meta.get(CLIENT_INFO_KEY)
        if info is None and method == "initialize":
            info = params.get("clientInfo")
    name = version = None
    if isinstance(info, dict):
        n, v = info.get("name"), info.get("version")
        name = str(n)[:200] if n is not None else None
        version = str(v)[:100] if v is not None else None
    return method, name, version, msg.get("jsonrpc") == "2.0"


def body_facts(body: bytes, *, partial: bool = False) -> BodyFacts:
    """Client identity and method of a JSON-RPC request body; never raises.

    ``partial`` says the bytes are only the head of a body (streamed): no full parse then.
    """
    facts = BodyFacts()
    if not body:
        return facts
    head = body[:64].lstrip()
    if head[:1] not in (b"{", b"["):
        return facts
    if len(body) <= PARSE_LIMIT and not partial:
        try:
            doc = _fast_loads(body)  # orjson: a few times quicker, on the relay's path
        except ValueError:
            # What orjson refuses and json may take (NaN, integers beyond 64 bits), or not.
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError):
                # RecursionError: nested deeper than the interpreter's limit (a hostile body).
                # Such a body is still relayed and recorded as its bytes; it names no client.
                return facts
        msgs = doc if isinstance(doc, list) else [doc]
        for msg in msgs:
            method, name, version, is_rpc = _client_of(msg)
            facts.is_jsonrpc = facts.is_jsonrpc or is_rpc
            if facts.method is None:
                facts.method = method
            if method == "initialize":
                facts.is_initialize = True
            if name is not None and facts.client_name is None:
                facts.client_name, facts.client_version = name, version
        return facts
    window = body[: 64 * 1024]
    facts.is_jsonrpc = b'"jsonrpc"' in window
    m = _METHOD_RE.search(window)
    if m:
        facts.method = m.group(1).decode("utf-8", "replace")
        facts.is_initialize = facts.method == "initialize"
    c = _CLIENT_INFO_RE.search(window)
    if c:
        try:
            info = json.loads(c.group(1))
        except ValueError:
            info = None
        if isinstance(info, dict):
            n, v = info.get("name"), info.get("version")
            facts.client_name = str(n)[:200] if n is not None else None
            facts.client_version = str(v)[:100] if v is not None else None
    return facts


def query_session_id(query: str) -> str | None:
    """The legacy HTTP+SSE session id from a query string (``session_id`` or ``sessionId``)."""
    if "ession" not in query:
        return None
    qs = parse_qs(query)
    for key in ("session_id", "sessionId"):
        values = qs.get(key)
        if values and values[0]:
            return values[0]
    return None


@dataclass(slots=True)
class SessionEntry:
    key: str
    session_id: str
    rule: str
    transport: str
    last_active: float
    inflight: int = 0
    exchanges: int = 0
    #: Wall-clock time of the session's last activity (an exchange began or ended): when the
    #: client never ends the session (no DELETE), this is when it ended, not the relay's stop.
    last_wall: float = 0.0
    #: Exchanges of this session streaming a response right now.
    streams: int = 0
    #: Exchanges placed here but not handed to the recorder yet, oldest first (they go first).
    held: list[Any] = field(default_factory=list)
    ended: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def idle_cut(self) -> bool:
        return self.rule in (RULE_CLIENT, RULE_UNATTRIBUTED)


class SessionRouter:
    """Maps grouping keys to live recorded sessions, creating and ending them as rules say."""

    def __init__(
        self,
        recorder: RecorderLike | None,
        *,
        name: str | None,
        upstream: str,
        idle_cut: float = 300.0,
        base_meta: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.recorder = recorder
        self.name = name
        self.upstream = upstream
        self.idle_cut = idle_cut
        self.base_meta = dict(base_meta or {})
        self.clock = clock
        self.entries: dict[str, SessionEntry] = {}
        self._salt = os.urandom(16)
        self._last_client: dict[str, str] = {}
        #: Credential → tag, so a client's every request costs one lookup, not an HMAC (memory
        #: only, like the credential the request itself holds while it is relayed).
        self._tags: dict[str, str] = {}
        self.sessions_created = 0

    # ------------------------------------------------------------------ keys
    def credential_tag(self, authorization: str | None) -> str:
        """A short in-memory tag telling credentials apart without keeping them."""
        if not authorization:
            return "-"
        tag = self._tags.get(authorization)
        if tag is None:
            tag = hmac.new(
                self._salt, authorization.encode("utf-8", "surrogateescape"), hashlib.sha256
            ).hexdigest()[:12]
            if len(self._tags) >= 256:  # bounded: a few credentials per listener in practice
                self._tags.clear()
            self._tags[authorization] = tag
        return tag

    @staticmethod
    def mcp_key(session_id: str) -> str:
        return "mcp:" + session_id

    @staticmethod
    def sse_key(session_id: str) -> str:
        return "sse:" + session_id

    def client_key(self, name: str | None, version: str | None, authorization: str | None) -> str:
        tag = self.credential_tag(authorization)
        key = f"client:{name}/{version}#{tag}"
        self._last_client[tag] = key
        return key

    def keyless(self, authorization: str | None) -> tuple[str, str, dict[str, Any]]:
        """Where an exchange that names no session and no client goes.

        Initialize-era requests on a stateless server carry neither a session id nor a client
        identity: they join the live client group that last presented the same credential
        (the client that just initialized), else the unattributed group.
        """
        key = self._last_client.get(self.credential_tag(authorization))
        entry = self.entries.get(key) if key is not None else None
        if entry is not None and not entry.ended:
            if entry.inflight or self.clock() - entry.last_active <= self.idle_cut:
                return entry.key, entry.rule, {}
        return "unattributed", RULE_UNATTRIBUTED, {}

    # ------------------------------------------------------------------ sessions
    def get(
        self,
        key: str,
        rule: str,
        *,
        transport: str = "http",
        grouping: dict[str, Any] | None = None,
    ) -> SessionEntry:
        """The live session for ``key``, creating it (or cutting an idle one) as needed."""
        now = self.clock()
        entry = self.entries.get(key)
        if entry is not None and entry.idle_cut and entry.inflight == 0:
            if now - entry.last_active > self.idle_cut:
                self._end(entry, reason="idle")
                entry = None
        if entry is None:
            entry = self._create(key, rule, transport, grouping or {}, now)
        entry.last_active = now
        return entry

    def _create(
        self, key: str, rule: str, transport: str, grouping: dict[str, Any], now: float
    ) -> SessionEntry:
        meta = dict(self.base_meta)
        group: dict[str, Any] = {"rule": rule, "doc": _RULE_DOC.get(rule, "")}
        if rule in (RULE_CLIENT, RULE_UNATTRIBUTED):
            group["idle_cut_s"] = self.idle_cut
        group.update(grouping)
        meta["grouping"] = group
        sid = (
            self.recorder.new_session(
                transport=transport, name=self.name, upstream=self.upstream, meta=meta
            )
            if self.recorder is not None
            else f"unrecorded-{self.sessions_created}"
        )
        entry = SessionEntry(key, sid, rule, transport, now, last_wall=time.time(), meta=meta)
        self.entries[key] = entry
        self.sessions_created += 1
        return entry

    def begin(self, entry: SessionEntry) -> None:
        entry.inflight += 1
        entry.exchanges += 1
        entry.last_active = self.clock()
        entry.last_wall = time.time()

    def done(self, entry: SessionEntry) -> None:
        entry.inflight = max(0, entry.inflight - 1)
        entry.last_active = self.clock()
        entry.last_wall = time.time()

    def end(self, key: str, *, reason: str) -> None:
        entry = self.entries.get(key)
        if entry is not None:
            self._end(entry, reason=reason)

    def _end(self, entry: SessionEntry, *, reason: str, open_ended: bool = False) -> None:
        """End a session, dated at its last activity unless something is still in flight.

        A session cut on idle or left open by its client (no ``DELETE``) ended when its last
        exchange did, not minutes or hours later when the cut or the relay's stop noticed it;
        ``open_ended`` marks the latter (the client never closed it).
        """
        if entry.ended:
            return
        entry.ended = True
        if self.entries.get(entry.key) is entry:
            del self.entries[entry.key]
        if self.recorder is not None:
            grouping = {**entry.meta.get("grouping", {}), "ended_by": reason}
            if open_ended:
                grouping["open_ended"] = True
            entry.meta["grouping"] = grouping
            ended_at = time.time() if entry.inflight else entry.last_wall
            self.recorder.end_session(
                entry.session_id, status="ended", ended_at=ended_at, meta=entry.meta
            )

    def sweep(self) -> int:
        """End idle heuristic groups (nothing in flight for ``idle_cut`` s); returns how many."""
        now = self.clock()
        stale = [
            e
            for e in self.entries.values()
            if e.idle_cut and e.inflight == 0 and now - e.last_active > self.idle_cut
        ]
        for e in stale:
            self._end(e, reason="idle")
        return len(stale)

    def close_all(self, reason: str = "relay stopped") -> None:
        """The relay stops: every session still open was left open by its client."""
        for entry in list(self.entries.values()):
            self._end(entry, reason=reason, open_ended=True)
