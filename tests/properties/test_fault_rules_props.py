"""The fault rule language: any text parses or fails with its own one-line error, and a rule
written as a line, as a TOML table or as the line a TOML rule prints is the same rule."""

from __future__ import annotations

import json
import shlex

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.faults.rules import FaultRuleError, Rule, parse_rule, parse_rules_text

WORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\\"),
    max_size=12,
)
GLOBS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz/_-*?.", min_size=1, max_size=16)
DURATIONS = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(0, 10**4).map(lambda n: f"{n}ms"),
    st.integers(0, 100).map(lambda n: f"{n}s"),
)
MATCH = st.fixed_dictionaries(
    {},
    optional={
        "direction": st.sampled_from(["c2s", "s2c", "request", "response"]),
        "method": GLOBS,
        "name": GLOBS,
        "nth": st.integers(1, 99).map(str),
        "times": st.integers(1, 99).map(str),
        "p": st.floats(0, 1).map(repr),
        "seed": st.integers(-(10**9), 10**9).map(str),
    },
)
SETTINGS = {
    "delay": st.fixed_dictionaries({"ms": DURATIONS}, optional={"jitter": DURATIONS}),
    "throttle": st.fixed_dictionaries({"bps": st.integers(0, 10**7).map(str)}),
    "drop": st.just({}),
    "error": st.fixed_dictionaries(
        {}, optional={"code": st.integers(-(2**31), 2**31).map(str), "message": WORDS}
    ),
    "tool-error": st.fixed_dictionaries({}, optional={"text": WORDS}),
    "http": st.fixed_dictionaries(
        {"status": st.integers(100, 599).map(str)}, optional={"body": WORDS}
    ),
    "corrupt": st.fixed_dictionaries(
        {}, optional={"mode": st.sampled_from(["truncate", "cut-utf8", "invalid-json"])}
    ),
    "disconnect": st.fixed_dictionaries(
        {"mode": st.sampled_from(["close-stdin", "kill", "reset", "end-stream"])},
        optional={"signal": st.sampled_from(["TERM", "sigkill", "INT"])},
    ),
    "duplicate": st.just({}),
    "reorder": st.fixed_dictionaries({}, optional={"wait": DURATIONS}),
}
RULES = st.sampled_from(sorted(SETTINGS)).flatmap(
    lambda action: st.tuples(st.just(action), SETTINGS[action], MATCH).map(
        lambda t: (t[0], {**t[1], **t[2]})
    )
)


def line(action: str, values: dict[str, str]) -> str:
    return " ".join([action, *(f"{k}={shlex.quote(v)}" for k, v in values.items())])


def toml(action: str, values: dict[str, str]) -> str:
    body = "".join(f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in values.items())
    return f'[[fault]]\naction = "{action}"\n{body}'


def same(a: Rule, b: Rule) -> bool:
    return (a.action, dict(a.settings), a.match) == (b.action, dict(b.settings), b.match)


@given(RULES)
def test_a_rule_as_a_line_as_toml_and_as_printed_is_one_rule(
    rule: tuple[str, dict[str, str]],
) -> None:
    action, values = rule
    from_line = parse_rule(line(action, values))
    (from_toml,) = parse_rules_text(toml(action, values))
    assert same(from_line, from_toml)
    assert same(parse_rule(from_toml.text), from_line)  # what a finding shows parses back
    assert same(parse_rule(from_line.text), from_line)


@given(st.text(max_size=60) | RULES.map(lambda r: line(*r)).map(lambda s: s[: len(s) // 2]))
def test_any_text_is_a_rule_or_one_fault_rule_error(text: str) -> None:
    try:
        parse_rule(text)
    except FaultRuleError as exc:
        assert "\n" not in str(exc).replace(repr(text), "") and str(exc)


@given(st.text(max_size=80))
def test_any_toml_text_is_rules_or_one_fault_rule_error(text: str) -> None:
    try:
        parse_rules_text("[[fault]]\n" + text)
    except FaultRuleError as exc:
        assert str(exc)
