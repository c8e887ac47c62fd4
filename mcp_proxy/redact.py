"""Secrets never reach the disk: redaction of headers, URLs and message bodies.

The wire is never changed — the host and the server see every byte as sent. Only the *recorded
copy* is redacted, before it is written: header values, URL query values and JSON fields whose
names say they hold credentials.

What is redacted by default, and why each rule looks the way it does:

- Headers ``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie`` and API-key-like
  names (``X-API-Key``, ``Api-Key``, ``*-Token``, ``*Secret*``, ``*Password*``, ``*-Api-Key`` —
  which also covers ``Mcp-Param-Api-Key`` mirrored from a tool argument). The auth scheme
  (``Bearer``, ``Basic``) and cookie names are kept: they are what one debugs, the values are not.
- JSON fields anywhere in a body whose normalised name (lower case, ``-``/``_`` removed) is a
  credential: ``access_token``, ``refresh_token``, ``id_token``, ``client_secret``, ``password``,
  ``api_key``, ``client_assertion``, ``code_verifier``, ``private_key``…, anything ending in
  ``token`` (except pagination/progress tokens, which are protocol plumbing), or containing
  ``secret``/``password``/``passphrase``. Only scalar values are replaced; an object or array
  under such a name is walked instead, so a tool's ``inputSchema`` property named ``password``
  stays intact while a value under it would not.
- ``code`` is an OAuth authorization code only in OAuth messages. A JSON-RPC error also has a
  ``code`` (an integer) and a code-running tool has a ``code`` argument, so a ``code`` string is
  redacted only in a document that is not JSON-RPC (an OAuth endpoint's body) or in an object
  that also carries OAuth companions (``grant_type``, ``redirect_uri``, ``code_verifier``,
  ``state``, ``client_id``, ``code_challenge``). In URL queries and form bodies ``code`` is always
  redacted.
- Extra header names and JSON paths come from configuration (``--redact-header``,
  ``--redact-path``). A path is dot-separated keys; ``*`` matches one key or array index and a
  leading ``**.`` matches at any depth (``params.arguments.query``, ``result.content.*.text``,
  ``**.ssn``). A matched value is replaced whole, whatever its type.

- Text carries secrets too: ``api_key: VALUE`` on stderr, ``password=…`` in a log line, a tool
  result's text quoting a config. One set of *value rules* — ``name: value``, ``name=value``
  (quoted or not, ``"name": "value"`` and ``'name': 'value'`` included) for a credential's name
  as above, and ``Bearer xyz`` — applies alike to stderr lines, bodies that do not parse as JSON
  (noise, frames too large to parse) and every JSON string value (:func:`redact_text`).

A redacted JSON body is re-serialised (compact, UTF-8), so its stored ``raw`` is not the wire
bytes any more; such frames are marked (``Frame.extra["redacted"]``, column ``frames.redacted``).

Most frames hold nothing to redact, and the recorder asks a cheap prefilter first
(:meth:`Redactor.needs_look`). Its words are derived from the rule tables, never listed by hand:
a name added to a table is seen by the prefilter too. ``tests/test_redact_properties.py``
checks that whatever it lets through, the full redactor would not have changed.

The opt-out (``Redactor(enabled=False)``, ``mcptape record --no-redact``) exists for local
debugging only; the command line says so loudly and the session's metadata records it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ahocorasick_rs import BytesAhoCorasick, Implementation

from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Frame, strip_line_end

__all__ = [
    "DEFAULT_HEADERS",
    "ENV_REDACT",
    "REDACTED",
    "Redactor",
    "is_sensitive_header",
    "is_sensitive_key",
    "redact_argv",
    "redact_text",
]

REDACTED = "[REDACTED]"

#: The redaction policy of a recorder process, and the user's opt-out: ``0``/``off``/``false``
#: turns redaction off, ``1``/``on`` (or unset) keeps the default policy, and the relays pass
#: their full policy as JSON ``{"enabled": bool, "headers": [...], "paths": [...]}``.
ENV_REDACT = "MCPTAPE_REDACT"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"1", "on", "true", "yes"})
_REDACTED_B = REDACTED.encode()

#: Header names (lower case) redacted by default, besides the name patterns below.
DEFAULT_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "apikey",
        "x-apikey",
        "x-auth",
        "x-amz-security-token",
        "x-goog-api-key",
        "private-token",
        "dpop",
    }
)

_HEADER_PATTERN = re.compile(r"(^|[-_])(token|api[-_]?key)$|secret|passw|credential|session-key")

# ---------------------------------------------------------------- the rule tables
# Every rule below reads these tables, and so does the prefilter (derived from them further
# down): a name added here is redacted *and* seen by the prefilter, with nothing else to keep
# in step. Names are normalised: lower case, ``-``/``_`` removed.

#: Names that are credentials exactly.
_EXACT_KEYS = frozenset(
    {
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "token",
        "clientsecret",
        "secret",
        "password",
        "passwd",
        "pass",
        "auth",
        "credentials",
        "credential",
        "apikey",
        "xapikey",
        "clientassertion",
        "assertion",
        "codeverifier",
        "privatekey",
        "authorization",
        "cookie",
        "setcookie",
        "devicecode",
        "usercode",
        "otp",
        "totp",
        "pin",
        "ssn",
    }
)
#: Names ending in one of these are credentials (``…token`` but :data:`_TOKEN_ALLOW`).
_KEY_SUFFIXES = ("token", "apikey")
#: Names containing one of these are credentials.
_KEY_PARTS = ("secret", "password", "passphrase", "credential")
#: Names ending in "token" that are protocol plumbing, not credentials (MCP progress, cursors).
_TOKEN_ALLOW = frozenset(
    {
        "progresstoken",
        "nexttoken",
        "pagetoken",
        "nextpagetoken",
        "continuationtoken",
        "resumptiontoken",
        "tokentype",
        "maxtoken",
    }
)
#: The OAuth authorization code's name: redacted in ``code=…`` always, and in ``"code": "…"`` /
#: ``code: …`` unless the value starts with a digit (a JSON-RPC error code, an exit code).
_CODE_KEY = "code"
#: Authorization schemes whose credential the value rules replace (``Bearer xyz``).
_SCHEMES = ("bearer", "basic", "token")
#: Query parameters that carry credentials in URLs besides the JSON names (``?key=`` is how
#: several APIs take their key; ``code`` is an OAuth authorization code on a redirect).
_URL_KEYS = frozenset({"code", "key", "auth", "sig", "signature"})
_OAUTH_COMPANIONS = frozenset(
    {"grant_type", "redirect_uri", "code_verifier", "state", "client_id", "code_challenge"}
)

# ---------------------------------------------------------------- the value rules
# What replaces a secret in text: stderr lines, bodies that are not JSON, and every JSON string
# value (``"text": "api_key: s3cr3t"``) — the same rules everywhere. ``name: value`` and
# ``name=value`` (also ``"name": "value"``, ``'name': 'value'``, a space or tab before the
# sign) for a name the tables above call a credential; ``Bearer xyz`` after any name.
_KEY_CHARS = rb"A-Za-z0-9_\-"
_ASSIGN = re.compile(
    rb"(?:(?P<q>[\"'])|(?<![" + _KEY_CHARS + rb"]))(?P<key>[" + _KEY_CHARS + rb"]{1,64})"
    rb"(?(q)(?P=q))[ \t]?(?P<sep>[:=])[ \t]*(?:(?i:bearer|basic|token)[ \t]+)?"
)
#: The value after a credential's name (read only then: a name that is no credential must not
#: hide the next one inside its value, "config: api_key: VALUE", and a run like "a:a:a:…" must
#: not be read once per name — linear time on any input).
_VALUE = re.compile(
    rb"(?!\[REDACTED\]|(?:null|true|false)\b)"
    rb"(?:\"(?:[^\"\\]|\\.)*\"|'[^'\n]*'|[^\s\"',;&})\]]+)",
    re.DOTALL,
)
#: ``Bearer`` takes any credential of 8 or more characters; ``Basic``/``token`` only one that
#: looks like one (a digit, ``+``, ``/`` or ``=`` in it, or 32 characters), so that prose
#: ("basic functionality", "token expiration") in a tool's description stays readable.
_BEARER = re.compile(
    rb"(?i)\b(?:(?P<bearer>bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*"
    rb"|(?P<scheme>basic|token)\s+(?=[A-Za-z\-._~]*[0-9+/=]|[A-Za-z0-9\-._~+/]{32})"
    rb"[A-Za-z0-9\-._~+/]{8,}=*)"
)

# ---------------------------------------------------------------- the prefilter
# Derived from the tables: the cheap question "can anything here need redaction?" asked of
# the raw bytes, folded (ASCII lower case, ``-``/``_`` removed, as names are normalised).
# A name that a suffix or part already covers needs no word of its own; a long exact name is
# its own word; a short one (``pin``, ``otp``, ``auth``, ``code``…, which prose and other
# names contain: "ping", "author", "unicode") only with what the rules need after it — a quote
# (a JSON or quoted name), a backslash (the quote escaped inside a JSON string), a ``:`` or
# ``=`` (with one space or tab before it, as the value rules allow).
_SHORT = 6
_CONTEXTS = (b'"', b"'", b"\\", b":", b"=", b" :", b" =", b"\t:", b"\t=")


#: The one key spelt exactly like this is MCP plumbing (``_meta.progressToken``, in every 2026
#: request and progress notification) and never redacted (``_TOKEN_ALLOW``): the prefilter
#: ignores it, quotes included, so ``"token"`` alone no longer sends every such frame to the
#: parser. Only the exact quoted key goes: ``"myProgressToken"`` or a value that merely contains
#: the word still hits ``token``.
_PLUMBING_KEY = b'"progresstoken"'
#: What the plumbing key is replaced with: its quotes stay, so that a word sharing one of them
#: (``"progressToken"code":…``, which the fallback still reads as a ``"code"`` field) is seen.
_PLUMBING_LEFT = b'""'


def _covered(name: str) -> bool:
    return name.endswith(_KEY_SUFFIXES) or any(p in name for p in _KEY_PARTS)


def _prefilter_words() -> tuple[bytes, ...]:
    """Every word whose absence proves a span clean."""
    exact = {k for k in _EXACT_KEYS if not _covered(k)}
    short = {k for k in exact if len(k) < _SHORT} | {_CODE_KEY}
    # a short name ending in another is seen by that one's words ("totp" by "otp")
    short = {k for k in short if not any(k != o and k.endswith(o) for o in short)}
    long_ = {k for k in exact if len(k) >= _SHORT} | set(_KEY_SUFFIXES) | set(_KEY_PARTS)
    long_ |= {sch for sch in _SCHEMES}
    long_ = {w for w in long_ if not any(w != o and o in w for o in long_)}
    words = {w.encode() for w in long_}
    words |= {k.encode() + c for k in short for c in _CONTEXTS}
    # A JSON key may be spelt with escapes ("\u0070in" is "pin" once parsed): any escape sends
    # the body to the parser. KELVIN SIGN is the one character ``str.lower()`` turns into an
    # ASCII letter ("to\u212aen" is "token" to the redactor).
    words |= {b"\\u", "\u212a".encode()}
    # The plumbing key cut out behind an escaped quote was no key: ``"\"progressToken": …`` is
    # the key ``"progressToken``, a credential's name to the rules.
    words.add(b"\\" + _PLUMBING_LEFT)
    return tuple(sorted(words))


_PREFILTER_WORDS = _prefilter_words()
#: Bodies above this size are prefiltered a window of this size at a time (no copy of them).
_BIG = 1 << 20
_FOLD = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))
#: The words as one Aho-Corasick automaton (a DFA, in Rust): every word is looked for in one
#: pass over the folded bytes, a few ns per byte whatever the number of words — where Python's
#: regex engine tried the word trie at every byte (~14-40 ns per byte) and a substring search
#: per word cost a pass per word (~1 ns per byte each, 18 of them). Measured on a page of
#: import frames (133 bytes): 3.5 µs per frame before, ~0.6 µs with the fold.
_WORDS = BytesAhoCorasick(list(_PREFILTER_WORDS), implementation=Implementation.DFA)
_OVERLAP = 64
#: Bodies looked at together by :meth:`Redactor.suspects` (then 16, 2, 1 in a block that hits).
_BLOCK = 128


def _norm(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def is_sensitive_key(name: str) -> bool:
    """True when a JSON field (or form/query parameter) of this name holds a credential."""
    n = _norm(name)
    if n in _EXACT_KEYS:
        return True
    if n.endswith("token"):
        return n not in _TOKEN_ALLOW
    return n.endswith(_KEY_SUFFIXES) or any(p in n for p in _KEY_PARTS)


def _bearer_sub(m: re.Match[bytes]) -> bytes:
    return (m.group("bearer") or m.group("scheme")) + b" " + _REDACTED_B


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be stored: the value of a credential's flag (``--api-key X``,
    ``--token=X``) is replaced, and every other argument goes through the value rules of
    :func:`redact_text` (``API_KEY=X`` handed to ``env``, ``Authorization: Bearer X``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and len(arg) > 1:
            name, eq, _ = arg.lstrip("-").partition("=")
            if name and is_sensitive_key(name):
                if eq:
                    out.append(arg[: arg.index("=") + 1] + REDACTED)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        raw = arg.encode("utf-8", "surrogateescape")
        red, changed = redact_text(raw)
        out.append(red.decode("utf-8", "surrogateescape") if changed else arg)
    return out


def redact_text(raw: bytes) -> tuple[bytes, bool]:
    """The value rules over text (a stderr line, a body that is not JSON, a JSON string value
    as UTF-8): ``(bytes, changed)``. No prefilter: callers ask :meth:`Redactor.needs_look`."""
    parts: list[bytes] = []
    done = 0
    for m in _ASSIGN.finditer(raw):
        if m.start() < done:
            continue  # inside a value already replaced
        key = m.group("key").decode("ascii")
        code = not is_sensitive_key(key)
        if code and key.lower() != _CODE_KEY:
            continue  # no credential's name: its value is not even read
        v = _VALUE.match(raw, m.end())
        if v is None:
            continue
        val = v.group()
        if code and m.group("sep") == b":" and val.lstrip(b"\"'")[:1].isdigit():
            continue  # ``code: 5`` is an error or exit code; ``code=…`` is always redacted
        quote = val[:1] if val[:1] in (b'"', b"'") else b""
        parts += (raw[done : m.end()], quote, _REDACTED_B, quote)
        done = v.end()
    out = b"".join((*parts, raw[done:])) if parts else raw
    out = _BEARER.sub(_bearer_sub, out)
    return out, out != raw


def is_sensitive_header(name: str, extra: Iterable[str] = ()) -> bool:
    """True when a header of this name is redacted by default (or listed in ``extra``)."""
    low = name.lower()
    if low in DEFAULT_HEADERS or low in extra:
        return True
    if low.startswith(("mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name")):
        return False
    return _HEADER_PATTERN.search(low) is not None


def _redact_header_value(name: str, value: str) -> str:
    low = name.lower()
    if low in ("authorization", "proxy-authorization"):
        scheme, sep, _rest = value.strip().partition(" ")
        return f"{scheme} {REDACTED}" if sep and scheme.isalpha() else REDACTED
    if low == "cookie":
        parts = []
        for item in value.split(";"):
            cname, eq, _v = item.strip().partition("=")
            parts.append(f"{cname}={REDACTED}" if eq else REDACTED)
        return "; ".join(parts)
    if low == "set-cookie":
        first, sep, attrs = value.partition(";")
        cname, eq, _v = first.strip().partition("=")
        head = f"{cname}={REDACTED}" if eq else REDACTED
        return head + (sep + attrs if sep else "")
    return REDACTED


def _compile_path(spec: str) -> tuple[str, ...]:
    spec = spec.strip()
    if spec.startswith("$."):
        spec = spec[2:]
    elif spec == "$":
        spec = ""
    parts = tuple(p for p in spec.split(".") if p != "")
    if not parts:
        raise ValueError(f"empty JSON path: {spec!r}")
    for part in parts:
        # Brackets and a partial wildcard are JSONPath habits this syntax does not have: taken
        # as literal keys they would silently redact nothing.
        if "[" in part or "]" in part or ("*" in part and part not in ("*", "**")):
            shown = spec if len(spec) <= 60 else spec[:57] + "…"
            raise ValueError(
                f"{shown!r} is not a redaction path: dot-separated keys, * for one key or index,"
                " ** for any depth (e.g. params.arguments.query, result.content.*.text, **.ssn)"
            )
    return parts


def _path_matches(pattern: tuple[str, ...], path: Sequence[str]) -> bool:
    if not pattern:
        return not path
    head = pattern[0]
    if head == "**":
        rest = pattern[1:]
        return any(_path_matches(rest, path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    if head != "*" and head != path[0]:
        return False
    return _path_matches(pattern[1:], path[1:])


@dataclass
class Redactor:
    """Redaction policy; stateless after construction, safe to share between threads."""

    enabled: bool = True
    extra_headers: frozenset[str] = frozenset()
    paths: tuple[tuple[str, ...], ...] = ()
    _path_prefilter: re.Pattern[bytes] | None = field(default=None, repr=False)
    _always_parse: bool = field(default=False, repr=False)
    _header_cache: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_options(
        cls,
        *,
        enabled: bool = True,
        headers: Iterable[str] = (),
        paths: Iterable[str] = (),
    ) -> Redactor:
        """Build a policy from command-line style options (raises ValueError on a bad path)."""
        compiled = tuple(_compile_path(p) for p in paths)
        literals: list[bytes] = []
        always = False
        for p in compiled:
            last = p[-1]
            if last in ("*", "**"):
                always = True
            else:
                literals.append(re.escape(json.dumps(last)[1:-1].encode()))
        pre = re.compile(b"|".join(literals)) if literals else None
        return cls(
            enabled=enabled,
            extra_headers=frozenset(h.strip().lower() for h in headers if h.strip()),
            paths=compiled,
            _path_prefilter=pre,
            _always_parse=always,
        )

    def to_env(self) -> str:
        """This policy as the value of :data:`ENV_REDACT` (see :func:`redactor_from_env`)."""
        return json.dumps(
            {
                "enabled": self.enabled,
                "headers": sorted(self.extra_headers),
                "paths": [".".join(p) for p in self.paths],
            }
        )

    # ---------------------------------------------------------------- headers and URLs
    def headers(self, pairs: Iterable[Sequence[str]]) -> list[list[str]]:
        """``[[name, value], …]`` with credential values replaced (order and names kept)."""
        out: list[list[str]] = []
        cache = self._header_cache
        for pair in pairs:
            name, value = pair[0], pair[1]
            if self.enabled:
                sensitive = cache.get(name)
                if sensitive is None:
                    sensitive = is_sensitive_header(name, self.extra_headers)
                    if len(cache) < 4096:
                        cache[name] = sensitive
                if sensitive:
                    value = _redact_header_value(name, value)
            out.append([name, value])
        return out

    def url(self, url: str) -> str:
        """The URL with credential-like query values (and OAuth ``code``) replaced."""
        if not self.enabled or "?" not in url:
            return url
        parts = urlsplit(url)
        if not parts.query:
            return url
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        changed = False
        new_pairs = []
        for k, v in pairs:
            if v and (k.lower() in _URL_KEYS or is_sensitive_key(k)):
                v = REDACTED
                changed = True
            new_pairs.append((k, v))
        if not changed:
            return url
        query = urlencode(new_pairs, quote_via=quote, safe="[]")
        return urlunsplit(parts._replace(query=query))

    # ---------------------------------------------------------------- bodies
    def needs_look(self, raw: bytes | bytearray) -> bool:
        """False when nothing in ``raw`` can need redaction; True when it may (then look).

        Conservative — a false True costs a parse, a false False would store a secret. Safe
        on any span of a byte stream: every word it searches for lies within one line, so a
        chunk of lines that is clean as a whole has only clean lines (the recorder checks a
        relay's read once instead of each line cut from it).
        """
        n = len(raw)
        # A huge body is folded a window at a time (never a copy of its size); windows overlap
        # by more than the longest word, so none is cut in two unseen.
        for start in range(0, n, _BIG):
            window = raw if n <= _BIG else raw[start : start + _BIG + _OVERLAP]
            folded = window.translate(_FOLD, b"-_").replace(_PLUMBING_KEY, _PLUMBING_LEFT)
            if _WORDS.find_matches_as_indexes(folded):
                return True
        if self._always_parse:
            return True
        return self._path_prefilter is not None and self._path_prefilter.search(raw) is not None

    def suspects(self, raws: Sequence[bytes]) -> list[int]:
        """The indexes of the bodies in ``raws`` that may need redaction (then run :meth:`frame`
        on those): :meth:`needs_look` over many bodies at once.

        Bodies are joined with ``\\n`` a block at a time and looked at as one span (no word of
        the prefilter holds a line end, so a clean block has only clean bodies); a block that
        is not clean is split and looked at again, down to single bodies. Most bodies hold no
        secret: an import decides 128 of them with one pass of the automaton (:data:`_WORDS`)
        instead of one run per body. ``[]`` when redaction is off.
        """
        if not self.enabled:
            return []
        found: list[int] = []
        self._suspects(raws, 0, len(raws), _BLOCK, found)
        return found

    def _suspects(
        self, raws: Sequence[bytes], start: int, end: int, block: int, found: list[int]
    ) -> None:
        for lo in range(start, end, block):
            hi = min(lo + block, end)
            if block == 1:
                if raws[lo] and self.needs_look(raws[lo]):
                    found.append(lo)
            elif self.needs_look(b"\n".join(raws[lo:hi])):
                self._suspects(raws, lo, hi, max(1, block // 8), found)

    def json_value(self, doc: Any) -> tuple[Any, bool]:
        """Redact a parsed JSON document; returns ``(new_doc, changed)``. Does not mutate input."""
        jsonrpc = isinstance(doc, dict) and doc.get("jsonrpc") == "2.0"
        if (
            isinstance(doc, list)
            and doc
            and all(isinstance(d, dict) and "jsonrpc" in d for d in doc)
        ):
            jsonrpc = True
        return self._walk(doc, [], jsonrpc)

    def _walk(self, node: Any, path: list[str], jsonrpc: bool) -> tuple[Any, bool]:
        if self.paths and path and any(_path_matches(p, path) for p in self.paths):
            if node is None:
                return node, False
            return REDACTED, True
        if isinstance(node, dict):
            changed = False
            out: dict[str, Any] = {}
            oauthy = not jsonrpc or not _OAUTH_COMPANIONS.isdisjoint(node)
            for k, v in node.items():
                key = str(k)
                if _is_scalar_secret(v) and (
                    is_sensitive_key(key) or (oauthy and key == "code" and isinstance(v, str))
                ):
                    out[k] = REDACTED
                    changed = changed or v != REDACTED
                    continue
                path.append(key)
                nv, c = self._walk(v, path, jsonrpc)
                path.pop()
                out[k] = nv
                changed = changed or c
            return (out, True) if changed else (node, False)
        if isinstance(node, list):
            changed = False
            items: list[Any] = []
            for i, v in enumerate(node):
                path.append(str(i))
                nv, c = self._walk(v, path, jsonrpc)
                path.pop()
                items.append(nv)
                changed = changed or c
            return (items, True) if changed else (node, False)
        if isinstance(node, str):
            return self._text(node)
        return node, False

    def body(self, raw: bytes, content_type: str | None = None) -> tuple[bytes, bool]:
        """The recorded copy of a body: ``(bytes, changed)``. JSON → re-serialised when changed."""
        if not self.enabled or not raw:
            return raw, False
        ctype = (content_type or "").lower()
        if ctype.startswith("application/x-www-form-urlencoded"):
            # Always parsed: a form's names may be percent-encoded ("p%69n=…" is "pin"), which
            # no word of the prefilter sees; form bodies are rare in MCP traffic (OAuth).
            return self._form(raw)
        if not self.needs_look(raw):
            return raw, False
        text: str | None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            stripped = text.strip()
            if stripped[:1] in ("{", "["):
                try:
                    doc = json.loads(stripped)
                    new, changed = self.json_value(doc)
                except (ValueError, RecursionError):
                    # Not JSON, or nested deeper than we can walk: the byte-level rules apply.
                    pass
                else:
                    if not changed:
                        return raw, False
                    out = _dump(new)
                    if out is not None:
                        return out, True
        return self._fallback(raw)

    def _form(self, raw: bytes) -> tuple[bytes, bool]:
        try:
            pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            return self._fallback(raw)
        changed = False
        out = []
        for k, v in pairs:
            if v and (k.lower() == "code" or is_sensitive_key(k)):
                v = REDACTED
                changed = True
            out.append((k, v))
        if not changed:
            return raw, False
        return urlencode(out, quote_via=quote, safe="[]").encode(), True

    def _fallback(self, raw: bytes) -> tuple[bytes, bool]:
        """Byte-level redaction for text that does not parse (noise, truncated, huge)."""
        return redact_text(raw)

    def _text(self, value: str) -> tuple[str, bool]:
        """A JSON string value through the value rules (as a stderr line would be)."""
        raw = value.encode("utf-8", "surrogatepass")
        if not self.needs_look(raw):
            return value, False
        out, changed = redact_text(raw)
        return (out.decode("utf-8", "surrogatepass"), True) if changed else (value, False)

    # ---------------------------------------------------------------- frames
    def frame(self, frame: Frame) -> Frame:
        """The frame to record: redacted copy marked ``extra["redacted"]``, or the frame itself.

        Runs in the recorder (its own process for ``mcptape record``), off the relay path. Never raises: if redaction
        itself fails, the body is withheld rather than written in clear.
        """
        if not self.enabled or not frame.raw:
            return frame
        try:
            raw = frame.raw if isinstance(frame.raw, bytes) else bytes(frame.raw)
            if frame.channel == Channel.STDERR:
                new, changed = self._fallback(raw) if self.needs_look(raw) else (raw, False)
            elif frame.channel == Channel.STDIO:
                if not self.needs_look(raw):  # most frames: decided without a copy
                    return frame
                content = strip_line_end(raw)
                ending = raw[len(content) :]
                new, changed = self.body(content)
                new = new + ending if changed else raw
            else:
                new, changed = self.body(raw, frame.extra.get("content_type"))
        except Exception as exc:  # never write a body in clear because redaction broke
            new = json.dumps({"mcptape": f"body withheld: redaction failed ({exc!r})"}).encode()
            changed = True
        if not changed:
            return frame
        extra = dict(frame.extra)
        extra["redacted"] = True
        return Frame(
            frame.direction,
            frame.channel,
            new,
            frame.mono_ns,
            frame.wall,
            frame.complete,
            frame.http_exchange,
            frame.sse_id,
            frame.sse_event,
            extra,
        )


def _dump(doc: Any) -> bytes | None:
    """Compact UTF-8 JSON; a lone surrogate stays a ``\\u`` escape; None if too deep."""
    try:
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(doc, separators=(",", ":")).encode("ascii")
    except RecursionError:
        return None


def _is_scalar_secret(value: Any) -> bool:
    """Values that can carry a secret by themselves: strings and numbers (not bool/None)."""
    if isinstance(value, bool) or value is None:
        return False
    return isinstance(value, (str, int, float))


def env_allows_redaction(environ: dict[str, str] | None = None) -> bool:
    """False when the user turned redaction off through :data:`ENV_REDACT`."""
    policy = redactor_from_env(environ)
    return policy is None or policy.enabled


def policy_from_env(environ: dict[str, str] | None = None) -> Redactor:
    """The recorder process's policy: :data:`ENV_REDACT`, or the default (on) when unset.

    One policy for every transport: the stdio and the HTTP relay record through the same
    recorder process, so both are redacted alike unless the user opted out.
    """
    return redactor_from_env(environ) or Redactor()


def redactor_from_env(environ: dict[str, str] | None = None) -> Redactor | None:
    """The policy named by :data:`ENV_REDACT`, or None when it is unset."""
    value = (environ if environ is not None else os.environ).get(ENV_REDACT)
    if not value or not value.strip():
        return None
    word = value.strip().lower()
    if word in _OFF:
        return Redactor(enabled=False)
    if word in _ON:
        return Redactor()
    try:
        spec = json.loads(value)
        return Redactor.from_options(
            enabled=bool(spec.get("enabled", True)),
            headers=spec.get("headers") or (),
            paths=spec.get("paths") or (),
        )
    except (ValueError, TypeError, AttributeError):
        # A garbled policy must not turn redaction off: fall back to the defaults.
        return Redactor()


def redactor_for_recording(
    enabled: bool, headers: Sequence[str] = (), paths: Sequence[str] = ()
) -> Redactor:
    """The policy a recording command was given (``--no-redact``, ``--redact-header``,
    ``--redact-path``): a bad path is one clear line, and switching redaction off says so loudly
    on stderr, once, for every transport."""
    import sys

    try:
        redactor = Redactor.from_options(enabled=enabled, headers=headers, paths=paths)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    if not enabled:
        print(
            "mcptape: WARNING: redaction is OFF (--no-redact). Authorization headers, cookies, "
            "API keys, OAuth tokens and secrets will be written to the database IN CLEAR TEXT. "
            "Use this only for local debugging, and delete the recording afterwards.",
            file=sys.stderr,
            flush=True,
        )
    return redactor
