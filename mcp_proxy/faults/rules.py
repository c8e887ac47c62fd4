"""The fault rule language: what to break, and when.

A rule is one line — an action, then ``key=value`` settings, quoted like a shell word where a
value has spaces — so it fits on a command line (``--fault 'delay ms=2000 method=tools/call
name=search'``) and in a TOML file (``[[fault]]`` tables with the same keys plus ``action``).

Why a line and not a nested config: faults are switched on and off while a host is connected,
often by hand; one readable line per fault, in a file that is re-read when it changes, is the
form Toxiproxy's users and mitmproxy's scripts have taught people to expect.

Every mistake is one :class:`FaultRuleError` naming where it is (the column in a rule, the rule's
number in a file) and what would be valid there; never a traceback.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.limits import MAX_FAULT_COUNT

__all__ = [
    "ACTIONS",
    "FaultRuleError",
    "Match",
    "Rule",
    "parse_intercept_rule",
    "parse_rule",
    "parse_rules_file",
    "parse_rules_text",
    "unsupported",
]


class FaultRuleError(UserError):
    """A fault rule that cannot be parsed; the message says where and what is allowed."""

    exit_code = 2


#: Each action and the settings it takes (besides the match keys), with their defaults;
#: ``...`` marks a setting that has no default and must be given.
ACTIONS: dict[str, dict[str, Any]] = {
    "delay": {"ms": ..., "jitter": 0},
    "throttle": {"bps": ...},
    "drop": {},
    "error": {"code": -32603, "message": "Internal error (injected by mcptape)", "data": None},
    "tool-error": {"text": "Tool failed (injected by mcptape)"},
    "http": {"status": ..., "header": [], "body": None},
    "corrupt": {"mode": "truncate", "at": None},
    "disconnect": {"mode": ..., "signal": "TERM", "after": 0},
    "duplicate": {},
    "reorder": {"wait": 1000},
    # Not a fault: hold the message until a person decides (``--intercept``, docs/intercept.md).
    # An intercept rule is written without its action (the matchers only).
    "intercept": {},
}
CORRUPT_MODES = ("truncate", "cut-utf8", "invalid-json")
DISCONNECT_MODES = ("close-stdin", "kill", "reset", "end-stream")
DIRECTIONS = {"c2s": "c2s", "s2c": "s2c", "request": "c2s", "response": "s2c"}
MATCH_KEYS = ("direction", "method", "name", "kind", "id", "path", "nth", "times", "p", "seed")
KINDS = ("request", "notification", "response", "other")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s)?$")


@dataclass(frozen=True, slots=True)
class Match:
    """When a rule fires. Every given condition must hold; none given = every frame."""

    direction: str | None = None  # "c2s" (host → server) or "s2c" (server → host)
    method: str | None = None  # glob on the JSON-RPC method (a response: its request's method)
    name: str | None = None  # glob on the tool/prompt name or resource URI
    kind: str | None = None  # request | notification | response (errors too) | other
    id: str | None = None  # the JSON-RPC id as text (``7``, ``abc``); a response: its own id
    #: A JSONPath (RFC 9535, compiled by :mod:`mcp_proxy.jsonpaths`) that must find at least one
    #: node in the message, e.g. ``$[?@.arguments.city == 'Lyon']`` (a filter tests the children
    #: of the node before it: here the message's ``params``).
    path: Any = None
    nth: int | None = None  # only the nth frame that matches the conditions above (1-based)
    times: int | None = None  # at most this many firings
    p: float = 1.0  # probability of firing once everything else matched
    seed: int | None = None  # seeds ``p`` so that a run is repeatable

    def selects(
        self,
        direction: str,
        method: str | None,
        name: str | None,
        kind: str | None = None,
        msg_id: Any = None,
        message: Any = None,
    ) -> bool:
        """The static part of the match (the counting and dice live in the engine);
        ``message``: the parsed message, for ``path``."""
        if self.direction is not None and direction != self.direction:
            return False
        if self.kind is not None and kind != self.kind:
            return False
        if self.id is not None and (msg_id is None or str(msg_id) != self.id):
            return False
        if self.method is not None and not (method and fnmatch.fnmatchcase(method, self.method)):
            return False
        if self.name is not None and not (name and fnmatch.fnmatchcase(name, self.name)):
            return False
        if self.path is not None:
            from mcp_proxy.jsonpaths import finds

            return message is not None and finds(self.path, message)
        return True


@dataclass(frozen=True, slots=True)
class Rule:
    """One fault: an action with its settings, and when it fires."""

    action: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    match: Match = field(default_factory=Match)
    text: str = ""  # the rule as written, for findings and messages

    def describe(self) -> str:
        return self.text or self.action


def _fail(where: str, message: str) -> FaultRuleError:
    return FaultRuleError(f"{where}: {message}")


def _duration_ms(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = _DURATION.match(str(value).strip())
    if not m:
        raise _fail(where, f"{value!r} is not a duration (use 250, 250ms or 2s)")
    number = float(m.group(1))
    return number * 1000 if m.group(2) == "s" else number


def _integer(
    value: Any, where: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    try:
        number = int(str(value), 0) if not isinstance(value, int) else value
    except ValueError:
        raise _fail(where, f"{_shown(value)} is not an integer") from None
    if isinstance(number, bool) or (minimum is not None and number < minimum):
        raise _fail(where, f"{_shown(value)} must be an integer ≥ {minimum}")
    if maximum is not None and number > maximum:
        raise _fail(where, f"{_shown(value)} is more than {maximum:,} (a count that never comes)")
    return number


def _shown(value: Any) -> str:
    """A value for a message: quoted, and cut when it is long (a message stays one short line)."""
    text = repr(str(value)) if not isinstance(value, int) else str(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _choice(value: Any, allowed: Sequence[str], where: str) -> str:
    if str(value) not in allowed:
        raise _fail(where, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _match_value(key: str, value: Any, where: str) -> Any:
    if key == "direction":
        return DIRECTIONS[_choice(value, tuple(DIRECTIONS), where)]
    if key in ("nth", "times"):
        return _integer(value, where, minimum=1, maximum=MAX_FAULT_COUNT)
    if key == "seed":
        return _integer(value, where)
    if key == "kind":
        return _choice(value, KINDS, where)
    if key == "path":
        from mcp_proxy.jsonpaths import JsonPathError, parse_jsonpath

        try:
            return parse_jsonpath(str(value))
        except JsonPathError as exc:
            raise _fail(where, str(exc)) from None
    if key == "id":
        if not str(value).strip():
            raise _fail(where, "id= is empty (give the message's id, e.g. id=7)")
        return str(value)
    if key == "p":
        try:
            p = float(value)
        except (TypeError, ValueError):
            raise _fail(where, f"{value!r} is not a probability") from None
        if not 0.0 <= p <= 1.0:
            raise _fail(where, f"{value!r} is not a probability between 0 and 1")
        return p
    if not str(value).strip():
        raise _fail(where, f"{key}= is empty (give a glob, e.g. {key}={_EXAMPLE[key]})")
    return str(value)


#: What a glob match key looks like, for the message about an empty one.
_EXAMPLE = {"method": "tools/call", "name": "search"}


def _setting(action: str, key: str, value: Any, where: str) -> Any:
    """Check and normalise one action setting."""
    if key in ("ms", "jitter", "wait"):
        return _duration_ms(value, where)
    if key in ("bps", "status", "after") or (key == "at" and value is not None):
        number = _integer(value, where, minimum=0)
        if key == "status" and not 100 <= number <= 599:
            raise _fail(where, f"{value!r} is not an HTTP status (100–599)")
        return number
    if key == "code":
        return _integer(value, where)
    if key == "data" and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value  # a plain string is fine as error data
    if key == "mode":
        modes = CORRUPT_MODES if action == "corrupt" else DISCONNECT_MODES
        return _choice(value, modes, where)
    if key == "header":
        headers = value if isinstance(value, list) else [value]
        for h in headers:
            if ":" not in str(h) or not str(h).split(":", 1)[0].strip():
                raise _fail(where, f"{h!r} is not a header (use Name:value)")
        return [str(h) for h in headers]
    if key == "signal":
        name = str(value).upper().removeprefix("SIG")
        if name not in ("TERM", "KILL", "INT", "HUP", "QUIT"):
            raise _fail(
                where, f"{value!r} is not a signal mcptape sends (TERM, KILL, INT, HUP, QUIT)"
            )
        return name
    return value


def build_rule(action: str, items: Sequence[tuple[str, Any, str]], text: str, where: str) -> Rule:
    """A rule from its action and ``(key, value, position)`` settings, every value checked."""
    if action not in ACTIONS:
        faults = [a for a in ACTIONS if a != "intercept"]
        raise _fail(where, f"unknown action {action!r} (one of {', '.join(faults)})")
    allowed = ACTIONS[action]
    settings: dict[str, Any] = {k: v for k, v in allowed.items() if v is not ...}
    match: dict[str, Any] = {}
    for key, value, pos in items:
        if key in MATCH_KEYS:
            match[key] = _match_value(key, value, pos)
        elif key in allowed:
            if key == "header" and "header" in settings and not isinstance(value, list):
                settings["header"] = [*settings["header"], *_setting(action, key, value, pos)]
            else:
                settings[key] = _setting(action, key, value, pos)
        else:
            known = ", ".join([*allowed, *MATCH_KEYS])
            raise _fail(pos, f"{action} does not take {key!r} (it takes: {known})")
    missing = [k for k, v in allowed.items() if v is ... and k not in settings]
    if missing:
        raise _fail(where, f"{action} needs {' and '.join(f'{k}=…' for k in missing)}")
    return Rule(action, settings, Match(**match), text)


def _tokens(text: str, label: str) -> list[tuple[str, int]]:
    """Split a rule into shell-like words, each with its 1-based column.

    Quotes (single or double) group a value with spaces (``message="tool is down"``); a
    backslash escapes the next character inside double quotes and outside quotes.
    """
    tokens: list[tuple[str, int]] = []
    word: list[str] = []
    start = -1
    quote = ""
    quote_at = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < len(text):
                i += 1
                word.append(text[i])
            else:
                word.append(c)
        elif c.isspace():
            if start >= 0:
                tokens.append(("".join(word), start + 1))
                word, start = [], -1
        else:
            start = i if start < 0 else start
            if c in "'\"":
                quote, quote_at = c, i
            elif c == "\\" and i + 1 < len(text):
                i += 1
                word.append(text[i])
            else:
                word.append(c)
        i += 1
    if quote:
        raise _fail(f"{label} {text!r} column {quote_at + 1}", f"unclosed {quote} quote")
    if start >= 0:
        tokens.append(("".join(word), start + 1))
    return tokens


def parse_rule(text: str, *, label: str = "--fault") -> Rule:
    """One rule from its one-line form: ``ACTION key=value …``."""
    tokens = _tokens(text, label)
    if not tokens:
        raise _fail(label, "empty rule (write an action, e.g. 'delay ms=500')")
    action, _ = tokens[0]
    if action.lower() == "intercept":
        raise _fail(f"{label} {text!r} column 1", "hold messages with --intercept, not a fault")
    items: list[tuple[str, Any, str]] = []
    for token, col in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise _fail(f"{label} {text!r} column {col}", f"{token!r} is not key=value")
        items.append((key.strip().lower(), value, f"{label} {text!r} column {col}"))
    return build_rule(action.lower(), items, text, f"{label} {text!r} column 1")


def parse_intercept_rule(text: str, *, label: str = "--intercept") -> Rule:
    """One intercept rule: the fault language's matchers without an action
    (``method=tools/call``, ``direction=response method=tools/list``); empty holds every
    message. Its action is ``intercept``."""
    items: list[tuple[str, Any, str]] = []
    for token, col in _tokens(text, label):
        key, sep, value = token.partition("=")
        where = f"{label} {text!r} column {col}"
        if not sep or not key:
            raise _fail(where, f"{token!r} is not key=value (an intercept rule has no action)")
        key = key.strip().lower()
        if key not in MATCH_KEYS:
            raise _fail(where, f"{key!r} is not a matcher (one of: {', '.join(MATCH_KEYS)})")
        items.append((key, value, where))
    return build_rule("intercept", items, text, f"{label} {text!r} column 1")


def parse_rules_text(text: str, *, source: str = "faults.toml", table: str = "fault") -> list[Rule]:
    """Rules from a TOML document: ``[[fault]]`` tables with ``action`` and the same keys
    (``table="intercept"``: ``[[intercept]]`` tables of matchers, no ``action``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, f"not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - {table, "seed"})
    if unknown:
        raise _fail(source, f"unknown top-level key {unknown[0]!r} (use [[{table}]] tables)")
    tables = doc.get(table, [])
    if not isinstance(tables, list):
        raise _fail(source, f"{table!r} must be an array of tables: write [[{table}]]")
    if table == "intercept":
        tables = [
            {"action": "intercept", **t} if isinstance(t, dict) and "action" not in t else t
            for t in tables
        ]
    default_seed = doc.get("seed")
    rules = []
    for n, entry in enumerate(tables, 1):
        where = f"{source}: {table} #{n}"
        if not isinstance(entry, dict) or "action" not in entry:
            raise _fail(where, 'needs action = "…"')
        action = str(entry["action"]).lower()
        if (action == "intercept") != (table == "intercept"):
            raise _fail(where, f"action {action!r} does not belong in [[{table}]]")
        items = [(k.lower(), v, f"{where}, key {k!r}") for k, v in entry.items() if k != "action"]
        if default_seed is not None and "seed" not in entry:
            items.append(("seed", default_seed, f"{source}: seed"))
        text_form = ("" if table == "intercept" else str(entry["action"])) + "".join(
            f" {k}={shlex.quote(str(v))}" for k, v in entry.items() if k != "action"
        )
        rules.append(build_rule(action, items, text_form.strip(), where))
    return rules


def parse_rules_file(path: Path, *, table: str = "fault") -> list[Rule]:
    """Rules from a TOML file (one clear line if it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FaultRuleError(f"{path}: cannot read {table} rules: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FaultRuleError(f"{path}: not UTF-8 text") from None
    return parse_rules_text(text, source=str(path), table=table)


#: What each transport cannot do: ``(action, mode or None) → why``.
_TRANSPORT_ONLY: dict[tuple[str, str | None], str] = {
    ("http", None): "http (a status with headers) needs an HTTP transport",
    ("disconnect", "reset"): "disconnect mode=reset resets an HTTP connection",
    ("disconnect", "end-stream"): "disconnect mode=end-stream ends an HTTP SSE stream",
    ("disconnect", "close-stdin"): "disconnect mode=close-stdin closes a stdio server's stdin",
}
_HTTP_ONLY = {("http", None), ("disconnect", "reset"), ("disconnect", "end-stream")}


def unsupported(rule: Rule, transport: str) -> str | None:
    """Why ``rule`` cannot be carried out on ``transport`` ("stdio" or "http"), or None.

    The CLI refuses such a rule at start (one clear line); a transport that meets one in a
    re-read rules file forwards the message unchanged.
    """
    key = (rule.action, rule.settings.get("mode") if rule.action == "disconnect" else None)
    if key not in _TRANSPORT_ONLY:
        return None
    http_only = key in _HTTP_ONLY
    if (transport == "stdio") == http_only:
        return f"{rule.describe()!r}: {_TRANSPORT_ONLY[key]}, not {transport}"
    return None
