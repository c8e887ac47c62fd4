"""What a person may put on the wire instead of a held message — checked, then made compact.

Every decision that sends bytes sends **one JSON-RPC message** on one line (stdio frames are
lines: a newline inside would split it in two). ``edit`` replaces the message (same direction);
``answer`` answers a held request in its receiver's place (a result or an error, with the
request's id). Errors are :class:`~mcp_proxy.errors.BadValueError`: one line, exit 2.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.errors import BadValueError
from mcp_proxy.limits import INTERCEPT_MAX_BYTES

__all__ = ["answer_message", "compact", "edited_message", "set_path", "split_end"]


def split_end(raw: bytes) -> tuple[bytes, bytes]:
    """``(message, line end)`` of a stdio line."""
    for end in (b"\r\n", b"\n"):
        if raw.endswith(end):
            return raw[: -len(end)], end
    return raw, b""


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's extensions, not JSON: a message
    carrying one would not parse at a strict peer."""
    raise ValueError(f"{name} is not JSON")


def strict_json(data: bytes | str) -> Any:
    """JSON as the wire has it (``json.loads`` without Python's non-finite extensions)."""
    return json.loads(data, parse_constant=_no_constant)


def _parse(data: bytes | str, what: str) -> Any:
    if len(data) > INTERCEPT_MAX_BYTES:
        raise BadValueError(f"{what} is larger than {INTERCEPT_MAX_BYTES:,} bytes")
    try:
        return strict_json(data)
    except (ValueError, RecursionError) as exc:
        raise BadValueError(f"{what} is not JSON: {exc}") from None


def compact(message: Any) -> bytes:
    """One line of JSON (no newline inside: ``json.dumps`` escapes them in strings)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def check_message(message: Any, what: str) -> None:
    """One JSON-RPC 2.0 message: a request, a notification or a response."""
    if not isinstance(message, dict):
        raise BadValueError(f"{what} must be one JSON-RPC message (a JSON object)")
    if message.get("jsonrpc") != "2.0":
        raise BadValueError(f'{what} must say "jsonrpc": "2.0"')
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            raise BadValueError(f"{what}: method must be a non-empty string")
        if "params" in message and not isinstance(message["params"], dict | list):
            raise BadValueError(f"{what}: params must be an object or an array")
        return
    if ("result" in message) == ("error" in message):
        raise BadValueError(f"{what} needs a method, or exactly one of result and error")
    if "error" in message:
        err = message["error"]
        if not isinstance(err, dict) or not isinstance(err.get("code"), int):
            raise BadValueError(f"{what}: error must be an object with an integer code")
        if not isinstance(err.get("message"), str):
            raise BadValueError(f"{what}: error must have a message string")
    if "id" not in message:
        raise BadValueError(f"{what}: a response needs the id of its request")


def edited_message(edited: bytes | str) -> bytes:
    """``--edit FILE`` / the dashboard's editor: the whole message, checked; compact bytes."""
    message = _parse(edited, "the edited message")
    check_message(message, "the edited message")
    return compact(message)


def answer_message(original: bytes, answer: bytes | str) -> bytes:
    """``--answer FILE``: a response to the held request — a whole response, or just
    ``{"result": …}`` / ``{"error": …}`` (the id and ``jsonrpc`` are filled in)."""
    request = _parse(split_end(original)[0], "the held message")
    if not (isinstance(request, dict) and "method" in request and "id" in request):
        raise BadValueError("only a held request can be answered (use --edit or --drop)")
    message = _parse(answer, "the answer")
    if not isinstance(message, dict):
        raise BadValueError("the answer must be a JSON object with result or error")
    message = {"jsonrpc": "2.0", "id": request["id"], **message}
    if message["id"] != request["id"]:
        raise BadValueError(
            f"the answer's id {json.dumps(message['id'])} is not the request's"
            f" {json.dumps(request['id'])}"
        )
    if "method" in message:
        raise BadValueError("the answer must be a response (result or error), not a request")
    check_message(message, "the answer")
    return compact(message)


def _step(key: str) -> str | int:
    return int(key) if key.lstrip("-").isdigit() else key


def set_path(original: bytes, assignment: str) -> bytes:
    """``--set PATH=VALUE``: the held message with one value replaced (``params.arguments.text
    =hi``; a VALUE that parses as JSON is that JSON, else a string; a number in PATH indexes an
    array)."""
    path, sep, raw_value = assignment.partition("=")
    if not sep or not path.strip():
        raise BadValueError(f"--set {assignment!r}: write PATH=VALUE, e.g. params.arguments.x=1")
    try:
        value: Any = strict_json(raw_value)
    except (ValueError, RecursionError):
        value = raw_value
    message = _parse(split_end(original)[0], "the held message")
    steps = [_step(k) for k in path.strip().split(".")]
    node = message
    for n, key in enumerate(steps[:-1]):
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            where = ".".join(str(s) for s in steps[: n + 1])
            raise BadValueError(f"--set {assignment!r}: the message has no {where}") from None
    last = steps[-1]
    if isinstance(node, dict):
        node[str(last)] = value
    elif isinstance(node, list) and isinstance(last, int) and -len(node) <= last < len(node):
        node[last] = value
    else:
        raise BadValueError(f"--set {assignment!r}: cannot set {path} in this message")
    check_message(message, "the edited message")
    return compact(message)
