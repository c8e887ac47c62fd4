"""The fault rule language: every valid form parses, every mistake is one line with its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_proxy.faults import FaultRuleError, parse_rule, parse_rules_file
from mcp_proxy.faults.rules import parse_rules_text


def test_a_rule_with_match_and_settings() -> None:
    rule = parse_rule("delay ms=2s jitter=100 method=tools/call name=search* nth=2 p=0.5 seed=7")
    assert rule.action == "delay"
    assert rule.settings == {"ms": 2000.0, "jitter": 100.0}
    m = rule.match
    assert (m.method, m.name, m.nth, m.p, m.seed) == ("tools/call", "search*", 2, 0.5, 7)
    assert rule.text.startswith("delay ms=2s")


def test_quoted_values_and_defaults() -> None:
    rule = parse_rule('error code=-32001 message="tool is down" data=\'{"retry": true}\'')
    assert rule.settings == {"code": -32001, "message": "tool is down", "data": {"retry": True}}
    assert parse_rule("error").settings["code"] == -32603
    assert parse_rule("drop direction=response").match.direction == "s2c"


def test_http_headers_repeat() -> None:
    rule = parse_rule("http status=429 header=Retry-After:2 header='X-Why: busy'")
    assert rule.settings["status"] == 429
    assert rule.settings["header"] == ["Retry-After:2", "X-Why: busy"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dely ms=5", "column 1: unknown action 'dely' (one of delay, throttle"),
        ("delay", "delay needs ms=…"),
        ("delay ms=fast", "column 7: 'fast' is not a duration"),
        ("drop method", "column 6: 'method' is not key=value"),
        ("drop color=red", "column 6: drop does not take 'color'"),
        ("drop p=2", "column 6: '2' is not a probability between 0 and 1"),
        ("drop nth=0", "column 6: '0' must be an integer ≥ 1"),
        ("http status=99", "'99' is not an HTTP status"),
        ("http status=404 header=nocolon", "'nocolon' is not a header"),
        ("corrupt mode=shred", "'shred' is not one of truncate, cut-utf8, invalid-json"),
        ("disconnect mode=kill signal=USR1", "is not a signal mcptape sends"),
        ('error message="unclosed', 'column 15: unclosed " quote'),
        ("drop direction=sideways", "is not one of c2s, s2c, request, response"),
    ],
)
def test_mistakes_are_one_line_with_a_position(text: str, message: str) -> None:
    with pytest.raises(FaultRuleError) as info:
        parse_rule(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_empty_rule() -> None:
    with pytest.raises(FaultRuleError, match="empty rule"):
        parse_rule("   ")


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "faults.toml"
    path.write_text(
        'seed = 11\n[[fault]]\naction = "delay"\nms = 250\nmethod = "tools/call"\n'
        '[[fault]]\naction = "http"\nstatus = 503\nheader = ["Retry-After: 1"]\np = 0.25\n'
    )
    first, second = parse_rules_file(path)
    assert first.action == "delay" and first.settings["ms"] == 250.0 and first.match.seed == 11
    assert second.settings["header"] == ["Retry-After: 1"] and second.match.p == 0.25


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[fault]]\nms = 5\n", "fault #1: needs action"),
        ('[[fault]]\naction = "drop"\n[[fault]]\naction = "delay"\n', "fault #2: delay needs ms=…"),
        ("fault = 3\n", "'fault' must be an array of tables"),
        ("[[faults]]\n", "unknown top-level key 'faults'"),
        ("[[fault]\n", "not valid TOML"),
        ('[[fault]]\naction = "drop"\nnth = "x"\n', "fault #1, key 'nth': 'x' is not an integer"),
    ],
)
def test_toml_mistakes(text: str, message: str) -> None:
    with pytest.raises(FaultRuleError) as info:
        parse_rules_text(text, source="f.toml")
    assert message in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(FaultRuleError, match="cannot read fault rules"):
        parse_rules_file(tmp_path / "missing.toml")
