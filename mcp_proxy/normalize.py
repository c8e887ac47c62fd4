"""Normalising JSON before it is compared or matched: ignores, masks, depth limits.

The diff, the mock's matching and replay all compare JSON values that legitimately differ
between runs in known places (ids, ``_meta``, sealed state) and that may be hostile (nested
thousands of levels deep). This module is the one place that decides what is left out, how a
``--ignore`` JSONPath is read, and how deep a value is walked. Pure: no I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonpath import CompoundJSONPath, JSONPath

from mcp_proxy.bounded import depth_exceeds
from mcp_proxy.jsonpaths import JsonPathError, parse_jsonpath
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


# ============================================================================ JSONPath
# python-jsonpath (RFC 9535, with filters, slices and descendants) reads and finds
# (mcp_proxy.jsonpaths, shared with the fault rules' path= matcher); this module only decides
# what a match becomes: dropped, or masked as OPAQUE.


def _container(doc: Any, parts: Sequence[Any]) -> Any:
    """The value at ``parts`` in ``doc``, or None when it is gone (dropped, masked above)."""
    node = doc
    for part in parts:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node if isinstance(node, dict | list) else None


def _apply(doc: Any, path: JSONPath | CompoundJSONPath, action: str) -> Any:
    """A copy of ``doc`` with what ``path`` names removed (``drop``) or masked; ``doc`` itself
    when nothing matches."""
    by_parent: dict[tuple[Any, ...], set[Any]] = {}
    for match in path.finditer(doc):
        parts = tuple(match.parts)
        if parts:
            by_parent.setdefault(parts[:-1], set()).add(parts[-1])
    if not by_parent:
        return doc
    out = copy.deepcopy(doc)
    # Outer parents first: what lies under a dropped or masked value is gone with it. Within
    # one list, the highest index first, so that a drop does not move the ones still to do.
    for parent in sorted(by_parent, key=len):
        node = _container(out, parent)
        if node is None:
            continue
        for key in sorted(by_parent[parent], key=_position, reverse=True):
            if isinstance(node, dict) and isinstance(key, str) and key in node:
                if action == "mask":
                    node[key] = OPAQUE
                else:
                    del node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                if action == "mask":
                    node[key] = OPAQUE
                else:
                    del node[key]
    return out


def _position(key: Any) -> tuple[int, Any]:
    return (1, key) if isinstance(key, int) else (0, str(key))


@dataclass(frozen=True)
class Normalizer:
    """The ignores and masks applied to every step document before comparing."""

    ignores: tuple[JSONPath | CompoundJSONPath, ...] = ()
    masks: tuple[JSONPath | CompoundJSONPath, ...] = ()

    @classmethod
    def build(cls, extra_ignores: Iterable[str] = (), *, defaults: bool = True) -> Normalizer:
        ignores = [*(DEFAULT_IGNORES if defaults else ()), *extra_ignores]
        masks = DEFAULT_MASKS if defaults else ()
        return cls(
            tuple(parse_jsonpath(p) for p in ignores), tuple(parse_jsonpath(p) for p in masks)
        )

    def __call__(self, doc: Any) -> Any:
        for path in self.masks:
            doc = _apply(doc, path, "mask")
        for path in self.ignores:
            doc = _apply(doc, path, "drop")
        return doc


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
