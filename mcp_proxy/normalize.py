"""Normalising JSON before it is compared or matched: ignores, masks, depth limits.

The diff, the mock's matching and replay all compare JSON values that legitimately differ
between runs in known places (ids, ``_meta``, sealed state) and that may be hostile (nested
thousands of levels deep). This module is the one place that decides what is left out, how a
``--ignore`` JSONPath is read, and how deep a value is walked. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_proxy.limits import MAX_DEPTH

#: What always differs between two runs of one conversation, as JSONPaths over a step document
#: (``{"method", "params", "result", "error", "notifications"}``).
DEFAULT_IGNORES = ("$.._meta", "$..progressToken")
#: Values whose presence matters but whose content is opaque per run: compared as "<opaque>".
DEFAULT_MASKS = ("$..requestState",)
#: What the comparison never looks at (it is not part of a step document at all).
NEVER_COMPARED = ("request ids", "timestamps", "session ids", "HTTP headers")
OPAQUE = "<opaque>"
TOO_DEEP = "<nested too deep"


# ============================================================================ JSONPath (subset)


class JsonPathError(ValueError):
    """A ``--ignore`` path this module cannot read; the message says which part."""


_TOKEN = re.compile(
    r"""\.\.(?P<deep>[A-Za-z_$@/][\w$@/.:-]*?|\*)(?=\.|\[|$)
      | \.(?P<key>[A-Za-z_$@/][\w$@/:-]*|\*)
      | \[(?P<index>-?\d+|\*)\]
      | \[['"](?P<qkey>[^'"]*)['"]\]
      | \.\.\[['"](?P<dqkey>[^'"]*)['"]\]""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Seg:
    kind: str  # key | index | any | deep
    value: Any = None


def parse_jsonpath(path: str) -> tuple[_Seg, ...]:
    """Parse the JSONPath subset ``$``, ``.key``, ``['key']``, ``[n]``, ``[*]``, ``.*``, ``..key``.

    Enough to name what to ignore (``$..timestamp``, ``$.result.content[0].text``); filters and
    slices are refused with a clear message rather than half-supported.
    """
    p = path.strip()
    if not p.startswith("$"):
        raise JsonPathError(f"JSONPath {path!r} must start with '$'")
    pos = 1
    segs: list[_Seg] = []
    while pos < len(p):
        m = _TOKEN.match(p, pos)
        if not m:
            raise JsonPathError(f"cannot read JSONPath {path!r} at {p[pos:]!r}")
        pos = m.end()
        if m.group("deep") is not None:
            d = m.group("deep")
            segs.append(_Seg("deep", None if d == "*" else d))
        elif m.group("dqkey") is not None:
            segs.append(_Seg("deep", m.group("dqkey")))
        elif m.group("key") is not None:
            k = m.group("key")
            segs.append(_Seg("any") if k == "*" else _Seg("key", k))
        elif m.group("qkey") is not None:
            segs.append(_Seg("key", m.group("qkey")))
        else:
            i = m.group("index")
            segs.append(_Seg("any") if i == "*" else _Seg("index", int(i)))
    if not segs:
        raise JsonPathError(f"JSONPath {path!r} names the whole document; name a part of it")
    return tuple(segs)


_GONE = object()  # what a dropped value becomes while a container is rebuilt


def _hit(value: Any, rest: Sequence[_Seg], action: str) -> Any:
    """A value the path names: walked further, or (last segment) masked or dropped."""
    if rest:
        return _apply(value, rest, action)
    return OPAQUE if action == "mask" else _GONE


def _apply(doc: Any, segs: Sequence[_Seg], action: str) -> Any:
    """Return a copy of ``doc`` with what ``segs`` names removed (``drop``) or masked."""
    if not segs:
        return doc
    seg, rest = segs[0], segs[1:]
    if seg.kind == "deep":
        return _apply_deep(doc, seg, segs, action)
    if isinstance(doc, dict) and seg.kind in ("key", "any"):
        out = {}
        for k, v in doc.items():
            if seg.kind == "any" or k == seg.value:
                v = _hit(v, rest, action)
            if v is not _GONE:
                out[k] = v
        return out
    if isinstance(doc, list) and seg.kind in ("index", "any"):
        n = len(doc)
        target = None if seg.kind == "any" else (seg.value % n if n and -n <= seg.value < n else -1)
        items = (
            _hit(v, rest, action) if target is None or i == target else v for i, v in enumerate(doc)
        )
        return [v for v in items if v is not _GONE]
    return doc


def _apply_deep(doc: Any, seg: _Seg, segs: Sequence[_Seg], action: str) -> Any:
    """``..name``: the name at this level, then every child for deeper matches."""
    if isinstance(doc, list):
        return [_apply(v, segs, action) for v in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        if seg.value is None or k == seg.value:
            v = _hit(v, segs[1:], action)
            if v is _GONE:
                continue
            if len(segs) == 1:  # masked: nothing below an opaque value
                out[k] = v
                continue
        out[k] = _apply(v, segs, action)
    return out


@dataclass(frozen=True)
class Normalizer:
    """The ignores and masks applied to every step document before comparing."""

    ignores: tuple[tuple[_Seg, ...], ...] = ()
    masks: tuple[tuple[_Seg, ...], ...] = ()

    @classmethod
    def build(cls, extra_ignores: Iterable[str] = (), *, defaults: bool = True) -> Normalizer:
        ignores = [*(DEFAULT_IGNORES if defaults else ()), *extra_ignores]
        masks = DEFAULT_MASKS if defaults else ()
        return cls(
            tuple(parse_jsonpath(p) for p in ignores), tuple(parse_jsonpath(p) for p in masks)
        )

    def __call__(self, doc: Any) -> Any:
        for segs in self.masks:
            doc = _apply(doc, segs, "mask")
        for segs in self.ignores:
            doc = _apply(doc, segs, "drop")
        return doc


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests deeper than ``limit`` containers (iterative: never recurses)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def too_deep_marker(value: Any) -> str:
    """What stands in for a subtree nested beyond :data:`MAX_DEPTH`: a short digest of it."""
    import hashlib

    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    except (RecursionError, ValueError):
        digest = "unreadable"
    return f"{TOO_DEEP}: {digest}>"


def clip_depth(value: Any, limit: int = MAX_DEPTH) -> tuple[Any, bool]:
    """``value`` with what nests beyond ``limit`` replaced by a marker; True when clipped."""
    if not depth_exceeds(value, limit):
        return value, False
    return _clip(value, limit), True


def _clip(value: Any, left: int) -> Any:
    if not isinstance(value, dict | list):
        return value
    if left <= 0:
        return too_deep_marker(value)
    if isinstance(value, dict):
        return {k: _clip(v, left - 1) for k, v in value.items()}
    return [_clip(v, left - 1) for v in value]


def safe_loads(data: bytes | bytearray | str) -> Any:
    """JSON text parsed, or None when it is not JSON or nests too deep for the parser."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def canonical(value: Any) -> str:
    """Key-order-free JSON text: the identity of a value for matching and hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


__all__ = [
    "DEFAULT_IGNORES",
    "DEFAULT_MASKS",
    "MAX_DEPTH",
    "NEVER_COMPARED",
    "OPAQUE",
    "TOO_DEEP",
    "JsonPathError",
    "Normalizer",
    "canonical",
    "clip_depth",
    "depth_exceeds",
    "parse_jsonpath",
    "safe_loads",
    "too_deep_marker",
]
