"""Properties of the redactor (issue #22, defect 19), over text made from its own rule tables.

1. The prefilter is a superset of the rules: whenever it says "nothing to look at", the full
   redactor (no prefilter at all) changes nothing — for stderr lines, JSON string values, JSON
   keys, header-like lines, non-JSON bodies, short bodies and long reads alike.
2. The value rules are the same everywhere: a text redacted as a stderr line and as a JSON
   string value comes out the same.

The text is built from the rule vocabulary (every credential name, suffix and part in random
case with ``-``/``_`` inside, the plumbing names that are *not* credentials, schemes,
separators, quotes, escapes, KELVIN SIGN, values) mixed with random text, so a word the
prefilter forgot, or a rule one context applies and another does not, shows up here.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.redact import (
    _CODE_KEY,
    _EXACT_KEYS,
    _KEY_PARTS,
    _KEY_SUFFIXES,
    _PREFILTER_WORDS,
    _SCHEMES,
    _TOKEN_ALLOW,
    DEFAULT_HEADERS,
    Redactor,
)
from tests.conftest import running_full

R = Redactor()
#: A relay read of many clean lines (the prefilter then looks at a read, not a line), clean itself.
PAD = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}\n' * 30

NAMES = sorted(
    _EXACT_KEYS
    | set(_KEY_SUFFIXES)
    | set(_KEY_PARTS)
    | {"my" + s for s in _KEY_SUFFIXES}
    | {p + "_hint" for p in _KEY_PARTS}
    | _TOKEN_ALLOW
    | {_CODE_KEY, "progressToken", "key", "name", "text", "ping", "unicode", "author"}
    | set(_SCHEMES)
    | DEFAULT_HEADERS
)


def spelled(name: str) -> st.SearchStrategy[str]:
    """``name`` in random case, with ``-``/``_`` between its letters."""
    return st.tuples(
        *[st.sampled_from([c, c.upper(), c + "_", c.upper() + "-", c + "-"]) for c in name]
    ).map("".join)


NAME = st.one_of(
    st.sampled_from([*sorted(k for k in _EXACT_KEYS if len(k) < 6), _CODE_KEY]),
    st.sampled_from(NAMES),
).flatmap(spelled)
VALUE = st.from_regex(r"[A-Za-z0-9+/=._~-]{1,40}", fullmatch=True)
#: ``name: value`` and its relatives: the shape every value rule reads.
ASSIGNMENT = st.tuples(
    st.sampled_from(["", '"', "'", " ", "{", "&", "\\"]),
    NAME,
    st.sampled_from(["", '"', "'"]),
    st.sampled_from([":", "=", " :", " = ", "\t=", ": ", "=\t", "  :", ":\t", "\t:"]),
    st.sampled_from(["", "Bearer ", "basic ", "Token\t"]),
    st.one_of(VALUE, VALUE.map(lambda v: f'"{v}"'), VALUE.map(lambda v: f"'{v}'")),
).map("".join)
PIECES = st.one_of(
    ASSIGNMENT,
    NAME,
    st.sampled_from(["Bearer", "Basic", "token", "bearer", "BASIC"]),
    st.sampled_from([":", "=", " :", " = ", "\t=", ": ", "=\t", "  :", ":\t"]),
    st.sampled_from(['"', "'", '\\"', "\\", "{", "}", "[", "]", ",", ";", "&", "?", " ", "\t"]),
    st.sampled_from(["[REDACTED]", "null", "true", "42", "\\u0070", "\u212a", "\u0130"]),
    VALUE,
    st.text(max_size=6),
)
LINE = st.lists(PIECES, max_size=14).map("".join).map(lambda s: s.replace("\n", " "))


def full(frame: Frame) -> Frame:
    """What the redactor does with no prefilter at all (every span looked at)."""
    with mock.patch.object(Redactor, "needs_look", return_value=True):
        return Redactor().frame(frame)


def frames_of(text: str) -> list[Frame]:
    """``text`` in every place a secret may travel."""
    b = text.encode("utf-8", "surrogatepass")
    doc = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}}
    as_key = {"jsonrpc": "2.0", "id": 1, "result": {text: "v4lue-1", "n": {text: 7}}}
    out = [
        Frame(Direction.S2C, Channel.STDERR, b + b"\n", 0, 0.0),
        Frame(Direction.S2C, Channel.STDERR, b"X-Header: " + b + b"\n", 0, 0.0),
        Frame(Direction.S2C, Channel.STDIO, b + b"\n", 0, 0.0),
        Frame(Direction.S2C, Channel.HTTP, b, 0, 0.0),
    ]
    for d in (doc, as_key):
        for ascii_only in (True, False):
            raw = json.dumps(d, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
            out.append(Frame(Direction.S2C, Channel.STDIO, raw + b"\n", 0, 0.0))
            out.append(Frame(Direction.S2C, Channel.HTTP, raw, 0, 0.0))
    return out


#: 100 generated lines per property in the default run (the planted shapes are explicit
#: examples, and run every time); 300 under --full.
SETTINGS = settings(
    max_examples=300 if running_full() else 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.corpus  # its 300 examples again under --only-full (CI's second run)
@SETTINGS
@given(LINE)
# found by this test: the plumbing key cut out behind an escaped quote (the JSON key
# '"progressToken', a credential's name) let the body through unlooked
@example('"progressToken')
def test_what_the_prefilter_lets_through_the_redactor_leaves_alone(text: str) -> None:
    for frame in frames_of(text):
        changed = full(frame).raw != frame.raw
        if changed:
            # the prefilter must look: alone, inside a relay-sized read, and among many bodies
            assert R.needs_look(frame.raw), frame.raw
            assert R.needs_look(PAD + frame.raw + b"\n" + PAD), frame.raw
            assert R.suspects([PAD, frame.raw, PAD]) == [1], frame.raw
            assert R.frame(frame).raw == full(frame).raw, frame.raw
        else:
            assert R.frame(frame).raw == frame.raw


@pytest.mark.corpus  # its 300 examples again under --only-full (CI's second run)
@SETTINGS
@given(LINE.filter(lambda s: "\r" not in s))
def test_the_value_rules_are_the_same_on_stderr_and_in_json_strings(text: str) -> None:
    try:
        line = text.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate: no stderr line carries one
    stderr = R.frame(Frame(Direction.S2C, Channel.STDERR, line + b"\n", 0, 0.0)).raw
    doc: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "result": {"text": text}}
    body = R.frame(Frame(Direction.S2C, Channel.STDIO, json.dumps(doc).encode(), 0, 0.0)).raw
    assert json.loads(body)["result"]["text"] == stderr[:-1].decode("utf-8"), (stderr, body)


def test_the_properties_see_the_planted_shapes() -> None:
    """The generators reach what matters: these come out of the rules changed."""
    for text in ("api_key: s3cr3t", "PIN = 1234", "'Otp':'1'", "Bearer abcdefgh12", "CODE=x"):
        frame = Frame(Direction.S2C, Channel.STDERR, text.encode() + b"\n", 0, 0.0)
        assert R.frame(frame).raw != frame.raw, text


def _has_a_word(raw: bytes) -> bool:
    """The prefilter's definition: some word of the rule tables in the folded bytes (upper
    case lowered, ``-``/``_`` gone, the plumbing key cut down to its quotes)."""
    folded = raw.lower().replace(b"-", b"").replace(b"_", b"").replace(b'"progresstoken"', b'""')
    return any(word in folded for word in _PREFILTER_WORDS)


_PIECES = st.sampled_from(
    [*_PREFILTER_WORDS, b'"progressToken"', b"progress", b"Token", b'"', b"\\", b"-", b"_", b" ",
     b"\n", b":", b"=", b"ping", b"author", b"unicode", b"\xe2\x84", b"\xaa", b"P", b"I", b"N"]
)  # fmt: skip


@SETTINGS
@given(st.lists(_PIECES | st.binary(max_size=6), max_size=24).map(b"".join))
def test_the_prefilter_looks_exactly_where_a_word_is(raw: bytes) -> None:
    """The one automaton over the folded bytes (``_WORDS``) finds a word wherever one is,
    alone, inside a relay-sized read and among many bodies; and nothing where none is."""
    want = _has_a_word(raw)
    assert R.needs_look(raw) is want, raw
    if b"\n" not in raw:
        assert R.needs_look(PAD + raw + b"\n" + PAD) is want, raw
        assert R.suspects([PAD, raw, PAD]) == ([1] if want else []), raw


def test_a_word_across_a_window_of_a_huge_body_is_seen() -> None:
    """A body past 1 MiB is looked at a window at a time: a word cut by a window's edge is
    still seen (the windows overlap), and the clean body is clean."""
    big = 1 << 20
    filler = b"x" * (big - 3)
    assert not R.needs_look(filler + b"y" * 100)
    for word in (b"secret", b"apikey", b'pin"'):
        assert R.needs_look(filler + word + b"y" * 100), word
