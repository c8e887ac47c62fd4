"""JSONPath (RFC 9535) for the whole project: ``--ignore`` in diff/replay/mock and the ``path=``
matcher of fault and intercept rules read paths the same way. python-jsonpath reads and finds;
this module only fixes the dialect (strict RFC 9535) and the depth it walks. Core: imports only
the library and :mod:`mcp_proxy.limits` (import it lazily where start-up time matters: the
library costs a few milliseconds)."""

from __future__ import annotations

from typing import Any

import jsonpath
from jsonpath import CompoundJSONPath, JSONPath

from mcp_proxy.limits import MAX_DEPTH

__all__ = ["JsonPathError", "finds", "parse_jsonpath"]


class JsonPathError(ValueError):
    """A JSONPath that cannot be read; the message says why."""


#: RFC 9535 as written (python-jsonpath's default syntax adds extensions, one of which reads a
#: name starting with ``_`` — ``$.._meta`` — as something else).
_JSONPATH = jsonpath.JSONPathEnvironment(strict=True)
#: Values reach a path clipped to MAX_DEPTH (``normalize.clip_depth``), inside a step document
#: of a few levels; the library's own limit (100) would refuse what the clip lets through.
_JSONPATH.max_recursion_depth = MAX_DEPTH + 16


def parse_jsonpath(path: str) -> JSONPath | CompoundJSONPath:
    """Compile a JSONPath (RFC 9535: ``$.key``, ``['key']``, ``[n]``, ``[*]``, ``..key``,
    slices, filters such as ``$..content[?@.type == 'image']``).

    A path must start at the root (``$``) and name a part of the document, not all of it.
    """
    p = path.strip()
    if not p.startswith("$"):
        raise JsonPathError(f"JSONPath {path!r} must start with '$'")
    if p == "$":
        raise JsonPathError(f"JSONPath {path!r} names the whole document; name a part of it")
    try:
        return _JSONPATH.compile(p)
    except jsonpath.JSONPathError as exc:
        # The library's message goes on with a caret diagram: a user error stays one line.
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise JsonPathError(f"cannot read JSONPath {path!r}: {why}") from None


def finds(path: JSONPath | CompoundJSONPath, doc: Any) -> bool:
    """Whether ``path`` finds at least one node in ``doc`` (a document too deep for the
    library's walk finds nothing)."""
    try:
        return next(iter(path.finditer(doc)), None) is not None
    except (jsonpath.JSONPathError, RecursionError):
        return False
