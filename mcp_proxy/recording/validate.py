"""The values a recording file may hold: every field of every record, checked before it is used.

A file is text anyone can edit; ``started_at: 1e30`` once went in and made ``sessions``, ``show``
and the dashboard fail on the date it cannot be. Each record type has a table of its fields
(:data:`SESSION`, :data:`EXCHANGE`, :data:`FINDING`, :data:`ANNOTATION`) and a pure function
that says what is wrong with a record, in words: :func:`problem`. The readers turn that into one
line naming the file, the line and the field. Frames are checked on the reader's hot path
(:func:`frame_problem` says why the quick test refused one).

Pure: no I/O, nothing raised; the rules are in ``docs/recording-format.md`` ("Values").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mcp_proxy.limits import IMPORT_SEQ_MAX, IMPORT_TIME_MAX

#: A check: ``None`` when the value is fine, else why not (a phrase after "field 'x' ").
Check = Callable[[Any], str | None]

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def is_time(value: Any) -> bool:
    """Seconds since the epoch that a date can be made of: a finite number in 0 … year 9999."""
    return type(value) in (int, float) and math.isfinite(value) and 0 <= value <= IMPORT_TIME_MAX


def check_time(value: Any) -> str | None:
    if is_time(value):
        return None
    if type(value) not in (int, float):
        return "must be a time (seconds since the epoch, a number)"
    return f"is {value!r}, not a time (seconds since the epoch, 0 to {IMPORT_TIME_MAX:.0f})"


def _integer(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if type(value) is not int:
            return "must be an integer"
        if not low <= value <= high:
            return f"is {value}, outside {low} to {high}"
        return None

    return check


def _text(limit: int | None = None) -> Check:
    def check(value: Any) -> str | None:
        if type(value) is not str:
            return "must be a string"
        if limit is not None and len(value) > limit:
            return f"is {len(value)} characters long (at most {limit})"
        return None

    return check


def _argv(value: Any) -> str | None:
    if type(value) is not list or not all(type(a) is str for a in value):
        return "must be a list of strings (the command's argv)"
    return None


def _object(value: Any) -> str | None:
    return None if type(value) is dict else "must be a JSON object"


def _headers(value: Any) -> str | None:
    if type(value) is not list or not all(
        type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is str for p in value
    ):
        return 'must be a list of ["name", "value"] pairs'
    return None


def _seqs(value: Any) -> str | None:
    if type(value) is not list or not all(
        type(q) is int and 0 <= q <= IMPORT_SEQ_MAX for q in value
    ):
        return f"must be a list of frame numbers (integers 0 to {IMPORT_SEQ_MAX})"
    return None


_SEQ = _integer(1, IMPORT_SEQ_MAX)
_COUNT = _integer(0, INT32_MAX)
_INT32 = _integer(-(2**31), INT32_MAX)
_SIZE = _integer(0, INT64_MAX)

#: A record's fields: name → (required, check). A field left out (or null) that is not
#: required is fine.
Fields = Mapping[str, tuple[bool, Check]]

SESSION: Fields = {
    "id": (True, _text(200)),
    "name": (False, _text(200)),
    "transport": (True, _text(16)),
    "status": (False, _text(16)),
    "started_at": (True, check_time),
    "ended_at": (False, check_time),
    "updated_at": (False, check_time),
    "command": (False, _argv),
    "cwd": (False, _text()),
    "upstream": (False, _text()),
    "hostname": (False, _text(255)),
    "exit_code": (False, _INT32),
    "exit_signal": (False, _INT32),
    "era": (False, _text(16)),
    "protocol_version": (False, _text(32)),
    "client_name": (False, _text(200)),
    "client_version": (False, _text(100)),
    "server_name": (False, _text(200)),
    "server_version": (False, _text(100)),
    "meta": (False, _object),
    "frame_count": (False, _COUNT),
    "gap_count": (False, _COUNT),
    "recorder_version": (False, _text(32)),
}
EXCHANGE: Fields = {
    "n": (True, _integer(1, INT64_MAX)),
    "method": (True, _text(16)),
    "url": (True, _text()),
    "status": (False, _INT32),
    "request_headers": (False, _headers),
    "response_headers": (False, _headers),
    "started_at": (True, check_time),
    "first_byte_at": (False, check_time),
    "ended_at": (False, check_time),
    "outcome": (False, _text(32)),
    "error": (False, _text()),
    "request_size": (False, _SIZE),
    "response_size": (False, _SIZE),
    "meta": (False, _object),
}
FINDING: Fields = {
    "code": (True, _text(64)),
    "severity": (False, _text(8)),
    "title": (False, _text()),
    "detail": (False, _text()),
    "frame_seqs": (False, _seqs),
    "source": (False, _text(16)),
    "analyzer_version": (False, _text(32)),
    "created_at": (False, check_time),
}
ANNOTATION: Fields = {
    "frame_seq": (False, _integer(0, IMPORT_SEQ_MAX)),
    "tag": (False, _text(64)),
    "note": (False, _text()),
    "created_at": (False, check_time),
    "updated_at": (False, check_time),
}


def problem(rec: Mapping[str, Any], fields: Fields) -> str | None:
    """What is wrong with a record's fields (the first problem, in the table's order), or None."""
    for name, (required, check) in fields.items():
        value = rec.get(name)
        if value is None:
            if required:
                return f"field {name!r} is missing"
            continue
        why = check(value)
        if why is not None:
            return f"field {name!r} {why}"
    return None


def frame_problem(seq: Any, ts: Any, mono_ns: Any) -> str | None:
    """What is wrong with a frame's number and clocks (the rest is checked by the reader)."""
    why = _SEQ(seq)
    if why is not None:
        return f"field 'seq' {why}"
    why = check_time(ts)
    if why is not None:
        return f"field 'ts' {why}"
    if type(mono_ns) is not int or not -INT64_MAX - 1 <= mono_ns <= INT64_MAX:
        return "field 'mono_ns' must be an integer (64 bits)"
    return None
